"""The op catalogue: op-and-argument variants, by family, as declarative records.

Each record names its call, its graph inputs and the dtypes eager accepts;
tables keep families compact. Conventions:

* Binary ops use two (13, 13) tensors: the `specials` class then places
  every pair of special values (13 of them) somewhere in the pair.
* `empty` zeroes each input's last dim, so `dim=-1` reductions reduce over
  nothing; ops whose batch dim is the natural empty one say `empty_shape`.
* Outputs that are legitimately nondeterministic (indices among ties of an
  unstable sort) are listed in `shape_only`.
* `dtypes` says what the op's meaning allows (every dtype unless it is a
  cast from float, a bitwise op ...); which of those eager accepts is
  measured by trying eager (ops/accepted.py), so no record guesses it.
* `xfail(reason, link)`/`skip(reason)` always carry a reason; the xfail's
  reason and link are what the generated baseline (ops/known-findings.yml)
  writes for the findings it covers, and the file keeps their figures.
"""

from __future__ import annotations

import struct

from parity_gate.ops.records import (
    ALL,
    EMPTY,
    FLOATS,
    INTS,
    NORMAL,
    SIGNED_INTS,
    SPECIALS,
    Arg,
    OpVariant,
)

X = Arg("x", (4, 8))
X13 = Arg("x", (13, 13))
PAIR = (X13, Arg("y", (13, 13)))
INT_BOOL = (*INTS, "bool")
NO_SPECIALS = (NORMAL, EMPTY)


def op(id: str, family: str, call: str, args: tuple[Arg, ...] = (X,),
       dtypes: tuple[str, ...] = ALL, **kw: object) -> OpVariant:
    return OpVariant(id, family, call, args, dtypes, **kw)  # type: ignore[arg-type]


def _family(family: str, rows: list[tuple], args: tuple[Arg, ...] = (X,),
            dtypes: tuple[str, ...] = ALL, **kw: object) -> list[OpVariant]:
    """Rows are (id, call) or (id, call, {overrides})."""
    out = []
    for row in rows:
        vid, call, *extra = row
        opts = {"args": args, "dtypes": dtypes, **kw, **(extra[0] if extra else {})}
        out.append(op(vid, family, call, **opts))
    return out


# --------------------------------------------------------------------------
# unary math: floats, and ints/bool where eager promotes them

UNARY = _family("unary", [
    ("abs", "torch.abs(x)", {"dtypes": ALL, "signed_zeros": True}),
    ("neg", "torch.neg(x)", {"dtypes": ALL, "signed_zeros": True}),
    ("positive", "torch.positive(x)", {"dtypes": ALL}),
    ("square", "torch.square(x)", {"dtypes": ALL}),
    ("exp", "torch.exp(x)"), ("exp2", "torch.exp2(x)"), ("expm1", "torch.expm1(x)"),
    ("log", "torch.log(x)"), ("log2", "torch.log2(x)"), ("log10", "torch.log10(x)"),
    ("log1p", "torch.log1p(x)"), ("sqrt", "torch.sqrt(x)"), ("rsqrt", "torch.rsqrt(x)"),
    ("sin", "torch.sin(x)"), ("cos", "torch.cos(x)"), ("tan", "torch.tan(x)"),
    ("asin", "torch.asin(x)", {"args": (Arg("x", (4, 8), low=-1, high=1),)}),
    ("acos", "torch.acos(x)", {"args": (Arg("x", (4, 8), low=-1, high=1),)}),
    ("atan", "torch.atan(x)"), ("sinh", "torch.sinh(x)"), ("cosh", "torch.cosh(x)"),
    ("tanh", "torch.tanh(x)"), ("asinh", "torch.asinh(x)"),
    ("acosh", "torch.acosh(x)", {"args": (Arg("x", (4, 8), low=1, high=5),)}),
    ("atanh", "torch.atanh(x)", {"args": (Arg("x", (4, 8), low=-1, high=1),)}),
    ("sigmoid", "torch.sigmoid(x)"), ("erf", "torch.erf(x)"), ("erfc", "torch.erfc(x)"),
    ("erfinv", "torch.erfinv(x)", {"args": (Arg("x", (4, 8), low=-1, high=1),)}),
    ("reciprocal", "torch.reciprocal(x)", {"signed_zeros": True}),
    ("sign", "torch.sign(x)", {"dtypes": ALL}),
    ("sgn", "torch.sgn(x)", {"dtypes": ALL}),
    ("lgamma", "torch.lgamma(x)"),
    ("deg2rad", "torch.deg2rad(x)"), ("rad2deg", "torch.rad2deg(x)"),
    ("logit", "torch.logit(x)", {"args": (Arg("x", (4, 8), low=0, high=1),)}),
    ("logit.eps", "torch.logit(x, eps=1e-6)", {"args": (Arg("x", (4, 8), low=0, high=1),)}),
    ("angle", "torch.angle(x)", {"dtypes": ALL}),
    ("pow.scalar2", "torch.pow(x, 2)", {"dtypes": ALL}),
    ("pow.scalar_half", "torch.pow(x, 0.5)"),
    ("pow.scalar_neg1", "torch.pow(x, -1)", {"dtypes": ALL}),
    ("pow.scalar_base", "torch.pow(2.0, x)", {"dtypes": ALL}),
    ("float_power.scalar", "torch.float_power(x, 2)", {"dtypes": ALL}),
    ("bitwise_not", "torch.bitwise_not(x)", {"dtypes": INT_BOOL}),
], dtypes=ALL)

ROUNDING = _family("rounding", [
    ("floor", "torch.floor(x)"), ("ceil", "torch.ceil(x)"), ("round", "torch.round(x)"),
    ("round.decimals1", "torch.round(x, decimals=1)"),
    ("round.decimals3", "torch.round(x, decimals=3)"),
    ("round.decimals_neg1", "torch.round(x, decimals=-1)"),
    ("trunc", "torch.trunc(x)"), ("fix", "torch.fix(x)"), ("frac", "torch.frac(x)"),
    ("round.halves", "torch.round(x)", {"args": (Arg("x", (4, 8), kind="choice", values=(
        -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5)),), "input_classes": NO_SPECIALS}),
], args=(Arg("x", (4, 8), low=-20, high=20),), signed_zeros=True)

CAST = _family("cast", [
    ("to.float32", "x.to(torch.float32)", {"dtypes": ALL}),
    ("to.float16", "x.to(torch.float16)", {"dtypes": ALL}),
    ("to.bfloat16", "x.to(torch.bfloat16)", {"dtypes": ALL}),
    ("to.float64", "x.to(torch.float64)", {"dtypes": ALL}),
    ("to.bool", "x.to(torch.bool)", {"dtypes": ALL}),
    ("to.int8", "x.to(torch.int8)", {"dtypes": INT_BOOL}),
    ("to.uint8", "x.to(torch.uint8)", {"dtypes": INT_BOOL}),
    ("to.int32", "x.to(torch.int32)", {"dtypes": INT_BOOL}),
    ("to.int64", "x.to(torch.int64)", {"dtypes": INT_BOOL}),
    # float → int of NaN/inf/out-of-range is undefined in C and in ONNX: ordinary data only
    ("to.int64.from_float", "x.to(torch.int64)", {"input_classes": NO_SPECIALS}),
    ("to.int32.from_float", "x.to(torch.int32)", {"input_classes": NO_SPECIALS}),
    ("to.int8.from_float", "x.to(torch.int8)", {"input_classes": NO_SPECIALS}),
], dtypes=FLOATS)  # the int-to-int casts above take INT_BOOL; these are casts from float

PREDICATE = _family("predicate", [
    ("isnan", "torch.isnan(x)"), ("isinf", "torch.isinf(x)"),
    ("isfinite", "torch.isfinite(x)"), ("isposinf", "torch.isposinf(x)"),
    ("isneginf", "torch.isneginf(x)"), ("signbit", "torch.signbit(x)"),
    ("isreal", "torch.isreal(x)"),
    ("isclose", "torch.isclose(x, y)", {"args": PAIR}),
    ("isclose.equal_nan", "torch.isclose(x, y, equal_nan=True)", {"args": PAIR}),
    ("isclose.tols", "torch.isclose(x, y, rtol=0.1, atol=0.5)", {"args": PAIR}),
    ("isin", "torch.isin(x, y)", {"args": (X, Arg("y", (5,)))}),
], dtypes=ALL)

# --------------------------------------------------------------------------
# binary arithmetic, comparisons, logical

DIVISOR = Arg("y", (13, 13), nonzero_int=True)
BINARY = _family("binary", [
    ("add", "torch.add(x, y)", {"dtypes": ALL}),
    ("add.alpha", "torch.add(x, y, alpha=2)", {"dtypes": ALL}),
    ("add.scalar", "x + 2.5", {"args": (X13,)}),
    ("add.broadcast", "x + y", {"args": (Arg("x", (13, 13)), Arg("y", (13,)))}),
    ("sub", "torch.sub(x, y)", {"dtypes": ALL}),
    ("sub.alpha", "torch.sub(x, y, alpha=3)", {"dtypes": ALL}),
    ("rsub", "torch.rsub(x, y)", {"dtypes": ALL}),
    ("mul", "torch.mul(x, y)", {"dtypes": ALL}),
    ("mul.scalar", "x * -1.5", {"args": (X13,), "dtypes": ALL}),
    ("div", "torch.div(x, y)", {"dtypes": ALL, "signed_zeros": True}),
    ("div.trunc", "torch.div(x, y, rounding_mode='trunc')",
     {"args": (PAIR[0], DIVISOR), "dtypes": ALL}),
    ("div.floor", "torch.div(x, y, rounding_mode='floor')",
     {"args": (PAIR[0], DIVISOR), "dtypes": ALL}),
    ("div.scalar", "x / 3", {"args": (X13,), "dtypes": ALL}),
    ("true_divide", "torch.true_divide(x, y)", {"dtypes": ALL}),
    ("floor_divide", "torch.floor_divide(x, y)", {"args": (PAIR[0], DIVISOR),
                                                  "dtypes": ALL}),
    ("fmod", "torch.fmod(x, y)", {"args": (PAIR[0], DIVISOR), "dtypes": ALL,
                                  "signed_zeros": True}),
    ("fmod.scalar", "torch.fmod(x, 1.5)", {"args": (X13,)}),
    ("remainder", "torch.remainder(x, y)", {"args": (PAIR[0], DIVISOR), "dtypes": ALL}),
    ("remainder.scalar", "torch.remainder(x, -1.5)", {"args": (X13,)}),
    ("pow", "torch.pow(x, y)", {"args": (PAIR[0], Arg("y", (13, 13), low=0, high=4)),
                                "dtypes": ALL}),
    ("float_power", "torch.float_power(x, y)", {"dtypes": ALL}),
    ("atan2", "torch.atan2(x, y)", {"dtypes": ALL, "signed_zeros": True}),
    ("hypot", "torch.hypot(x, y)"),
    ("copysign", "torch.copysign(x, y)", {"dtypes": ALL, "signed_zeros": True}),
    ("maximum", "torch.maximum(x, y)", {"dtypes": ALL}),
    ("minimum", "torch.minimum(x, y)", {"dtypes": ALL}),
    ("fmax", "torch.fmax(x, y)", {"dtypes": ALL}),
    ("fmin", "torch.fmin(x, y)", {"dtypes": ALL}),
    ("xlogy", "torch.xlogy(x, y)", {"dtypes": ALL}),
    ("logaddexp", "torch.logaddexp(x, y)"),
    ("logaddexp2", "torch.logaddexp2(x, y)"),
    ("ldexp", "torch.ldexp(x, y)", {"args": (PAIR[0], Arg("y", (13, 13), kind="index", low=-4,
                                                           high=5))}),
    ("lerp.scalar", "torch.lerp(x, y, 0.3)"),
    ("lerp.tensor", "torch.lerp(x, y, w)", {"args": (*PAIR, Arg("w", (13, 13), low=0,
                                                                 high=1))}),
    ("addcmul", "torch.addcmul(x, y, z, value=0.5)", {"args": (*PAIR, Arg("z", (13, 13))),
                                                      "dtypes": ALL}),
    ("addcdiv", "torch.addcdiv(x, y, z, value=0.5)", {"args": (*PAIR, Arg("z", (13, 13)))}),
    ("heaviside", "torch.heaviside(x, y)", {"dtypes": ALL}),
    ("nextafter", "torch.nextafter(x, y)", {"dtypes": ALL}),
    ("bitwise_and", "torch.bitwise_and(x, y)", {"dtypes": INT_BOOL}),
    ("bitwise_or", "torch.bitwise_or(x, y)", {"dtypes": INT_BOOL}),
    ("bitwise_xor", "torch.bitwise_xor(x, y)", {"dtypes": INT_BOOL}),
    ("bitwise_left_shift", "torch.bitwise_left_shift(x, y)",
     {"args": (PAIR[0], Arg("y", (13, 13), low=0, high=7, specials=False)), "dtypes": INTS}),
    ("bitwise_right_shift", "torch.bitwise_right_shift(x, y)",
     {"args": (PAIR[0], Arg("y", (13, 13), low=0, high=7, specials=False)), "dtypes": INTS}),
    ("lshift.operator", "x << y",
     {"args": (PAIR[0], Arg("y", (13, 13), low=0, high=7, specials=False)), "dtypes": INTS}),
    ("rshift.operator", "x >> y",
     {"args": (PAIR[0], Arg("y", (13, 13), low=0, high=7, specials=False)), "dtypes": INTS}),
    ("lshift.operator_scalar", "x << 2", {"args": (PAIR[0],), "dtypes": INTS}),
    ("rshift.operator_scalar", "x >> 1", {"args": (PAIR[0],), "dtypes": INTS}),
    ("gcd", "torch.gcd(x, y)", {"dtypes": INTS}),
    ("lcm", "torch.lcm(x, y)", {"dtypes": INTS}),
    ("squared_difference", "(x - y) ** 2", {"dtypes": ALL}),
], args=PAIR)

COMPARE = _family("compare", [
    ("eq", "torch.eq(x, y)"), ("ne", "torch.ne(x, y)"), ("lt", "torch.lt(x, y)"),
    ("le", "torch.le(x, y)"), ("gt", "torch.gt(x, y)"), ("ge", "torch.ge(x, y)"),
    ("eq.scalar", "x == 0", {"args": (X13,)}), ("lt.scalar", "x < 0.5", {"args": (X13,)}),
    ("ge.scalar", "x >= -1", {"args": (X13,)}),
    ("gt.broadcast", "x > y", {"args": (Arg("x", (13, 13)), Arg("y", (13, 1)))}),
    ("logical_and", "torch.logical_and(x, y)"), ("logical_or", "torch.logical_or(x, y)"),
    ("logical_xor", "torch.logical_xor(x, y)"),
    ("logical_not", "torch.logical_not(x)", {"args": (X,)}),
], args=PAIR, dtypes=ALL)

# --------------------------------------------------------------------------
# reductions, softmax family, cumulative, sort

REDUCTION = _family("reduction", [
    ("sum", "torch.sum(x)", {"dtypes": ALL}),
    ("sum.dim", "torch.sum(x, dim=-1)", {"dtypes": ALL}),
    ("sum.keepdim", "torch.sum(x, dim=-1, keepdim=True)", {"dtypes": ALL}),
    ("sum.dim0", "torch.sum(x, dim=0)", {"dtypes": ALL}),
    ("sum.dims", "torch.sum(x, dim=(0, 1))", {"dtypes": ALL}),
    ("sum.dtype_f32", "torch.sum(x, dim=-1, dtype=torch.float32)", {"dtypes": ALL}),
    ("sum.dtype_f64", "torch.sum(x, dim=-1, dtype=torch.float64)", {"dtypes": ALL}),
    ("mean", "torch.mean(x)"), ("mean.dim", "torch.mean(x, dim=-1)"),
    ("mean.keepdim", "torch.mean(x, dim=(0, 1), keepdim=True)"),
    ("mean.dtype_f32", "torch.mean(x, dim=-1, dtype=torch.float32)"),
    ("prod", "torch.prod(x)", {"dtypes": ALL}),
    ("prod.dim", "torch.prod(x, dim=-1)", {"dtypes": ALL}),
    ("prod.dtype_f64", "torch.prod(x, dim=-1, dtype=torch.float64)"),
    ("amax", "torch.amax(x)", {"dtypes": ALL}),
    ("amax.dim", "torch.amax(x, dim=-1)", {"dtypes": ALL}),
    ("amin.dim", "torch.amin(x, dim=-1)", {"dtypes": ALL}),
    ("amax.dims", "torch.amax(x, dim=(0, 1), keepdim=True)", {"dtypes": ALL}),
    ("max", "torch.max(x)", {"dtypes": ALL}), ("min", "torch.min(x)", {"dtypes": ALL}),
    ("max.dim", "torch.max(x, dim=-1)", {"dtypes": ALL}),
    ("max.keepdim", "torch.max(x, dim=0, keepdim=True)", {"dtypes": ALL}),
    ("min.dim", "torch.min(x, dim=-1)", {"dtypes": ALL}),
    ("argmax", "torch.argmax(x)", {"dtypes": ALL}),
    ("argmax.dim", "torch.argmax(x, dim=-1)", {"dtypes": ALL}),
    ("argmax.keepdim", "torch.argmax(x, dim=0, keepdim=True)", {"dtypes": ALL}),
    ("argmin.dim", "torch.argmin(x, dim=-1)", {"dtypes": ALL}),
    ("std", "torch.std(x)"), ("std.dim", "torch.std(x, dim=-1)"),
    ("std.correction0", "torch.std(x, dim=-1, correction=0)"),
    ("var", "torch.var(x)"), ("var.dim", "torch.var(x, dim=-1)"),
    ("var.unbiased_false", "torch.var(x, dim=0, unbiased=False)"),
    ("var_mean", "torch.var_mean(x, dim=-1)"), ("std_mean", "torch.std_mean(x, dim=-1)"),
    ("logsumexp", "torch.logsumexp(x, dim=-1)"),
    ("logsumexp.dims", "torch.logsumexp(x, dim=(0, 1))"),
    ("norm", "torch.norm(x)"), ("norm.p1_dim", "torch.norm(x, p=1, dim=-1)"),
    ("norm.inf", "torch.norm(x, p=float('inf'), dim=-1)"),
    ("vector_norm.ord2", "torch.linalg.vector_norm(x, ord=2, dim=-1)"),
    ("vector_norm.ord3", "torch.linalg.vector_norm(x, ord=3, dim=-1)"),
    ("vector_norm.ord0", "torch.linalg.vector_norm(x, ord=0, dim=-1)"),
    ("vector_norm.ord_neginf", "torch.linalg.vector_norm(x, ord=float('-inf'), dim=-1)"),
    ("median", "torch.median(x)", {"dtypes": ALL}),
    ("median.dim", "torch.median(x, dim=-1)", {"dtypes": ALL, "shape_only": (1,)}),
    ("nanmedian", "torch.nanmedian(x)", {"dtypes": ALL}),
    ("mode.dim", "torch.mode(x, dim=-1)", {"dtypes": ALL, "shape_only": (1,)}),
    ("count_nonzero", "torch.count_nonzero(x)", {"dtypes": ALL}),
    ("count_nonzero.dim", "torch.count_nonzero(x, dim=-1)", {"dtypes": ALL}),
    ("all", "torch.all(x)", {"dtypes": ALL}), ("any", "torch.any(x)", {"dtypes": ALL}),
    ("all.dim", "torch.all(x, dim=-1)", {"dtypes": ALL}),
    ("any.dim", "torch.any(x, dim=0)", {"dtypes": ALL}),
    ("nansum", "torch.nansum(x)"), ("nansum.dim", "torch.nansum(x, dim=-1)"),
    ("nanmean", "torch.nanmean(x, dim=-1)"),
    ("aminmax", "torch.aminmax(x)", {"dtypes": ALL}),
    ("aminmax.dim", "torch.aminmax(x, dim=-1)", {"dtypes": ALL}),
])

SOFTMAX = _family("softmax", [
    ("softmax", "torch.softmax(x, dim=-1)"), ("softmax.dim0", "torch.softmax(x, dim=0)"),
    ("softmax.dtype_f32", "torch.softmax(x, dim=-1, dtype=torch.float32)",
     {"dtypes": ALL}),
    ("softmax.dtype_f64", "torch.softmax(x, dim=-1, dtype=torch.float64)",
     {"dtypes": ALL}),
    ("softmax.3d", "F.softmax(x, dim=1)", {"args": (Arg("x", (2, 3, 4)),)}),
    ("log_softmax", "torch.log_softmax(x, dim=-1)"),
    ("log_softmax.dim0", "torch.log_softmax(x, dim=0)"),
    ("log_softmax.dtype_f32", "torch.log_softmax(x, dim=-1, dtype=torch.float32)",
     {"dtypes": ALL}),
    ("log_softmax.dtype_f64", "torch.log_softmax(x, dim=-1, dtype=torch.float64)",
     {"dtypes": ALL}),
    ("softmin", "F.softmin(x, dim=-1)"),
    ("softmin.dtype_f32", "F.softmin(x, dim=-1, dtype=torch.float32)"),
])


CUMULATIVE = _family("cumulative", [
    ("cumsum", "torch.cumsum(x, dim=-1)", {"dtypes": ALL}),
    ("cumsum.dim0", "torch.cumsum(x, dim=0)", {"dtypes": ALL}),
    ("cumsum.dtype_f32", "torch.cumsum(x, dim=-1, dtype=torch.float32)", {"dtypes": ALL}),
    ("cumsum.dtype_f64", "torch.cumsum(x, dim=-1, dtype=torch.float64)"),
    ("cumprod", "torch.cumprod(x, dim=-1)", {"dtypes": ALL}),
    ("cumprod.dtype_f64", "torch.cumprod(x, dim=-1, dtype=torch.float64)"),
    ("cummax", "torch.cummax(x, dim=-1)", {"dtypes": ALL}),
    ("cummin", "torch.cummin(x, dim=0)", {"dtypes": ALL}),
    ("logcumsumexp", "torch.logcumsumexp(x, dim=-1)"),
    ("cumsum.neg_dim_3d", "torch.cumsum(x, dim=-2)", {"args": (Arg("x", (2, 3, 4)),)}),
])

SORT = _family("sort", [
    ("sort", "torch.sort(x, dim=-1)", {"shape_only": (1,)}),
    ("sort.descending", "torch.sort(x, dim=-1, descending=True)", {"shape_only": (1,)}),
    ("sort.stable", "torch.sort(x, dim=-1, stable=True)"),
    ("sort.stable_descending", "torch.sort(x, dim=-1, stable=True, descending=True)"),
    ("sort.dim0", "torch.sort(x, dim=0)", {"shape_only": (1,)}),
    ("argsort", "torch.argsort(x, dim=-1)", {"shape_only": (0,)}),
    ("argsort.stable", "torch.argsort(x, dim=-1, stable=True)"),
    ("argsort.descending_stable", "torch.argsort(x, dim=-1, descending=True, stable=True)"),
    ("topk", "torch.topk(x, 3)", {"shape_only": (1,)}),
    ("topk.smallest", "torch.topk(x, 3, largest=False)", {"shape_only": (1,)}),
    ("topk.dim0", "torch.topk(x, 2, dim=0)", {"shape_only": (1,)}),
    ("topk.k0", "torch.topk(x, 0)"),
    ("kthvalue", "torch.kthvalue(x, 2, dim=-1)", {"shape_only": (1,)}),
    ("msort", "torch.msort(x)"),
], dtypes=ALL)

# --------------------------------------------------------------------------
# clamp / where / nan_to_num / masked

MASK = Arg("m", (4, 8), kind="mask")
SELECT = _family("select", [
    ("clamp", "torch.clamp(x, min=-0.5, max=0.5)", {"dtypes": ALL}),
    ("clamp.min", "torch.clamp(x, min=0.25)", {"dtypes": ALL}),
    ("clamp.max", "torch.clamp(x, max=-0.25)", {"dtypes": ALL}),
    ("clamp.int_bounds", "torch.clamp(x, min=-3, max=4)", {"dtypes": ALL}),
    ("clamp.inverted", "torch.clamp(x, min=1.0, max=-1.0)", {"dtypes": ALL}),
    ("clamp.tensor", "torch.clamp(x, min=lo, max=hi)",
     {"args": (X, Arg("lo", (4, 8), low=-2, high=0), Arg("hi", (4, 8), low=0, high=2)),
      "dtypes": ALL}),
    ("clamp_min.tensor", "torch.clamp_min(x, lo)", {"args": (X, Arg("lo", (8,))),
                                                     "dtypes": ALL}),
    ("where", "torch.where(m, x, y)", {"args": (MASK, X, Arg("y", (4, 8))), "dtypes": ALL,
                                       "signed_zeros": True}),
    ("where.scalar", "torch.where(m, x, 0.0)", {"args": (MASK, X)}),
    ("where.broadcast", "torch.where(m, x, y)", {"args": (Arg("m", (4, 1), kind="mask"), X,
                                                          Arg("y", (8,))), "dtypes": ALL}),
    ("nan_to_num", "torch.nan_to_num(x)"),
    ("nan_to_num.values", "torch.nan_to_num(x, nan=0.5, posinf=2.0, neginf=-3.0)"),
    ("masked_fill", "x.masked_fill(m, 2.0)", {"args": (X, MASK), "dtypes": ALL}),
    ("masked_fill.neginf", "x.masked_fill(m, float('-inf'))", {"args": (X, MASK)}),
    ("masked_fill.nan", "x.masked_fill(m, float('nan'))", {"args": (X, MASK)}),
    ("masked_fill.tensor_value", "x.masked_fill(m, v)", {"args": (X, MASK, Arg("v", ())),
                                                         "dtypes": ALL}),
    ("masked_select", "torch.masked_select(x, m)", {"args": (X, MASK), "dtypes": ALL}),
    ("masked_scatter", "x.masked_scatter(m, s)", {"args": (X, MASK, Arg("s", (4, 8))),
                                                  "dtypes": ALL}),
])

# --------------------------------------------------------------------------
# indexing, gather, scatter

IDX_ROWS = Arg("i", (3,), kind="index", high=4, empty_shape=(3,))
ROWS5 = Arg("i", (5,), kind="index", high=4, empty_shape=(5,))
IDX_COLS = Arg("i", (5,), kind="index", high=8)
GATHER1 = Arg("i", (4, 6), kind="index", high=8)
GATHER0 = Arg("i", (3, 8), kind="index", high=4)
INDEX = _family("index", [
    ("index_select.dim0", "torch.index_select(x, 0, i)", {"args": (X, IDX_ROWS)}),
    ("index_select.dim1", "torch.index_select(x, 1, i)", {"args": (X, IDX_COLS)}),
    ("gather.dim1", "torch.gather(x, 1, i)", {"args": (X, GATHER1)}),
    ("gather.dim0", "torch.gather(x, 0, i)", {"args": (X, GATHER0)}),
    ("take_along_dim", "torch.take_along_dim(x, i, dim=1)", {"args": (X, GATHER1)}),
    ("getitem.tensor", "x[i]", {"args": (X, IDX_ROWS)}),
    ("getitem.cols", "x[:, i]", {"args": (X, IDX_COLS)}),
    ("getitem.pairs", "x[i, j]", {"args": (X, Arg("i", (5,), kind="index", high=4),
                                           Arg("j", (5,), kind="index", high=8))}),
    ("getitem.negative", "x[i - 4]", {"args": (X, IDX_ROWS)}),
    ("getitem.bool_mask", "x[m]", {"args": (X, MASK)}),
    ("getitem.slice_step", "x[1:, ::3]"),
    ("getitem.ellipsis_last", "x[..., -1]"),
    ("narrow", "torch.narrow(x, 1, 2, 3)"),
    ("select", "x.select(1, 2)"),
    ("flip", "torch.flip(x, dims=(1,))"), ("flip.both", "torch.flip(x, dims=(0, 1))"),
    ("roll", "torch.roll(x, 3, dims=1)"), ("roll.flat", "torch.roll(x, -5)"),
    ("take", "torch.take(x, i)", {"args": (X, Arg("i", (6,), kind="index", high=32))}),
    ("embedding", "F.embedding(i, x)", {"args": (X, Arg("i", (2, 3), kind="index",
                                                        high=4))}),
    ("embedding.padding_idx", "F.embedding(i, x, padding_idx=1)",
     {"args": (X, Arg("i", (2, 3), kind="index", high=4))}),
    ("diagonal", "torch.diagonal(x)"), ("diagonal.offset", "torch.diagonal(x, offset=2)"),
    ("tril", "torch.tril(x)"), ("triu.diag1", "torch.triu(x, diagonal=1)"),
    ("repeat_interleave", "torch.repeat_interleave(x, 2, dim=0)"),
    ("index_put", "torch.index_put(x, (i,), v)",
     {"args": (X, Arg("i", (3,), kind="index", high=4, unique=True, empty_shape=(3,)),
               Arg("v", (3, 8)))}),
    ("index_put.accumulate", "torch.index_put(x, (i,), v, accumulate=True)",
     {"args": (X, ROWS5, Arg("v", (5, 8)))}),
    ("index_add", "torch.index_add(x, 0, i, v, alpha=2)",
     {"args": (X, ROWS5, Arg("v", (5, 8)))}),
    ("index_copy", "torch.index_copy(x, 1, i, v)",
     {"args": (X, Arg("i", (3,), kind="index", high=8, unique=True), Arg("v", (4, 3)))}),
    ("index_fill", "torch.index_fill(x, 1, i, 3)", {"args": (X, IDX_COLS)}),
], dtypes=ALL)

SRC = Arg("s", (4, 6))
SCATTER_IDX = Arg("i", (4, 6), kind="index", high=8)
SCATTER_UNIQUE = Arg("i", (4, 6), kind="index", high=8, unique=True)
SCATTER = _family("scatter", [
    ("scatter", "torch.scatter(x, 1, i, s)", {"args": (X, SCATTER_UNIQUE, SRC)}),
    ("scatter.value", "torch.scatter(x, 1, i, 1.5)", {"args": (X, SCATTER_UNIQUE)}),
    ("scatter.dim0", "torch.scatter(x, 0, i, s)",
     {"args": (X, Arg("i", (1, 8), kind="index", high=4), Arg("s", (1, 8)))}),
    ("scatter_add", "torch.scatter_add(x, 1, i, s)", {"args": (X, SCATTER_IDX, SRC)}),
    ("scatter.reduce_add", "torch.scatter(x, 1, i, s, reduce='add')",
     {"args": (X, SCATTER_IDX, SRC)}),
    ("scatter.reduce_multiply", "torch.scatter(x, 1, i, s, reduce='multiply')",
     {"args": (X, SCATTER_IDX, SRC)}),
    *[(f"scatter_reduce.{mode}.{'self' if inc else 'noself'}",
       f"torch.scatter_reduce(x, 1, i, s, reduce='{mode}', include_self={inc})",
       {"args": (X, SCATTER_IDX, SRC)})
      for mode in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)],
    *[(f"index_reduce.{mode}.{'self' if inc else 'noself'}",
       f"torch.index_reduce(x, 0, i, v, '{mode}', include_self={inc})",
       {"args": (X, ROWS5, Arg("v", (5, 8))),
        "dtypes": ALL})
      for mode in ("prod", "mean", "amax", "amin") for inc in (True, False)],
], dtypes=ALL)

# --------------------------------------------------------------------------
# losses (N=6 samples, C=5 classes)

LOGITS = Arg("x", (6, 5), empty_shape=(0, 5))
TARGET = Arg("t", (6,), kind="index", high=5, empty_shape=(0,))
TARGET_IGN = Arg("t", (6,), kind="index", high=5, values=(2,), empty_shape=(0,))
TARGET_DEF_IGN = Arg("t", (6,), kind="index", high=5, values=(-100,), empty_shape=(0,))
PROBS = Arg("p", (6, 5), kind="prob", empty_shape=(0, 5))
WEIGHT = Arg("w", (5,), low=0.1, high=2.0, specials=False, empty_shape=(5,))
Y = Arg("y", (6, 5), empty_shape=(0, 5))
# binary_cross_entropy rejects values outside [0, 1]: its input gets no specials
UNIT = Arg("x", (6, 5), low=0.02, high=0.98, specials=False, empty_shape=(0, 5))
UNIT_T = Arg("y", (6, 5), low=0.0, high=1.0, specials=False, empty_shape=(0, 5))
SIGNS = Arg("t", (6,), kind="choice", values=(-1.0, 1.0), empty_shape=(0,))
REDUCTIONS = ("none", "mean", "sum")


def _reduced(name: str, call: str, **kw: object) -> list[tuple]:
    return [(f"{name}.{r}", call.replace("REDUCTION", r), kw) for r in REDUCTIONS]


LOSS = _family("loss", [
    *_reduced("mse_loss", "F.mse_loss(x, y, reduction='REDUCTION')", args=(LOGITS, Y)),
    *_reduced("l1_loss", "F.l1_loss(x, y, reduction='REDUCTION')", args=(LOGITS, Y)),
    *_reduced("smooth_l1_loss", "F.smooth_l1_loss(x, y, reduction='REDUCTION')",
              args=(LOGITS, Y)),
    ("smooth_l1_loss.beta", "F.smooth_l1_loss(x, y, beta=0.5)", {"args": (LOGITS, Y)}),
    *_reduced("huber_loss", "F.huber_loss(x, y, reduction='REDUCTION')", args=(LOGITS, Y)),
    ("huber_loss.delta", "F.huber_loss(x, y, delta=2.0)", {"args": (LOGITS, Y)}),
    *_reduced("cross_entropy", "F.cross_entropy(x, t, reduction='REDUCTION')",
              args=(LOGITS, TARGET)),
    ("cross_entropy.weight", "F.cross_entropy(x, t, weight=w)", {"args": (LOGITS, TARGET,
                                                                          WEIGHT)}),
    ("cross_entropy.weight_sum", "F.cross_entropy(x, t, weight=w, reduction='sum')",
     {"args": (LOGITS, TARGET, WEIGHT)}),
    ("cross_entropy.ignore_index", "F.cross_entropy(x, t, ignore_index=2)",
     {"args": (LOGITS, TARGET_IGN)}),
    ("cross_entropy.ignore_default", "F.cross_entropy(x, t)", {"args": (LOGITS,
                                                                        TARGET_DEF_IGN)}),
    ("cross_entropy.weight_ignore", "F.cross_entropy(x, t, weight=w, ignore_index=2)",
     {"args": (LOGITS, TARGET_IGN, WEIGHT)}),
    ("cross_entropy.label_smoothing", "F.cross_entropy(x, t, label_smoothing=0.1)",
     {"args": (LOGITS, TARGET)}),
    ("cross_entropy.smoothing_weight",
     "F.cross_entropy(x, t, weight=w, label_smoothing=0.2)",
     {"args": (LOGITS, TARGET, WEIGHT)}),
    ("cross_entropy.smoothing_ignore",
     "F.cross_entropy(x, t, ignore_index=2, label_smoothing=0.1, reduction='sum')",
     {"args": (LOGITS, TARGET_IGN)}),
    ("cross_entropy.prob_target", "F.cross_entropy(x, p)", {"args": (LOGITS, PROBS)}),
    ("cross_entropy.prob_target_none", "F.cross_entropy(x, p, reduction='none')",
     {"args": (LOGITS, PROBS)}),
    ("cross_entropy.prob_target_smoothing", "F.cross_entropy(x, p, label_smoothing=0.1)",
     {"args": (LOGITS, PROBS)}),
    ("cross_entropy.prob_target_weight", "F.cross_entropy(x, p, weight=w)",
     {"args": (LOGITS, PROBS, WEIGHT)}),
    ("cross_entropy.3d", "F.cross_entropy(x, t)",
     {"args": (Arg("x", (2, 5, 3), empty_shape=(0, 5, 3)),
               Arg("t", (2, 3), kind="index", high=5, empty_shape=(0, 3)))}),
    *_reduced("nll_loss", "F.nll_loss(x, t, reduction='REDUCTION')", args=(LOGITS, TARGET)),
    ("nll_loss.weight", "F.nll_loss(x, t, weight=w)", {"args": (LOGITS, TARGET, WEIGHT)}),
    ("nll_loss.ignore_index", "F.nll_loss(x, t, ignore_index=2)", {"args": (LOGITS,
                                                                          TARGET_IGN)}),
    ("nll_loss.weight_ignore_sum",
     "F.nll_loss(x, t, weight=w, ignore_index=2, reduction='sum')",
     {"args": (LOGITS, TARGET_IGN, WEIGHT)}),
    *_reduced("binary_cross_entropy", "F.binary_cross_entropy(x, y, reduction='REDUCTION')",
              args=(UNIT, UNIT_T)),
    ("binary_cross_entropy.weight", "F.binary_cross_entropy(x, y, weight=w)",
     {"args": (UNIT, UNIT_T, WEIGHT)}),
    *_reduced("bce_with_logits",
              "F.binary_cross_entropy_with_logits(x, y, reduction='REDUCTION')",
              args=(LOGITS, UNIT_T)),
    ("bce_with_logits.pos_weight", "F.binary_cross_entropy_with_logits(x, y, pos_weight=w)",
     {"args": (LOGITS, UNIT_T, WEIGHT)}),
    ("bce_with_logits.weight", "F.binary_cross_entropy_with_logits(x, y, weight=w)",
     {"args": (LOGITS, UNIT_T, WEIGHT)}),
    ("kl_div.batchmean", "F.kl_div(x, p, reduction='batchmean')", {"args": (LOGITS, PROBS)}),
    ("kl_div.sum", "F.kl_div(x, p, reduction='sum')", {"args": (LOGITS, PROBS)}),
    ("kl_div.none", "F.kl_div(x, p, reduction='none')", {"args": (LOGITS, PROBS)}),
    ("kl_div.log_target", "F.kl_div(x, y, reduction='mean', log_target=True)",
     {"args": (LOGITS, Y)}),
    ("poisson_nll_loss", "F.poisson_nll_loss(x, y)", {"args": (LOGITS, UNIT_T)}),
    ("poisson_nll_loss.no_log", "F.poisson_nll_loss(x, y, log_input=False, full=True)",
     {"args": (UNIT, UNIT_T)}),
    ("gaussian_nll_loss", "F.gaussian_nll_loss(x, y, v)",
     {"args": (LOGITS, Y, Arg("v", (6, 5), low=0.1, high=2, specials=False,
                               empty_shape=(0, 5)))}),
    ("soft_margin_loss", "F.soft_margin_loss(x, y)",
     {"args": (LOGITS, Arg("y", (6, 5), kind="choice", values=(-1.0, 1.0),
                           empty_shape=(0, 5)))}),
    ("hinge_embedding_loss", "F.hinge_embedding_loss(x, y)",
     {"args": (LOGITS, Arg("y", (6, 5), kind="choice", values=(-1.0, 1.0),
                           empty_shape=(0, 5)))}),
    ("margin_ranking_loss", "F.margin_ranking_loss(a, b, t, margin=0.1)",
     {"args": (Arg("a", (6,), empty_shape=(0,)), Arg("b", (6,), empty_shape=(0,)), SIGNS)}),
    ("cosine_embedding_loss", "F.cosine_embedding_loss(x, y, t)", {"args": (LOGITS, Y,
                                                                            SIGNS)}),
    ("triplet_margin_loss", "F.triplet_margin_loss(x, y, z)",
     {"args": (LOGITS, Y, Arg("z", (6, 5), empty_shape=(0, 5)))}),
    ("multilabel_soft_margin_loss", "F.multilabel_soft_margin_loss(x, y)",
     {"args": (LOGITS, Arg("y", (6, 5), kind="choice", values=(0.0, 1.0),
                           empty_shape=(0, 5)))}),
    ("multi_margin_loss", "F.multi_margin_loss(x, t)", {"args": (LOGITS, TARGET),
                                                        "dtypes": ALL}),
])

# --------------------------------------------------------------------------
# special functions

SPECIAL = _family("special", [
    ("digamma", "torch.special.digamma(x)"), ("polygamma1", "torch.special.polygamma(1, x)"),
    ("gammaln", "torch.special.gammaln(x)"),
    ("erfcx", "torch.special.erfcx(x)", {"dtypes": ALL}),
    ("i0", "torch.special.i0(x)"), ("i0e", "torch.special.i0e(x)"),
    ("i1", "torch.special.i1(x)"), ("i1e", "torch.special.i1e(x)"),
    ("ndtr", "torch.special.ndtr(x)"),
    ("ndtri", "torch.special.ndtri(x)", {"args": (Arg("x", (4, 8), low=0, high=1),),
                                         "dtypes": ALL}),
    ("log_ndtr", "torch.special.log_ndtr(x)", {"dtypes": ALL}),
    ("entr", "torch.special.entr(x)"),
    ("sinc", "torch.special.sinc(x)"), ("expit", "torch.special.expit(x)"),
    ("xlog1py", "torch.special.xlog1py(x, y)", {"args": PAIR}),
    ("zeta", "torch.special.zeta(x, y)",
     {"args": (Arg("x", (13, 13), low=1.1, high=5), Arg("y", (13, 13), low=0.1, high=3)),
      "dtypes": ALL}),
    ("multigammaln", "torch.special.multigammaln(x, 2)",
     {"args": (Arg("x", (4, 8), low=1, high=6),), "input_classes": NO_SPECIALS}),
    ("bessel_j0", "torch.special.bessel_j0(x)", {"dtypes": ALL}),
    ("bessel_j1", "torch.special.bessel_j1(x)", {"dtypes": ALL}),
    ("modified_bessel_i0", "torch.special.modified_bessel_i0(x)", {"dtypes": ALL}),
    ("spherical_bessel_j0", "torch.special.spherical_bessel_j0(x)", {"dtypes": ALL}),
    ("erfinv.large", "torch.special.erfinv(x)", {"args": (Arg("x", (4, 8), low=0.99,
                                                                 high=1.0),)}),
    ("lgamma.large", "torch.lgamma(x)", {"args": (Arg("x", (4, 8), low=1e3, high=1e6),)}),
    ("exp.large", "torch.exp(x)", {"args": (Arg("x", (4, 8), low=40, high=88),)}),
    ("log1p.tiny", "torch.log1p(x)", {"args": (Arg("x", (4, 8), low=-1e-7, high=1e-7),)}),
    ("expm1.tiny", "torch.expm1(x)", {"args": (Arg("x", (4, 8), low=-1e-7, high=1e-7),)}),
    ("sigmoid.large", "torch.sigmoid(x)", {"args": (Arg("x", (4, 8), low=-100, high=100),)}),
    ("tanh.large", "torch.tanh(x)", {"args": (Arg("x", (4, 8), low=-50, high=50),)}),
])

# --------------------------------------------------------------------------
# activations

ACTIVATION = _family("activation", [
    ("relu", "F.relu(x)", {"dtypes": ALL}), ("relu6", "F.relu6(x)"),
    ("leaky_relu", "F.leaky_relu(x)"), ("leaky_relu.slope", "F.leaky_relu(x, 0.2)"),
    ("elu", "F.elu(x)"), ("elu.alpha", "F.elu(x, alpha=0.5)"), ("selu", "F.selu(x)"),
    ("celu", "F.celu(x, alpha=2.0)"), ("gelu", "F.gelu(x)"),
    ("gelu.tanh", "F.gelu(x, approximate='tanh')"), ("silu", "F.silu(x)"),
    ("mish", "F.mish(x)"), ("softplus", "F.softplus(x)"),
    ("softplus.beta", "F.softplus(x, beta=2.0, threshold=5.0)"),
    ("softsign", "F.softsign(x)"), ("hardtanh", "F.hardtanh(x)"),
    ("hardtanh.bounds", "F.hardtanh(x, -2.0, 3.0)"), ("hardsigmoid", "F.hardsigmoid(x)"),
    ("hardswish", "F.hardswish(x)"), ("hardshrink", "F.hardshrink(x, 0.5)"),
    ("softshrink", "F.softshrink(x, 0.5)"), ("tanhshrink", "F.tanhshrink(x)"),
    ("threshold", "F.threshold(x, 0.1, 20.0)"), ("logsigmoid", "F.logsigmoid(x)"),
    ("prelu", "F.prelu(x, w)", {"args": (Arg("x", (2, 3, 4)), Arg("w", (3,), specials=False,
                                                                   empty_shape=(3,)))}),
    ("rrelu.eval", "F.rrelu(x, training=False)"), ("glu", "F.glu(x, dim=-1)"),
])

# --------------------------------------------------------------------------
# norms

NCHW = Arg("x", (2, 4, 3, 3), empty_shape=(0, 4, 3, 3))
X36 = Arg("x", (3, 6), empty_shape=(0, 6))
C4 = Arg("w", (4,), low=0.5, high=1.5, specials=False, empty_shape=(4,))
B4 = Arg("b", (4,), specials=False, empty_shape=(4,))
NORM = _family("norm", [
    ("layer_norm", "F.layer_norm(x, (6,))", {"args": (X36,)}),
    ("layer_norm.affine", "F.layer_norm(x, (6,), w, b, eps=1e-3)",
     {"args": (X36, Arg("w", (6,), specials=False, empty_shape=(6,)),
               Arg("b", (6,), specials=False, empty_shape=(6,)))}),
    ("layer_norm.2d", "F.layer_norm(x, (3, 3))", {"args": (NCHW,)}),
    ("group_norm", "F.group_norm(x, 2, w, b)", {"args": (NCHW, C4, B4)}),
    ("group_norm.plain", "F.group_norm(x, 4)", {"args": (NCHW,)}),
    ("batch_norm.eval", "F.batch_norm(x, rm, rv, w, b, training=False)",
     {"args": (NCHW, Arg("rm", (4,), specials=False, empty_shape=(4,)),
               Arg("rv", (4,), low=0.5, high=2, specials=False, empty_shape=(4,)), C4, B4)}),
    ("batch_norm.eval_plain", "F.batch_norm(x, rm, rv, training=False, eps=1e-3)",
     {"args": (NCHW, Arg("rm", (4,), specials=False, empty_shape=(4,)),
               Arg("rv", (4,), low=0.5, high=2, specials=False, empty_shape=(4,)))}),
    ("instance_norm", "F.instance_norm(x)", {"args": (NCHW,)}),
    ("instance_norm.affine", "F.instance_norm(x, weight=w, bias=b)", {"args": (NCHW, C4, B4)}),
    ("local_response_norm", "F.local_response_norm(x, 2)", {"args": (NCHW,),
                                                            "dtypes": ALL}),
    ("normalize", "F.normalize(x, p=2.0, dim=-1)"),
    ("normalize.p1_dim0", "F.normalize(x, p=1.0, dim=0)"),
    ("rms_norm", "F.rms_norm(x, (6,), w)", {"args": (X36, Arg(
        "w", (6,), specials=False, empty_shape=(6,)))}),
    ("rms_norm.plain", "F.rms_norm(x, (6,), eps=1e-5)", {"args": (X36,)}),
])

# --------------------------------------------------------------------------
# pooling, interpolation, padding

IMG = Arg("x", (1, 2, 8, 8), empty_shape=(0, 2, 8, 8))
SEQ = Arg("x", (1, 2, 9), empty_shape=(0, 2, 9))
VOL = Arg("x", (1, 1, 4, 4, 4), empty_shape=(0, 1, 4, 4, 4))
POOL = _family("pool", [
    ("max_pool1d", "F.max_pool1d(x, 2)", {"args": (SEQ,)}),
    ("max_pool1d.ceil", "F.max_pool1d(x, 2, ceil_mode=True)", {"args": (SEQ,)}),
    ("max_pool2d", "F.max_pool2d(x, 2)"),
    ("max_pool2d.k3s2p1", "F.max_pool2d(x, 3, stride=2, padding=1)"),
    ("max_pool2d.ceil", "F.max_pool2d(x, 3, stride=2, ceil_mode=True)"),
    ("max_pool2d.dilation", "F.max_pool2d(x, 2, dilation=2)"),
    ("max_pool2d.indices", "F.max_pool2d(x, 2, return_indices=True)"),
    ("max_pool3d", "F.max_pool3d(x, 2)", {"args": (VOL,)}),
    ("avg_pool1d", "F.avg_pool1d(x, 3, stride=2)", {"args": (SEQ,)}),
    ("avg_pool2d", "F.avg_pool2d(x, 2)"),
    ("avg_pool2d.pad_include", "F.avg_pool2d(x, 3, stride=2, padding=1)"),
    ("avg_pool2d.pad_exclude", "F.avg_pool2d(x, 3, stride=2, padding=1, "
     "count_include_pad=False)"),
    ("avg_pool2d.ceil", "F.avg_pool2d(x, 3, stride=2, ceil_mode=True)"),
    ("avg_pool2d.divisor", "F.avg_pool2d(x, 2, divisor_override=3)"),
    ("avg_pool3d", "F.avg_pool3d(x, 2)", {"args": (VOL,), "dtypes": ALL}),
    ("adaptive_avg_pool1d", "F.adaptive_avg_pool1d(x, 4)", {"args": (SEQ,)}),
    ("adaptive_avg_pool2d", "F.adaptive_avg_pool2d(x, (3, 3))"),
    ("adaptive_avg_pool2d.global", "F.adaptive_avg_pool2d(x, 1)"),
    ("adaptive_max_pool2d", "F.adaptive_max_pool2d(x, (3, 3), return_indices=True)"),
    ("lp_pool2d", "F.lp_pool2d(x, 2.0, 2)"),
], args=(IMG,))

SMALL = Arg("x", (1, 2, 4, 5), empty_shape=(0, 2, 4, 5))
INTERP = _family("interp", [
    ("nearest.size", "F.interpolate(x, size=(8, 10), mode='nearest')"),
    ("nearest.scale2", "F.interpolate(x, scale_factor=2, mode='nearest')"),
    ("nearest.scale1_5", "F.interpolate(x, scale_factor=1.5, mode='nearest')"),
    ("nearest_exact.scale1_5", "F.interpolate(x, scale_factor=1.5, mode='nearest-exact')"),
    ("nearest.down", "F.interpolate(x, size=(3, 2), mode='nearest')"),
    ("bilinear.align", "F.interpolate(x, size=(7, 9), mode='bilinear', align_corners=True)"),
    ("bilinear.noalign", "F.interpolate(x, size=(7, 9), mode='bilinear', "
     "align_corners=False)"),
    ("bilinear.down", "F.interpolate(x, size=(2, 3), mode='bilinear')"),
    ("bilinear.antialias", "F.interpolate(x, size=(2, 3), mode='bilinear', antialias=True)",
     {"dtypes": ALL}),
    ("bicubic.align", "F.interpolate(x, size=(7, 9), mode='bicubic', align_corners=True)"),
    ("bicubic.noalign", "F.interpolate(x, size=(7, 9), mode='bicubic')"),
    ("bicubic.antialias", "F.interpolate(x, size=(2, 3), mode='bicubic', antialias=True)"),
    ("area", "F.interpolate(x, size=(2, 2), mode='area')"),
    ("linear.align", "F.interpolate(x, size=9, mode='linear', align_corners=True)",
     {"args": (Arg("x", (1, 2, 5), empty_shape=(0, 2, 5)),)}),
    ("linear.noalign", "F.interpolate(x, scale_factor=1.7, mode='linear')",
     {"args": (Arg("x", (1, 2, 5), empty_shape=(0, 2, 5)),)}),
    ("trilinear.align", "F.interpolate(x, size=(3, 5, 6), mode='trilinear', "
     "align_corners=True)", {"args": (VOL,)}),
    ("trilinear.noalign", "F.interpolate(x, scale_factor=1.5, mode='trilinear')",
     {"args": (VOL,)}),
    ("nearest3d", "F.interpolate(x, scale_factor=2, mode='nearest')", {"args": (VOL,)}),
    ("nearest1d", "F.interpolate(x, scale_factor=2, mode='nearest')",
     {"args": (Arg("x", (1, 2, 5), empty_shape=(0, 2, 5)),)}),
], args=(SMALL,))

PAD = _family("pad", [
    ("constant.1d", "F.pad(x, (1, 2))", {"dtypes": ALL}),
    ("constant.value", "F.pad(x, (1, 2, 0, 1), value=1.5)"),
    ("constant.negative", "F.pad(x, (-1, 2))", {"dtypes": ALL}),
    ("reflect.1d", "F.pad(x, (2, 1), mode='reflect')", {"args": (SEQ,)}),
    ("reflect.2d", "F.pad(x, (1, 2, 2, 1), mode='reflect')"),
    ("replicate.1d", "F.pad(x, (2, 1), mode='replicate')", {"args": (SEQ,)}),
    ("replicate.2d", "F.pad(x, (1, 2, 2, 1), mode='replicate')"),
    ("replicate.3d", "F.pad(x, (1, 1, 1, 1, 1, 1), mode='replicate')", {"args": (VOL,)}),
    ("circular.1d", "F.pad(x, (2, 1), mode='circular')", {"args": (SEQ,)}),
    ("circular.2d", "F.pad(x, (1, 2, 2, 1), mode='circular')"),
    ("constant.negative2d", "F.pad(x, (-1, 1, 1, -1), mode='constant')"),
], args=(SMALL,))

# --------------------------------------------------------------------------
# attention: scaled_dot_product_attention

Q = Arg("q", (2, 2, 5, 8), empty_shape=(2, 2, 0, 8))
K = Arg("k", (2, 2, 5, 8), empty_shape=(2, 2, 0, 8))
V = Arg("v", (2, 2, 5, 8), empty_shape=(2, 2, 0, 8))
QKV = (Q, K, V)
BOOL_MASK = Arg("m", (2, 2, 5, 5), kind="mask", empty_shape=(2, 2, 0, 0))
FLOAT_MASK = Arg("m", (2, 2, 5, 5), specials=False, empty_shape=(2, 2, 0, 0))
SDPA = "F.scaled_dot_product_attention"
ATTENTION = _family("attention", [
    ("sdpa", f"{SDPA}(q, k, v)"),
    ("sdpa.causal", f"{SDPA}(q, k, v, is_causal=True)"),
    ("sdpa.scale", f"{SDPA}(q, k, v, scale=0.5)"),
    ("sdpa.bool_mask", f"{SDPA}(q, k, v, attn_mask=m)", {"args": (*QKV, BOOL_MASK)}),
    ("sdpa.bool_mask_broadcast", f"{SDPA}(q, k, v, attn_mask=m)",
     {"args": (*QKV, Arg("m", (5, 5), kind="mask", empty_shape=(0, 0)))}),
    ("sdpa.float_mask", f"{SDPA}(q, k, v, attn_mask=m)", {"args": (*QKV, FLOAT_MASK)}),
    ("sdpa.bool_mask_fully_masked_row", f"{SDPA}(q, k, v, attn_mask=m)",
     {"args": (*QKV, Arg("m", (2, 2, 5, 5), kind="mask", masked_rows=(0, 3),
                         empty_shape=(2, 2, 0, 0)))}),
    ("sdpa.float_mask_fully_masked_row", f"{SDPA}(q, k, v, attn_mask=m)",
     {"args": (*QKV, Arg("m", (2, 2, 5, 5), specials=False, masked_rows=(1,),
                         empty_shape=(2, 2, 0, 0)))}),
    ("sdpa.bias_requires_grad", f"{SDPA}(q, k, v, attn_mask=m)",
     {"args": (*QKV, Arg("m", (2, 2, 5, 5), specials=False, requires_grad=True,
                         empty_shape=(2, 2, 0, 0)))}),
    ("sdpa.cross", f"{SDPA}(q, k, v)",
     {"args": (Q, Arg("k", (2, 2, 7, 8), empty_shape=(2, 2, 0, 8)),
               Arg("v", (2, 2, 7, 8), empty_shape=(2, 2, 0, 8)))}),
    ("sdpa.gqa", f"{SDPA}(q, k, v, enable_gqa=True)",
     {"args": (Arg("q", (2, 4, 5, 8), empty_shape=(2, 4, 0, 8)), K, V)}),
    ("sdpa.3d", f"{SDPA}(q, k, v)",
     {"args": (Arg("q", (2, 5, 8), empty_shape=(2, 0, 8)),
               Arg("k", (2, 5, 8), empty_shape=(2, 0, 8)),
               Arg("v", (2, 5, 8), empty_shape=(2, 0, 8)))}),
], args=QKV)

# --------------------------------------------------------------------------
# small linear algebra

LINALG = _family("linalg", [
    ("matmul", "torch.matmul(x, y)", {"args": (Arg("x", (3, 4)), Arg("y", (4, 5),
                                                                       empty_shape=(0, 5)))}),
    ("mm.int", "torch.mm(x, y)", {"args": (Arg("x", (3, 4)), Arg("y", (4, 5),
                                                                  empty_shape=(0, 5))),
                                  "dtypes": (*FLOATS, *SIGNED_INTS)}),
    ("bmm", "torch.bmm(x, y)", {"args": (Arg("x", (2, 3, 4)), Arg("y", (2, 4, 5),
                                                                   empty_shape=(2, 0, 5)))}),
    ("linear", "F.linear(x, w, b)", {"args": (Arg("x", (3, 4)), Arg("w", (5, 4)),
                                              Arg("b", (5,), empty_shape=(5,)))}),
    ("einsum", "torch.einsum('bij,bjk->bik', x, y)",
     {"args": (Arg("x", (2, 3, 4)), Arg("y", (2, 4, 5), empty_shape=(2, 0, 5)))}),
    ("addmm", "torch.addmm(c, x, y, beta=0.5, alpha=2.0)",
     {"args": (Arg("c", (3, 5), empty_shape=(3, 5)), Arg("x", (3, 4)),
               Arg("y", (4, 5), empty_shape=(0, 5)))}),
    ("outer", "torch.outer(x, y)", {"args": (Arg("x", (4,)), Arg("y", (5,)))}),
    ("dot", "torch.dot(x, y)", {"args": (Arg("x", (6,)), Arg("y", (6,)))}),
    ("linalg.inv", "torch.linalg.inv(x)",
     {"args": (Arg("x", (3, 3), empty_shape=(0, 0)),), "dtypes": ALL}),
    ("linalg.det", "torch.linalg.det(x)",
     {"args": (Arg("x", (3, 3), empty_shape=(0, 0)),), "dtypes": ALL}),
])

# --------------------------------------------------------------------------
# coverage: torchlib-registered ATen ops that OpInfo's samples never reach
# (no OpInfo, or every sample dropped: complex outputs, no tensor, random values),
# and internal/backward ops that `torch.ops.aten.<op>` calls keep in the graph.

def _ints(name: str, values: tuple[int, ...]) -> Arg:
    """An int64 graph input with exactly these values (offsets, lengths)."""
    return Arg(name, (len(values),), kind="sample", dtype="int64", stored="int64",
               sample=struct.pack(f"<{len(values)}q", *values))


def _w(name: str, shape: tuple[int, ...]) -> Arg:
    """A weight: small ordinary values, no specials, the same shape in the empty class."""
    return Arg(name, shape, low=-0.5, high=0.5, specials=False, empty_shape=shape)


NO_EMPTY = (NORMAL, SPECIALS)
SEQ_IN = Arg("x", (5, 2, 3), empty_shape=(0, 2, 3))       # (time, batch, features)
H0 = Arg("h", (1, 2, 4), low=-0.5, high=0.5, empty_shape=(1, 2, 4))
C0 = Arg("c", (1, 2, 4), low=-0.5, high=0.5, empty_shape=(1, 2, 4))
LSTM_W = (_w("wi", (16, 3)), _w("wh", (16, 4)), _w("bi", (16,)), _w("bh", (16,)))
LSTM_WR = (_w("wir", (16, 3)), _w("whr", (16, 4)), _w("bir", (16,)), _w("bhr", (16,)))
GRU_W = (_w("wi", (12, 3)), _w("wh", (12, 4)), _w("bi", (12,)), _w("bh", (12,)))
H0_2 = Arg("h", (2, 2, 4), low=-0.5, high=0.5, empty_shape=(2, 2, 4))
C0_2 = Arg("c", (2, 2, 4), low=-0.5, high=0.5, empty_shape=(2, 2, 4))
# torch.lstm/gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
# batch_first): what nn.LSTM/nn.GRU call, with every weight a graph input.
RECURRENT = _family("recurrent", [
    ("lstm", "torch.lstm(x, [h, c], [wi, wh, bi, bh], True, 1, 0.0, False, False, False)",
     {"args": (SEQ_IN, H0, C0, *LSTM_W)}),
    ("lstm.no_bias", "torch.lstm(x, [h, c], [wi, wh], False, 1, 0.0, False, False, False)",
     {"args": (SEQ_IN, H0, C0, *LSTM_W[:2])}),
    ("lstm.batch_first", "torch.lstm(x, [h, c], [wi, wh, bi, bh], True, 1, 0.0, False, "
     "False, True)", {"args": (Arg("x", (2, 5, 3), empty_shape=(2, 0, 3)), H0, C0, *LSTM_W)}),
    ("lstm.bidirectional", "torch.lstm(x, [h, c], [wi, wh, bi, bh, wir, whr, bir, bhr], "
     "True, 1, 0.0, False, True, False)", {"args": (SEQ_IN, H0_2, C0_2, *LSTM_W, *LSTM_WR)}),
    ("lstm.two_layers", "torch.lstm(x, [h, c], [wi, wh, bi, bh, wi2, wh2, bi2, bh2], True, "
     "2, 0.0, False, False, False)",
     {"args": (SEQ_IN, H0_2, C0_2, *LSTM_W, _w("wi2", (16, 4)), _w("wh2", (16, 4)),
               _w("bi2", (16,)), _w("bh2", (16,)))}),
    ("gru", "torch.gru(x, h, [wi, wh, bi, bh], True, 1, 0.0, False, False, False)",
     {"args": (SEQ_IN, H0, *GRU_W)}),
    ("gru.batch_first", "torch.gru(x, h, [wi, wh, bi, bh], True, 1, 0.0, False, False, True)",
     {"args": (Arg("x", (2, 5, 3), empty_shape=(2, 0, 3)), H0, *GRU_W)}),
    ("gru.bidirectional", "torch.gru(x, h, [wi, wh, bi, bh, wir, whr, bir, bhr], True, 1, "
     "0.0, False, True, False)",
     {"args": (SEQ_IN, H0_2, *GRU_W, _w("wir", (12, 3)), _w("whr", (12, 4)),
               _w("bir", (12,)), _w("bhr", (12,)))}),
    ("rnn_tanh", "torch.rnn_tanh(x, h, [wi, wh, bi, bh], True, 1, 0.0, False, False, False)",
     {"args": (SEQ_IN, H0, _w("wi", (4, 3)), _w("wh", (4, 4)), _w("bi", (4,)),
               _w("bh", (4,)))}),
    ("rnn_relu", "torch.rnn_relu(x, h, [wi, wh, bi, bh], True, 1, 0.0, False, False, False)",
     {"args": (SEQ_IN, H0, _w("wi", (4, 3)), _w("wh", (4, 4)), _w("bi", (4,)),
               _w("bh", (4,)))}),
])

BAG_W = Arg("w", (10, 3), empty_shape=(10, 3))
BAG_I = Arg("i", (3, 4), kind="index", high=10, empty_shape=(3, 4))
FLAT_I = Arg("i", (8,), kind="index", high=10, empty_shape=(8,))
OFFSETS = _ints("o", (0, 3, 5))
EMBEDDING_BAG = _family("embedding_bag", [
    ("embedding_bag.mean", "F.embedding_bag(i, w, mode='mean')", {"args": (BAG_I, BAG_W)}),
    ("embedding_bag.sum", "F.embedding_bag(i, w, mode='sum')", {"args": (BAG_I, BAG_W)}),
    ("embedding_bag.max", "F.embedding_bag(i, w, mode='max')", {"args": (BAG_I, BAG_W)}),
    ("embedding_bag.offsets", "F.embedding_bag(i, w, o, mode='sum')",
     {"args": (FLAT_I, BAG_W, OFFSETS)}),
    ("embedding_bag.offsets_mean_last", "F.embedding_bag(i, w, o, mode='mean', "
     "include_last_offset=True)", {"args": (FLAT_I, BAG_W, OFFSETS)}),
    ("embedding_bag.per_sample_weights", "F.embedding_bag(i, w, per_sample_weights=p, "
     "mode='sum')", {"args": (BAG_I, BAG_W, Arg("p", (3, 4), low=0, high=1,
                                                   empty_shape=(3, 4)))}),
    ("embedding_bag.padding_idx", "F.embedding_bag(i, w, mode='sum', padding_idx=2)",
     {"args": (BAG_I, BAG_W)}),
    # the bag bookkeeping outputs (offset2bag, bag_size, max_indices) are the kernel's own
    ("_embedding_bag", "torch.ops.aten._embedding_bag(w, i, o)",
     {"args": (BAG_W, FLAT_I, OFFSETS), "shape_only": (1, 2, 3)}),
    ("_embedding_bag_forward_only", "torch.ops.aten._embedding_bag_forward_only(w, i, o, "
     "False, 1)", {"args": (BAG_W, FLAT_I, OFFSETS), "shape_only": (1, 2, 3)}),
    ("embedding_renorm", "torch.ops.aten.embedding_renorm(w, i, 1.0, 2.0)",
     {"args": (BAG_W, FLAT_I)}),
])

# Windows take no tensor: the window is added to a graph input of its length, so the
# case has one. The exporter's optimizer may fold the window into a constant (then the
# values checked are torchlib's function run by the ONNX reference evaluator, not ORT).
WIN = Arg("x", (8,), empty_shape=(8,))
SIGNAL = Arg("x", (2, 32), empty_shape=(0, 32))
CPLX = Arg("x", (4, 8, 2), empty_shape=(0, 8, 2))   # a complex (4, 8) as real pairs
SPECTRAL = _family("spectral", [
    ("hann_window", "x + torch.hann_window(8, dtype=x.dtype)", {"args": (WIN,)}),
    ("hann_window.symmetric", "x + torch.hann_window(8, periodic=False, dtype=x.dtype)",
     {"args": (WIN,)}),
    ("hamming_window", "x + torch.hamming_window(8, dtype=x.dtype)", {"args": (WIN,)}),
    ("blackman_window", "x + torch.blackman_window(8, dtype=x.dtype)", {"args": (WIN,)}),
    ("stft", "torch.view_as_real(torch.stft(x, 8, hop_length=2, window=w, "
     "return_complex=True))", {"args": (SIGNAL, Arg("w", (8,), low=0, high=1,
                                                     specials=False, empty_shape=(8,)))}),
    ("stft.onesided_false", "torch.view_as_real(torch.stft(x, 8, hop_length=4, window=w, "
     "center=False, onesided=False, return_complex=True))",
     {"args": (SIGNAL, Arg("w", (8,), low=0, high=1, specials=False, empty_shape=(8,)))}),
    ("fft.rfft", "torch.view_as_real(torch.fft.rfft(x))", {"args": (SIGNAL,)}),
    ("fft.fft_complex", "torch.view_as_real(torch.fft.fft(torch.view_as_complex(x)))",
     {"args": (CPLX,)}),
    ("fft.irfft_complex", "torch.fft.irfft(torch.view_as_complex(x))", {"args": (CPLX,)}),
])

COMPLEX = _family("complex", [
    ("complex", "torch.view_as_real(torch.complex(x, y))", {"args": PAIR}),
    ("polar", "torch.view_as_real(torch.polar(x, y))",
     {"args": (Arg("x", (13, 13), low=0, high=3), Arg("y", (13, 13)))}),
    ("conj.resolve", "torch.view_as_real(torch.view_as_complex(x).conj().resolve_conj())",
     {"args": (CPLX,)}),
    ("conj_physical", "torch.view_as_real(torch.conj_physical(torch.view_as_complex(x)))",
     {"args": (CPLX,)}),
    ("mH", "torch.view_as_real(torch.view_as_complex(x).mH.resolve_conj())",
     {"args": (CPLX,)}),
    ("view_as_real_copy", "torch.view_as_real_copy(torch.complex(x, y))", {"args": PAIR}),
    ("view_as_complex_copy", "torch.view_as_real(torch.view_as_complex_copy(x))",
     {"args": (CPLX,)}),
    ("resolve_neg", "torch.resolve_neg(x)", {"dtypes": ALL}),
    ("resolve_conj", "torch.resolve_conj(x)", {"dtypes": ALL}),
])

# Internal and backward ATen ops, called as torch.ops.aten.<op>: the exporter keeps
# those torchlib registers, so each is translated as written.
NCHW_W = Arg("w", (4,), low=0.5, high=1.5, specials=False, empty_shape=(4,))
INTERNAL = _family("aten_internal", [
    ("hardtanh_backward", "torch.ops.aten.hardtanh_backward(g, x, -1.0, 1.0)",
     {"args": (Arg("g", (4, 8)), X)}),
    ("_prelu_kernel", "torch.ops.aten._prelu_kernel(x, w)",
     {"args": (Arg("x", (2, 3, 4)), Arg("w", (1, 3, 1), specials=False,
                                         empty_shape=(1, 3, 1)))}),
    ("_softmax", "torch.ops.aten._softmax(x, -1, False)"),
    ("_log_softmax", "torch.ops.aten._log_softmax(x, -1, False)"),
    ("native_layer_norm", "torch.ops.aten.native_layer_norm(x, [6], w, b, 1e-5)",
     {"args": (X36, _w("w", (6,)), _w("b", (6,)))}),
    ("native_group_norm", "torch.ops.aten.native_group_norm(x, w, b, 2, 4, 9, 2, 1e-5)",
     {"args": (Arg("x", (2, 4, 3, 3), empty_shape=(2, 4, 3, 3)), NCHW_W, B4),
      "input_classes": NO_EMPTY}),
    ("native_batch_norm.train", "torch.ops.aten.native_batch_norm(x, w, b, None, None, "
     "True, 0.1, 1e-5)", {"args": (NCHW, NCHW_W, B4)}),
    ("_native_batch_norm_legit.no_stats", "torch.ops.aten._native_batch_norm_legit.no_stats("
     "x, w, b, True, 0.1, 1e-5)", {"args": (NCHW, NCHW_W, B4)}),
    ("_native_batch_norm_legit_functional", "torch.ops.aten._native_batch_norm_legit_"
     "functional(x, w, b, rm, rv, True, 0.1, 1e-5)",
     {"args": (NCHW, NCHW_W, B4, Arg("rm", (4,), specials=False, empty_shape=(4,)),
               Arg("rv", (4,), low=0.5, high=2, specials=False, empty_shape=(4,)))}),
    ("_native_batch_norm_legit_no_training", "torch.ops.aten._native_batch_norm_legit_"
     "no_training(x, w, b, rm, rv, 0.1, 1e-5)",
     {"args": (NCHW, NCHW_W, B4, Arg("rm", (4,), specials=False, empty_shape=(4,)),
               Arg("rv", (4,), low=0.5, high=2, specials=False, empty_shape=(4,)))}),
    ("_sdpa_flash_for_cpu", "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu("
     "q, k, v)", {"args": QKV}),
    ("_sdpa_flash_for_cpu.causal", "torch.ops.aten._scaled_dot_product_flash_attention_"
     "for_cpu(q, k, v, 0.0, True)", {"args": QKV}),
    ("nll_loss_forward", "torch.ops.aten.nll_loss_forward(x, t, None, 1, -100)",
     {"args": (Arg("x", (6, 5), empty_shape=(0, 5)),
               Arg("t", (6,), kind="index", high=5, empty_shape=(0,)))}),
    ("max_pool1d_with_indices", "torch.ops.aten.max_pool1d_with_indices(x, [2])",
     {"args": (SEQ,), "shape_only": (1,)}),
    ("max_pool3d_with_indices", "torch.ops.aten.max_pool3d_with_indices(x, [2, 2, 2])",
     {"args": (VOL,), "shape_only": (1,)}),
    ("_unsafe_index", "torch.ops.aten._unsafe_index(x, [i])", {"args": (X, IDX_ROWS),
                                                               "dtypes": ALL}),
    ("_unsafe_index_put", "torch.ops.aten._unsafe_index_put(x, [i], v)",
     {"args": (X, Arg("i", (3,), kind="index", high=4, unique=True, empty_shape=(3,)),
               Arg("v", (3, 8))), "dtypes": ALL}),
    ("_unsafe_view", "torch.ops.aten._unsafe_view(x, [8, 4])",
     {"dtypes": ALL, "input_classes": NO_EMPTY}),
    ("view_copy", "torch.ops.aten.view_copy(x, [8, 4])",
     {"dtypes": ALL, "input_classes": NO_EMPTY}),
    ("diagonal_copy", "torch.diagonal_copy(x, 1)", {"dtypes": ALL}),
    ("alias", "torch.ops.aten.alias(x) * 2", {"dtypes": ALL}),
    ("copy", "torch.ops.aten.copy(x, y)", {"args": (X, Arg("y", (8,))), "dtypes": ALL}),
    ("fill.scalar", "torch.ops.aten.fill(x, 2.5)", {"dtypes": ALL}),
    ("fill.tensor", "torch.ops.aten.fill(x, v)", {"args": (X, Arg("v", ())), "dtypes": ALL}),
    ("lift_fresh_copy", "torch.ops.aten.lift_fresh_copy(x)", {"dtypes": ALL}),
    ("unsafe_split", "torch.unsafe_split(x, 3, dim=1)", {"dtypes": ALL}),
    ("type_as", "x.type_as(y)", {"args": (X, Arg("y", (2,), kind="fixed", dtype="float64")),
                                 "dtypes": ALL}),
    ("new_empty.fill", "x.new_empty((3, 5)).fill_(1.5)", {"dtypes": ALL}),
    ("new_empty_strided.fill", "x.new_empty_strided((3, 5), (5, 1)).fill_(1.5)",
     {"dtypes": ALL}),
    ("empty_like.fill", "torch.empty_like(x).fill_(-2.0)", {"dtypes": ALL}),
    ("empty_strided.copy", "torch.empty_strided((4, 8), (1, 4), dtype=x.dtype).copy_(x)",
     {"dtypes": ALL}),
    ("empty.copy", "torch.empty((4, 8), dtype=x.dtype).copy_(x)", {"dtypes": ALL}),
    ("scalar_tensor", "x + torch.scalar_tensor(2.5, dtype=x.dtype)", {"dtypes": ALL}),
    ("linspace", "x + torch.linspace(-1.0, 1.0, 8, dtype=x.dtype)", {"args": (WIN,)}),
    # F.pad and F.interpolate export as aten.pad / upsample_*.vec whole: the per-rank
    # kernels torchlib also registers are reached only when called as themselves
    ("reflection_pad1d", "torch.ops.aten.reflection_pad1d(x, [2, 1])", {"args": (SEQ,)}),
    ("reflection_pad2d", "torch.ops.aten.reflection_pad2d(x, [1, 2, 2, 1])",
     {"args": (SMALL,)}),
    ("reflection_pad3d", "torch.ops.aten.reflection_pad3d(x, [1, 1, 1, 2, 2, 1])",
     {"args": (VOL,)}),
    ("replication_pad1d", "torch.ops.aten.replication_pad1d(x, [2, 1])", {"args": (SEQ,)}),
    ("replication_pad2d", "torch.ops.aten.replication_pad2d(x, [1, 2, 2, 1])",
     {"args": (SMALL,)}),
    ("replication_pad3d", "torch.ops.aten.replication_pad3d(x, [1, 1, 1, 2, 2, 1])",
     {"args": (VOL,)}),
    ("upsample_linear1d", "torch.ops.aten.upsample_linear1d(x, [9], True)",
     {"args": (Arg("x", (1, 2, 5), empty_shape=(0, 2, 5)),)}),
    ("upsample_nearest1d", "torch.ops.aten.upsample_nearest1d(x, [10])",
     {"args": (Arg("x", (1, 2, 5), empty_shape=(0, 2, 5)),)}),
    ("upsample_nearest2d", "torch.ops.aten.upsample_nearest2d(x, [8, 10])",
     {"args": (SMALL,)}),
    ("upsample_nearest3d", "torch.ops.aten.upsample_nearest3d(x, [6, 6, 6])",
     {"args": (VOL,)}),
    ("upsample_bilinear2d", "torch.ops.aten.upsample_bilinear2d(x, [7, 9], False)",
     {"args": (SMALL,)}),
    ("upsample_bicubic2d", "torch.ops.aten.upsample_bicubic2d(x, [7, 9], True)",
     {"args": (SMALL,)}),
    ("upsample_trilinear3d", "torch.ops.aten.upsample_trilinear3d(x, [6, 6, 6], False)",
     {"args": (VOL,)}),
    ("col2im", "torch.ops.aten.col2im(x, [4, 4], [2, 2], [1, 1], [0, 0], [2, 2])",
     {"args": (Arg("x", (1, 12, 4), empty_shape=(0, 12, 4)),)}),
    # grouped matmul (MoE layers): rows of a split by offsets, one (8, 8) matrix per group
    ("_grouped_mm", "torch._grouped_mm(a, b, offs=o.to(torch.int32))",
     {"args": (Arg("a", (4, 8), empty_shape=(4, 8)), Arg("b", (2, 8, 8), empty_shape=(2, 8, 8)),
               _ints("o", (2, 4))), "input_classes": NO_EMPTY}),
])

# Random values: only the shape and dtype are a contract (outputs compared by shape).
RAND = {"shape_only": (0,), "input_classes": (NORMAL,)}
RANDOM = _family("random", [
    ("rand_like", "torch.rand_like(x)", RAND), ("randn_like", "torch.randn_like(x)", RAND),
    ("randint_like", "torch.randint_like(x, 10)", {**RAND, "dtypes": ALL}),
    ("rand", "torch.rand(x.shape, dtype=x.dtype)", RAND),
    ("randn", "torch.randn(x.shape, dtype=x.dtype)", RAND),
    ("randint", "torch.randint(0, 10, x.shape)", {**RAND, "dtypes": ALL}),
    ("bernoulli", "torch.bernoulli(x)", {**RAND, "args": (Arg("x", (4, 8), low=0, high=1),)}),
    ("multinomial", "torch.multinomial(x, 3)",
     {**RAND, "args": (Arg("x", (4, 8), low=0.1, high=1),)}),
    ("normal.tensor", "torch.normal(x, s)",
     {**RAND, "args": (X, Arg("s", (4, 8), low=0.1, high=1, specials=False))}),
    ("normal_", "torch.empty_like(x).normal_()", RAND),
    ("native_dropout", "torch.ops.aten.native_dropout(x, 0.5, True)",
     {**RAND, "shape_only": (0, 1)}),
    ("dropout.train", "torch.ops.aten.dropout(x, 0.5, True)", RAND),
])

# Outputs whose size depends on the values (unique, nonzero): a few repeated values.
REPEATS = Arg("x", (4, 8), kind="choice", values=(-1.0, 0.0, 1.0, 2.5))
DYNAMIC = _family("dynamic", [
    ("unique", "torch.unique(x)", {"args": (REPEATS,), "dtypes": ALL}),
    ("unique.inverse_counts", "torch.unique(x, return_inverse=True, return_counts=True)",
     {"args": (REPEATS,), "dtypes": ALL}),
    ("unique.dim0", "torch.unique(x, dim=0)", {"args": (Arg("x", (6, 3), kind="choice",
                                                            values=(0.0, 1.0)),),
                                               "dtypes": ALL}),
    ("_unique", "torch._unique(x)", {"args": (REPEATS,), "dtypes": ALL}),
    ("unique_consecutive", "torch.unique_consecutive(x)", {"args": (REPEATS,),
                                                           "dtypes": ALL}),
    # torchlib translates unique_consecutive for int32/int64 only: an index input reaches it
    ("unique_consecutive.int64", "torch.unique_consecutive(i, return_counts=True)",
     {"args": (Arg("i", (12,), kind="index", high=3),)}),
    ("nonzero", "torch.nonzero(x)", {"args": (REPEATS,), "dtypes": ALL}),
    ("bincount", "torch.bincount(i)", {"args": (Arg("i", (12,), kind="index", high=6),)}),
    ("histc", "torch.histc(x, bins=5, min=-2.0, max=2.0)"),
])

# Alias spellings torchlib registers as ops of their own and the exporter keeps as written
# (aten.greater.Tensor, aten.special_erf ...); OpInfo tests aliases through the canonical op.
ALIAS = _family("alias", [
    ("alias.greater", "torch.greater(x, y)", {"dtypes": ALL}),
    ("alias.greater_equal", "torch.greater_equal(x, y)", {"dtypes": ALL}),
    ("alias.less", "torch.less(x, y)", {"dtypes": ALL}),
    ("alias.less_equal", "torch.less_equal(x, y)", {"dtypes": ALL}),
    ("alias.multiply", "torch.multiply(x, y)", {"dtypes": ALL}),
    ("alias.multiply.scalar", "torch.multiply(x, 2.5)", {"args": (X13,)}),
    ("alias.subtract.scalar", "torch.subtract(x, 2.5)", {"args": (X13,)}),
    ("alias.divide.scalar", "torch.divide(x, 2.5)", {"args": (X13,), "signed_zeros": True}),
    ("alias.true_divide.scalar", "torch.true_divide(x, 2.5)", {"args": (X13,)}),
    ("alias.concat", "torch.concat([x, y])", {"dtypes": ALL}),
    ("alias.concatenate", "torch.concatenate([x, y], dim=1)", {"dtypes": ALL}),
    ("alias.special.erf", "torch.special.erf(x)", {"args": (X13,)}),
    ("alias.special.erfc", "torch.special.erfc(x)", {"args": (X13,)}),
    ("alias.special.expm1", "torch.special.expm1(x)", {"args": (X13,)}),
    ("alias.special.softmax", "torch.special.softmax(x, -1)", {"args": (X13,)}),
    ("alias.special.log_softmax", "torch.special.log_softmax(x, -1)", {"args": (X13,)}),
], args=PAIR)

QUANT = _family("quantize", [
    ("fake_quantize_per_tensor", "torch.fake_quantize_per_tensor_affine(x, 0.1, 3, -128, 127)",
     {"args": (Arg("x", (4, 8), low=-20, high=20),)}),
    # eager's per-channel kernel casts round(±inf / s) to an integer before clamping
    # (undefined in C: ±inf comes out as quant_min), unlike its per-tensor kernel, which
    # saturates: ordinary data only, as for the float → int casts
    ("fake_quantize_per_channel", "torch.fake_quantize_per_channel_affine(x, s, "
     "z.to(torch.int32), 1, -128, 127)",
     {"args": (Arg("x", (4, 8), low=-20, high=20), Arg("s", (8,), kind="fixed",
                                                        dtype="float32", low=0.05, high=0.5),
               Arg("z", (8,), kind="index", low=-3, high=3)), "input_classes": NO_SPECIALS}),
])

_TORCHLIB = "https://github.com/microsoft/onnxscript/blob/main/onnxscript/function_libs/torch_lib"
# Known upstream, reviewed against torchlib's source: deliberate choices and open reports.
# variant id → (reason, link, dtypes where it fails; the others pass or fail otherwise).
# softmax(dtype=) is lowered in the input's precision and cast afterwards.
SOFTMAX_DTYPE = ("softmax/log_softmax(dtype=) computed in the input's precision, then cast "
                 "(the CPU provider hides it: values match)",
                 "https://github.com/pytorch/pytorch/issues/153393")
KNOWN: dict[str, tuple[str, str, tuple[str, ...]]] = {
    **{f"{op}.dtype_f32": (*SOFTMAX_DTYPE, ("float16",)) for op in ("softmax", "log_softmax")},
    **{f"{op}.dtype_f64": (*SOFTMAX_DTYPE, ("float16", "float32"))
       for op in ("softmax", "log_softmax")},
    "hamming_window": (
        "lowered to ONNX HammingWindow, whose definition uses alpha=25/46, beta=21/46 where "
        "torch uses 0.54/0.46: w[0] 0.0870 vs 0.08 (aten_hamming_window's comment: kept "
        "for performance)", "https://onnx.ai/onnx/operators/onnx__HammingWindow.html",
        ("float32", "float64")),
    "_native_batch_norm_legit_functional": (
        "training=True is overridden (`training = False`, a TODO in torchlib's "
        "aten__native_batch_norm_legit_functional): the batch is normalised with the "
        "running statistics", f"{_TORCHLIB}/ops/core.py", ("float32",)),
    "nll_loss_forward": (
        "total_weight is faked as Size(output) (a FIXME in torchlib's "
        "aten_nll_loss_forward): 1 where eager counts the non-ignored targets",
        f"{_TORCHLIB}/ops/nn.py", ("float16", "float32", "float64")),
}


def _known(variants: list[OpVariant]) -> list[OpVariant]:
    return [v.xfail(*KNOWN[v.id][:2], dtypes=KNOWN[v.id][2]) if v.id in KNOWN else v
            for v in variants]


VARIANTS: list[OpVariant] = _known([
    *UNARY, *ROUNDING, *CAST, *PREDICATE, *BINARY, *COMPARE, *REDUCTION, *SOFTMAX,
    *CUMULATIVE, *SORT, *SELECT, *INDEX, *SCATTER, *LOSS, *SPECIAL, *ACTIVATION, *NORM,
    *POOL, *INTERP, *PAD, *ATTENTION, *LINALG, *RECURRENT, *EMBEDDING_BAG, *SPECTRAL,
    *COMPLEX, *INTERNAL, *RANDOM, *DYNAMIC, *ALIAS, *QUANT,
])
assert set(KNOWN) <= {v.id for v in VARIANTS}, "a KNOWN entry names no variant"
