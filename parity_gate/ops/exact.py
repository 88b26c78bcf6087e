"""Exact references for elementwise op cases: integers exactly, floats in mpmath.

A float64 case has no wider float to re-run in, and an integer case no float
that holds its extremes, so their mismatches used to stay "unverified"; and
a float re-run in float64 shares eager's algorithm, so `floor_divide(inf, y)`
giving NaN there "confirmed" eager's NaN. Here the variant's own call text is
evaluated element by element with scalar stand-ins for `torch` and `F`:
Python integers (wrapped to the output dtype as torch wraps) for integer
data, `fractions.Fraction` where division must be exact, and mpmath at
`PREC` bits for everything else, rounded once to the output dtype.

Only calls made entirely of the elementwise functions below get a reference
(a reduction, an index or a method call raises AttributeError here and the
case keeps the float64 re-run). mpmath has no signed zero and no IEEE
division by zero: such elements take the IEEE float64 value (`fallback`).
Pure: numpy arrays in, numpy arrays out; runs in the worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

PREC = 256  # bits: far beyond float64's 53, fast enough for special functions

_NAN = mpmath.mpf("nan")


def _f(x: Any) -> Any:
    """A scalar as mpf (Fractions and ints exactly)."""
    if isinstance(x, Fraction):
        return mpmath.mpf(x.numerator) / x.denominator
    return x if isinstance(x, mpmath.mpf) else mpmath.mpf(x)


def _real(v: Any) -> Any:
    """mpmath returns complex numbers outside a real domain; IEEE returns NaN."""
    if isinstance(v, mpmath.mpc):
        return _NAN if v.imag != 0 else v.real
    return v


def _finite(*xs: Any) -> bool:
    return all(isinstance(x, (int, Fraction)) or mpmath.isfinite(x) for x in xs)


def _q(x: Any) -> Fraction:
    """A finite scalar as an exact fraction (mpf at PREC bits is a dyadic rational)."""
    if isinstance(x, (int, Fraction)):
        return Fraction(x)
    sign, man, exp, _ = mpmath.mpf(x)._mpf_
    return (-1 if sign else 1) * Fraction(int(man)) * (Fraction(2) ** int(exp))


class Fallback(Exception):
    """This element's value is IEEE's (signed zero, x/0, a function at ±inf): take the
    float64 fallback."""


class ExactZero(Fallback):
    """The exact value is zero and only its sign is IEEE's: the fallback gives the sign
    where it is a zero itself; where it is not (eager's fmod(huge, tiny) is NaN, the
    exact remainder 0), the zero takes the sign of the first float operand, as IEEE's
    fmod and remainder give it (the dividend's)."""


def _div(x: Any, y: Any, rounding_mode: str | None = None) -> Any:
    if _is_nan(x) or _is_nan(y):
        return _NAN
    if _finite(x, y) and _q(y) != 0:
        q = _q(x) / _q(y)
        if rounding_mode == "trunc":
            return Fraction(math.trunc(q))
        if rounding_mode == "floor":
            return Fraction(math.floor(q))
        return q
    if rounding_mode is None or not _finite(x, y):
        v = _f(x) / _f(y)  # ZeroDivisionError: an IEEE-defined element, see fallback
        if rounding_mode == "floor":
            return mpmath.floor(v) if mpmath.isfinite(v) or mpmath.isinf(v) else v
        if rounding_mode == "trunc":
            return v if not mpmath.isfinite(v) else mpmath.mpf(int(v))
        return v
    raise ZeroDivisionError


def _fmod(x: Any, y: Any) -> Any:
    if _is_nan(x) or _is_nan(y):
        return _NAN
    if _finite(x, y) and _q(y) != 0:
        q = _q(x) / _q(y)
        return _q(x) - _q(y) * math.trunc(q)
    if not _finite(x) or (_finite(y) and _q(y) == 0):
        return _NAN
    return x  # finite x, infinite y


def _remainder(x: Any, y: Any) -> Any:
    if _is_nan(x) or _is_nan(y):
        return _NAN
    if _finite(x, y) and _q(y) != 0:
        return _q(x) - _q(y) * math.floor(_q(x) / _q(y))
    if not _finite(x) or (_finite(y) and _q(y) == 0):
        return _NAN
    # torch: fmod(x, ±inf) = x, then moved by the divisor when the signs differ
    return x if _f(x) == 0 or (_f(y) < 0) == (_f(x) < 0) else _f(x) + _f(y)


def _nanmax(x: Any, y: Any, keep_nan: bool, smaller: bool = False) -> Any:
    xn, yn = _is_nan(x), _is_nan(y)
    if xn or yn:
        if keep_nan:
            return _NAN
        return y if xn else x
    return (min if smaller else max)(x, y, key=_f)


def _is_nan(x: Any) -> bool:
    return isinstance(x, mpmath.mpf) and mpmath.isnan(x)


def _sign(x: Any) -> Any:
    if _is_nan(x):
        return _NAN
    v = _f(x)
    return 1 if v > 0 else -1 if v < 0 else 0


def _clamp(x: Any, min: Any = None, max: Any = None) -> Any:
    if _is_nan(x):
        return x
    v = x
    if min is not None:
        v = min if _f(v) < _f(min) else v
    if max is not None:
        v = max if _f(v) > _f(max) else v
    return v


def _m(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An mpmath function of finite real arguments, NaN outside its real domain.

    NaN in gives NaN; ±inf in is IEEE's business (C99 Annex F limits, which
    mpmath does not follow, e.g. atan2(inf, inf)): the element falls back.
    """
    def call(*a: Any) -> Any:
        if any(_is_nan(x) for x in a):
            return _NAN
        if not _finite(*a):
            raise Fallback
        return _real(fn(*(_f(x) for x in a)))
    return call


def _sigmoid(x: Any) -> Any:
    return 1 / (1 + mpmath.exp(-_f(x)))


def _erfcx(x: Any) -> Any:
    v = _f(x)
    if mpmath.isinf(v):
        return mpmath.mpf(0) if v > 0 else mpmath.inf
    return mpmath.exp(v * v) * mpmath.erfc(v)


def _lgamma(x: Any) -> Any:
    v = _f(x)
    if mpmath.isinf(v):
        return mpmath.inf
    if v <= 0 and v == mpmath.floor(v):
        return mpmath.inf
    return mpmath.log(abs(mpmath.gamma(v)))


def _logaddexp(x: Any, y: Any, base: float = math.e) -> Any:
    a, b = _f(x), _f(y)
    if mpmath.isinf(a) and a == b:
        return a
    hi, lo = (a, b) if a >= b else (b, a)
    ln = mpmath.log(base)
    return hi + mpmath.log1p(mpmath.exp((lo - hi) * ln)) / ln


def _xlogy(x: Any, y: Any) -> Any:
    if _is_nan(y):
        return _NAN
    return mpmath.mpf(0) if _f(x) == 0 else _f(x) * _real(mpmath.log(_f(y)))


def _pow(x: Any, y: Any) -> Any:
    if isinstance(x, int) and isinstance(y, int):
        if y < 0:  # torch: 1 and -1 keep their value, anything else truncates to 0
            if x == 0:
                raise ValueError("0 to a negative integer power")
            return x ** (-y % 2 + 2) if x in (1, -1) else 0
        return pow(x, y, 1 << 64)  # wrapped at the end anyway; never a huge integer
    if _is_nan(y) or (_is_nan(x) and _f(y) != 0):
        return _NAN
    if not _finite(x, y):
        raise Fallback
    return _real(mpmath.power(_f(x), _f(y)))


def _hypot(x: Any, y: Any) -> Any:
    if any(isinstance(v, mpmath.mpf) and mpmath.isinf(v) for v in (x, y)):
        return mpmath.inf  # IEEE: even hypot(inf, nan)
    return _m(mpmath.hypot)(x, y)


def _round(x: Any, decimals: int = 0) -> Any:
    if not _finite(x):
        return x
    q = _q(x) * Fraction(10) ** decimals
    return Fraction(round(q)) / Fraction(10) ** decimals  # Python rounds half to even


class _NS:
    """A namespace of scalar functions; a name not defined here means "no reference"."""

    def __init__(self, **fns: Any) -> None:
        self.__dict__.update(fns)


_UNARY = {
    "exp": mpmath.exp, "expm1": mpmath.expm1, "log": mpmath.log, "log2": lambda v: mpmath.log(v, 2),
    "log10": mpmath.log10, "log1p": mpmath.log1p, "sqrt": mpmath.sqrt,
    "rsqrt": lambda v: 1 / mpmath.sqrt(v), "sin": mpmath.sin, "cos": mpmath.cos,
    "tan": mpmath.tan, "asin": mpmath.asin, "acos": mpmath.acos, "atan": mpmath.atan,
    "sinh": mpmath.sinh, "cosh": mpmath.cosh, "tanh": mpmath.tanh, "asinh": mpmath.asinh,
    "acosh": mpmath.acosh, "atanh": mpmath.atanh, "erf": mpmath.erf, "erfc": mpmath.erfc,
    "erfinv": mpmath.erfinv, "exp2": lambda v: mpmath.power(2, v),
    "deg2rad": lambda v: v * mpmath.pi / 180, "rad2deg": lambda v: v * 180 / mpmath.pi,
    "reciprocal": lambda v: 1 / v,
}
_TORCH: dict[str, Any] = {name: _m(fn) for name, fn in _UNARY.items()}
_TORCH.update(
    abs=abs, neg=lambda x: -x, positive=lambda x: x, square=lambda x: x * x,
    sigmoid=_m(_sigmoid), lgamma=_m(_lgamma), sign=_sign,
    add=lambda x, y, alpha=1: x + alpha * y, sub=lambda x, y, alpha=1: x - alpha * y,
    rsub=lambda x, y, alpha=1: y - alpha * x, mul=lambda x, y: x * y,
    div=_div, true_divide=_div, floor_divide=lambda x, y: _div(x, y, "floor"),
    addcdiv=lambda x, y, z, value=1: _f(x) + _f(value) * _f(_div(y, z)),
    addcmul=lambda x, y, z, value=1: _f(x) + _f(value) * _f(y) * _f(z),
    fmod=_fmod, remainder=_remainder, atan2=_m(mpmath.atan2), hypot=_hypot,
    maximum=lambda x, y: _nanmax(x, y, True), minimum=lambda x, y: _nanmax(x, y, True, True),
    fmax=lambda x, y: _nanmax(x, y, False), fmin=lambda x, y: _nanmax(x, y, False, True),
    xlogy=_m(_xlogy), logaddexp=_m(_logaddexp),
    logaddexp2=_m(lambda x, y: _logaddexp(x, y, 2.0)),
    floor=lambda x: Fraction(math.floor(_q(x))) if _finite(x) else x,
    ceil=lambda x: Fraction(math.ceil(_q(x))) if _finite(x) else x,
    trunc=lambda x: Fraction(math.trunc(_q(x))) if _finite(x) else x,
    fix=lambda x: Fraction(math.trunc(_q(x))) if _finite(x) else x,
    frac=lambda x: _q(x) - math.trunc(_q(x)) if _finite(x) else _NAN,
    round=_round, clamp=_clamp, pow=_pow, float_power=lambda x, y: _pow(_f(x), _f(y)),
    where=lambda m, x, y: x if m else y,
    heaviside=lambda x, y: y if _f(x) == 0 else int(_f(x) > 0),  # torch: NaN > 0 is false
    gcd=lambda x, y: Fraction(math.gcd(int(x), int(y))),
    lcm=lambda x, y: Fraction(abs(int(x) * int(y)) // math.gcd(int(x), int(y))
                              if x and y else 0),
    bitwise_and=lambda x, y: int(x) & int(y), bitwise_or=lambda x, y: int(x) | int(y),
    bitwise_xor=lambda x, y: int(x) ^ int(y), bitwise_not=lambda x: ~int(x),
    bitwise_left_shift=lambda x, y: int(x) << int(y),
    bitwise_right_shift=lambda x, y: int(x) >> int(y),
)
_SPECIAL = _NS(erfcx=_m(_erfcx), erfc=_TORCH["erfc"], erf=_TORCH["erf"],
               erfinv=_TORCH["erfinv"], gammaln=_TORCH["lgamma"], expit=_TORCH["sigmoid"],
               ndtr=_m(mpmath.ncdf),
               i0=_m(lambda v: mpmath.besseli(0, v)), i1=_m(lambda v: mpmath.besseli(1, v)),
               i0e=_m(lambda v: mpmath.besseli(0, v) * mpmath.exp(-abs(v))),
               i1e=_m(lambda v: mpmath.besseli(1, v) * mpmath.exp(-abs(v))),
               digamma=_m(mpmath.digamma), bessel_j0=_m(lambda v: mpmath.besselj(0, v)),
               bessel_j1=_m(lambda v: mpmath.besselj(1, v)),
               modified_bessel_i0=_m(lambda v: mpmath.besseli(0, v)),
               sinc=_m(lambda v: mpmath.sinpi(v) / (mpmath.pi * v) if v else mpmath.mpf(1)))
_TORCH_NS = _NS(special=_SPECIAL, **_TORCH)
_F_NS = _NS(relu=lambda x: x if _is_nan(x) or _f(x) > 0 else 0, sigmoid=_TORCH["sigmoid"],
            softsign=_m(lambda v: v / (1 + abs(v))), silu=_m(lambda v: v / (1 + mpmath.exp(-v))),
            gelu=_m(lambda v: v * mpmath.ncdf(v)), tanh=_TORCH["tanh"])


def _scalar(value: Any, kind: str) -> Any:
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    return mpmath.mpf(float(value))


def _to_output(value: Any, dtype: np.dtype) -> Any:
    """The exact value rounded (floats) or wrapped (integers, as torch wraps) to `dtype`."""
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        q = _q(value)
        if q.denominator != 1:
            raise ValueError("non-integer result for an integer output")
        bits = dtype.itemsize * 8
        v = int(q) % (1 << bits)
        if dtype.kind == "i" and v >= 1 << (bits - 1):
            v -= 1 << bits
        return v
    if isinstance(value, bool):
        return float(value)
    v = _f(value)
    if v == 0:
        raise ExactZero("the sign of zero is IEEE's")
    return float(v)


_BELOW_ZERO = mpmath.mpf(-1) * mpmath.mpf(2) ** -4000  # far below float64's smallest value


def _signless(fn: Callable[..., Any], at_zero: list[Any], below_zero: list[Any],
              dtype: np.dtype) -> Any:
    """An element with a -0 input, which mpmath cannot express: the call at +0 and just
    below zero. Where both round to the same non-zero value the zero's sign does not
    change the answer (addcdiv(-0, y, y, value=0.5) is 0.5), and that value is exact;
    where they differ (atan2's branch cut, floor, sign, log's domain) or the value is a
    zero, IEEE decides (the fallback)."""
    try:
        up, down = _to_output(fn(*at_zero), dtype), _to_output(fn(*below_zero), dtype)
    except ExactZero:
        raise Fallback("the sign of zero is IEEE's") from None
    if (isinstance(up, float) and (math.isnan(up) or up == 0)) or up != down:
        raise Fallback("the sign of the zero input decides")
    return up


def reference(call: str, names: list[str], inputs: dict[str, np.ndarray],
              outputs: list[np.ndarray], fallback: list[np.ndarray] | None
              ) -> tuple[list[np.ndarray], int] | None:
    """The exact result of `call` per element, and how many elements are exact.

    None when the call is not elementwise in the functions above, or an
    integer element has no exact value. `fallback` (IEEE float64 values of
    the same call) fills zeros and divisions by zero, where IEEE defines the
    answer and mpmath cannot express it.
    """
    if len(outputs) != 1 or outputs[0].size == 0:
        return None
    out = outputs[0]
    arrays = [np.asarray(inputs[n]) for n in names]
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        return None
    if shape != out.shape:
        return None
    kinds = ["f" if a.dtype.name == "bfloat16" else a.dtype.kind for a in arrays]
    flat = [np.broadcast_to(a.astype(np.float64) if k == "f" else a, shape).reshape(-1)
            for a, k in zip(arrays, kinds, strict=True)]
    fn = eval(f"lambda {', '.join(names)}: {call}",  # the catalogue's own text
              {"torch": _TORCH_NS, "F": _F_NS, "math": math})
    back = fallback[0].reshape(-1) if fallback is not None else None
    result = np.empty(out.size, dtype=np.float64 if out.dtype.kind == "f" else out.dtype)
    exact = 0
    negzero = np.zeros(out.size, dtype=bool)
    for f, k in zip(flat, kinds, strict=True):
        if k == "f":
            negzero |= (f == 0) & np.signbit(f)
    with mpmath.workprec(PREC):
        for i in range(out.size):
            args = [_scalar(f[i], k) for f, k in zip(flat, kinds, strict=True)]
            try:
                if negzero[i]:
                    below = [_BELOW_ZERO if k == "f" and f[i] == 0 and np.signbit(f[i]) else a
                             for a, f, k in zip(args, flat, kinds, strict=True)]
                    result[i] = _signless(fn, args, below, out.dtype)
                else:
                    result[i] = _to_output(fn(*args), out.dtype)
                exact += 1
            except AttributeError:
                return None  # not an elementwise call of known functions
            except ExactZero:
                if out.dtype.kind != "f":
                    return None
                sign = back[i] if back is not None and back[i] == 0 else next(
                    (f[i] for f, k in zip(flat, kinds, strict=True) if k == "f"), 1.0)
                result[i] = math.copysign(0.0, sign)
                exact += 1
            except (Fallback, ZeroDivisionError, ValueError, OverflowError, TypeError):
                if back is None or out.dtype.kind != "f":
                    return None
                result[i] = back[i]
    if not exact:
        return None
    return [result.reshape(shape)], exact
