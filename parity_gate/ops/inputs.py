"""Input tensors for one (variant, dtype, input class): pure numpy, deterministic.

Seeds derive from names, so the parent process (repro scripts) and the
worker (the sweep) build byte-identical inputs without sending arrays around.
The `specials` class places special values so that every one appears, and
for same-shaped args every *pair* of them appears at some position
(atan2(-0, -0), fmod(inf, 0), pow(0, -inf) ...), with ordinary data elsewhere.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from parity_gate.engine.fixtures import NUMPY_DTYPES, derive_seed, special_values
from parity_gate.ops.records import EMPTY, FLOATS, RANGE, SPECIALS, Arg, OpVariant


def float_specials(dtype: str) -> list[float]:
    """Every special value of one float dtype, signs included (float16 gets its own denormals)."""
    base = special_values(dtype, None)  # nan, inf, -inf, 0, -0, denormal, tiny, huge
    denormal, tiny, huge = base[5], base[6], base[7]
    return [*base, -denormal, -tiny, -huge, 1.0, -1.0]


def int_specials(dtype: str) -> list[int]:
    """Extremes, zero and the values that overflow with them (int_min // -1, -int_min)."""
    info = np.iinfo(NUMPY_DTYPES[dtype])
    values = [int(info.min), int(info.max), 0, 1, int(info.max) - 1]
    if info.min < 0:
        values += [-1, int(info.min) + 1]
    return values


def shape_for(arg: Arg, input_class: str) -> tuple[int, ...]:
    """The empty class zeroes the last dim, so a dim=-1 reduction reduces over nothing."""
    if input_class != EMPTY:
        return arg.shape
    if arg.empty_shape is not None:
        return arg.empty_shape
    if not arg.shape:
        return arg.shape
    return (*arg.shape[:-1], 0)


def make_inputs(variant: OpVariant, dtype: str, input_class: str,
                seed: int = 0) -> dict[str, np.ndarray]:
    """All graph inputs of one case, keyed by arg name."""
    out: dict[str, np.ndarray] = {}
    data_index = 0
    count = sum(1 for a in variant.args if a.follows and a.specials)
    for arg in variant.args:
        rng = np.random.default_rng(derive_seed(seed, variant.id, arg.name, dtype, input_class))
        shape = shape_for(arg, input_class)
        if arg.kind == "sample" and not arg.follows:
            out[arg.name] = _cast(stored_values(arg), arg.dtype or "float32")
        elif arg.follows:
            out[arg.name] = _data(arg, shape, dtype, input_class, data_index, rng, count)
            data_index += 1
        elif arg.kind == "index":
            out[arg.name] = _index(arg, shape, rng)
        elif arg.kind == "mask":
            out[arg.name] = _mask(arg, shape, rng)
        elif arg.kind == "prob":
            out[arg.name] = _prob(shape, dtype, rng)
        elif arg.kind == "choice":
            picked = rng.choice(np.array(arg.values, dtype=np.float64), size=shape)
            out[arg.name] = _cast(picked, arg.dtype or dtype)
        else:
            fixed = arg.dtype or "float32"
            out[arg.name] = _data(arg, shape, fixed, "normal", 0, rng)
    return out


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """A C-ordered copy in `dtype` (0-d stays 0-d: np.ascontiguousarray would make it 1-d)."""
    values = np.asarray(values)
    if dtype == "bfloat16":
        return values.astype(np.float32).astype(ml_dtypes.bfloat16, order="C")
    return values.astype(NUMPY_DTYPES[dtype], order="C")


def _normal_values(arg: Arg, shape: tuple[int, ...], dtype: str,
                   rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in FLOATS:
        if arg.low is not None or arg.high is not None:
            low = arg.low if arg.low is not None else -3.0
            high = arg.high if arg.high is not None else 3.0
            return rng.uniform(low, high, size=shape)
        return rng.normal(0.0, 1.5, size=shape)
    info = np.iinfo(NUMPY_DTYPES[dtype])
    # a domain outside the dtype's range (lgamma.large's 1e3..1e6 in int8) is clamped into it
    low = min(max(int(info.min), int(arg.low) if arg.low is not None else -10), int(info.max))
    high = max(min(int(info.max), int(arg.high) if arg.high is not None else 10), int(info.min))
    low, high = min(low, high), max(low, high)
    values = rng.integers(low, high + 1, size=shape, dtype=np.int64)
    if arg.nonzero_int:
        values[values == 0] = 1
    return values


def stored_values(arg: Arg) -> np.ndarray:
    """A `sample` arg's given values, as stored (bfloat16 is stored as float32)."""
    stored = arg.stored or "float32"
    kind = np.float32 if stored == "bfloat16" else NUMPY_DTYPES[stored]
    return np.frombuffer(arg.sample, dtype=np.dtype(kind).newbyteorder("<")).reshape(
        arg.shape).astype(kind)


def _given(arg: Arg, dtype: str) -> np.ndarray:
    """Given float data in another dtype: floats cast; integers truncated toward zero and
    clipped to the dtype (unsigned ones take magnitudes); bools are the positive values."""
    values = stored_values(arg).astype(np.float64)
    if dtype in FLOATS:
        return values
    if dtype == "bool":
        return np.asarray(values > 0)
    info = np.iinfo(NUMPY_DTYPES[dtype])
    ints = np.trunc(np.nan_to_num(values, nan=0.0, posinf=info.max, neginf=info.min))
    if info.min == 0:
        ints = np.abs(ints)
    return np.asarray(np.clip(ints, info.min, info.max), dtype=np.int64)  # 0-d stays an array


def _data(arg: Arg, shape: tuple[int, ...], dtype: str, input_class: str, position: int,
          rng: np.random.Generator, count: int = 1) -> np.ndarray:
    if arg.kind == "sample" and shape == arg.shape:
        values = _given(arg, dtype)
    else:  # generated data, or a sample's empty class
        values = _normal_values(arg, shape, dtype, rng)
    if input_class == RANGE and arg.specials and dtype in FLOATS and values.size:
        values = ordinary_range(arg, shape, rng)
    if input_class == SPECIALS and arg.specials and dtype != "bool" and values.size:
        if dtype in FLOATS:
            specials: list[float] = float_specials(dtype)
        else:
            specials = [v for v in int_specials(dtype) if not (arg.nonzero_int and v == 0)]
        values = _place_specials(values.astype(np.float64 if dtype in FLOATS else object),
                                 specials, position, count)
    if arg.masked_rows and dtype in FLOATS:
        values = masked_bias(arg, np.asarray(values, dtype=np.float64))
    return _cast(np.asarray(values), dtype)


def ordinary_range(arg: Arg, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """The `range` class: the function's ordinary range, evenly covered.

    Within the arg's domain [low, high] when it has one (evenly spaced), else
    magnitudes 1e-4 .. 1e4 log-spaced with both signs: where approximations
    switch branches (erfcx at moderate x, lgamma between poles), not at the
    extremes the `specials` class already tries. Shuffled, so neighbouring
    elements do not share a vector lane pattern.
    """
    n = int(np.prod(shape))
    if arg.low is not None or arg.high is not None:
        low = arg.low if arg.low is not None else -1e4
        high = arg.high if arg.high is not None else 1e4
        values = np.linspace(low, high, n + 2)[1:-1]
    else:
        mags = np.logspace(-4, 4, (n + 1) // 2)
        values = np.concatenate([mags, -mags])[:n]
    return rng.permutation(values).reshape(shape)


def _place_specials(values: np.ndarray, specials: list, position: int,
                    count: int) -> np.ndarray:
    """Special values at the head of the tensor, ordinary data after them.

    With two or more same-shaped data args, the first n*n elements hold
    every pair: arg 0 cycles through the specials, arg 1 repeats each n
    times (further args cycle with an offset). A lone or smaller arg holds
    every special once.
    """
    flat = values.reshape(-1).copy()
    n = len(specials)
    if count >= 2 and flat.size >= n * n:
        span, stride, offset = n * n, n ** position if position < 2 else 1, max(0, position - 1)
    else:
        span, stride, offset = n, 1, 0
    for i in range(min(flat.size, span)):
        flat[i] = specials[(i // stride + offset) % n]
    return flat.reshape(values.shape)


def _index(arg: Arg, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    low = int(arg.low or 0)
    high = int(arg.high if arg.high is not None else 1)
    if arg.unique and shape and shape[-1] <= high - low:
        rows = int(np.prod(shape[:-1]))
        picks = [rng.permutation(np.arange(low, high))[: shape[-1]] for _ in range(rows)]
        values = np.array(picks, dtype=np.int64).reshape(shape)
        return _cast(values, arg.dtype or "int64")
    values = rng.integers(low, high, size=shape, dtype=np.int64)
    if arg.values and values.size:
        pick = rng.random(shape) < 0.3
        values[pick] = rng.choice(np.array(arg.values, dtype=np.int64), size=int(pick.sum()))
    return _cast(values, arg.dtype or "int64")


def _mask(arg: Arg, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    mask = rng.random(shape) < 0.6
    if len(shape) >= 2 and shape[-1]:
        for row in arg.masked_rows:
            if row < shape[-2]:
                mask[..., row, :] = False
    return _cast(mask, "bool")


def masked_bias(arg: Arg, values: np.ndarray) -> np.ndarray:
    """Float attention bias whose `masked_rows` are all -inf (fully masked rows)."""
    out = values.copy()
    if len(out.shape) >= 2 and out.shape[-1]:
        for row in arg.masked_rows:
            if row < out.shape[-2]:
                out[..., row, :] = -np.inf
    return out


def _prob(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    raw = rng.random(shape) + 0.05
    axis = 1 if len(shape) > 1 else 0
    total = raw.sum(axis=axis, keepdims=True)
    return _cast(np.divide(raw, total, out=np.zeros_like(raw), where=total > 0), dtype)
