"""Dtype kinds and float bit patterns: ULP distance and the hex shown for the
worst element.

Kept apart from the scan because these work on one element at a time (a
report's evidence), never on a whole tensor.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

try:  # bfloat16 is an optional extension dtype
    import ml_dtypes

    BF16: np.dtype | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None

__all__ = ["BF16", "bits_hex", "dtype_name", "kind_of", "ulp_distance"]

_BITS_INT = {2: np.int16, 4: np.int32, 8: np.int64}


def kind_of(dtype: np.dtype) -> str:
    """``"bool"``, ``"int"`` or ``"float"``: which comparison rule applies."""
    if dtype == np.bool_:
        return "bool"
    if dtype.kind in "iu":
        return "int"
    if dtype.kind == "f" or (BF16 is not None and dtype == BF16):
        return "float"
    raise TypeError(f"compare() does not support dtype {dtype}")


def dtype_name(dtype: np.dtype) -> str:
    """The dtype as reports spell it (numpy would print bfloat16 as a void type)."""
    return "bfloat16" if BF16 is not None and dtype == BF16 else str(dtype)


def _ordered(bits: np.ndarray, nbits: int) -> np.ndarray:
    """Map float bit patterns (as signed ints) to integers ordered like the
    floats, with +0 and -0 both at 0, so ULP distance is a subtraction."""
    b = bits.astype(np.int64)
    lo = -(1 << (nbits - 1))
    return np.where(b < 0, lo - b, b)


def ulp_distance(a: Any, b: Any, dtype: Any) -> int | None:
    """Number of representable ``dtype`` values between a and b.

    ±0 are 0 apart; NaN vs NaN and equal infinities are 0 apart; a NaN
    against a number or an infinity against anything else is not a
    distance (None).
    """
    dt = np.dtype(dtype)
    x = np.asarray(a, dtype=dt).reshape(())
    y = np.asarray(b, dtype=dt).reshape(())
    fx, fy = float(x), float(y)
    if math.isnan(fx) or math.isnan(fy):
        return 0 if math.isnan(fx) and math.isnan(fy) else None
    if math.isinf(fx) or math.isinf(fy):
        return 0 if fx == fy else None
    ity = _BITS_INT[dt.itemsize]
    kx = _ordered(x.view(ity), dt.itemsize * 8)
    ky = _ordered(y.view(ity), dt.itemsize * 8)
    return int(abs(int(kx) - int(ky)))


def bits_hex(v: np.ndarray) -> str:
    """Bit pattern of a one-element array, zero-padded to its width: tells
    -0 from +0 and one NaN payload from another, which a decimal cannot."""
    uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[v.dtype.itemsize]
    width = v.dtype.itemsize * 2
    return "0x" + format(int(v.reshape(()).view(uint)), f"0{width}x")
