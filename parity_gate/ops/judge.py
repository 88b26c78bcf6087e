"""Eager outputs vs ONNX Runtime outputs of one case → comparisons and an outcome.

Pure: arrays in, records out, with `compare()` doing every number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.engine.stages import classify, failure_reason
from parity_gate.model.findings import Example
from parity_gate.model.outcomes import Outcome
from parity_gate.ops.records import FLOATS, OpVariant


@dataclass
class Judgement:
    outcome: Outcome
    reason: str
    comparisons: list[cmp.Comparison] = field(default_factory=list)

    @property
    def values_differ(self) -> bool:
        return self.outcome is Outcome.MISMATCH


def _tolerance(variant: OpVariant, dtype: str) -> cmp.Tolerance:
    atol, rtol = variant.tolerance_for(dtype)
    return cmp.Tolerance(atol=atol, rtol=rtol)


def tolerance_for_output(variant: OpVariant, case_dtype: str, out: np.ndarray) -> cmp.Tolerance:
    """A float output is judged at its own dtype's tolerance (float16 in, float32 out)."""
    name = np.dtype(out.dtype).name
    return _tolerance(variant, name if name in FLOATS else case_dtype)


def _shape_only(ref: np.ndarray, got: np.ndarray, tol: cmp.Tolerance, name: str) -> cmp.Comparison:
    """Shape and dtype only: same-valued stand-ins keep compare() the judge of both."""
    return cmp.compare(np.zeros(ref.shape, ref.dtype), np.zeros(got.shape, got.dtype), tol,
                       name=name)


def judge(variant: OpVariant, dtype: str, eager: list[np.ndarray],
          onnx: list[np.ndarray]) -> Judgement:
    if len(eager) != len(onnx):
        return Judgement(Outcome.SHAPE_MISMATCH,
                         f"exported model returns {len(onnx)} output(s), eager returns "
                         f"{len(eager)}")
    comparisons = []
    for m, (ref, got) in enumerate(zip(eager, onnx, strict=True)):
        name = f"o{m}"
        tol = tolerance_for_output(variant, dtype, ref)
        if m in variant.shape_only:
            comparisons.append(_shape_only(ref, got, tol, name))
        else:
            comparisons.append(cmp.compare(ref, got, tol, name=name,
                                           strict_signed_zeros=variant.signed_zeros))
    return Judgement(classify(comparisons), failure_reason(comparisons), comparisons)


def fmt_value(value: Any) -> str:
    """JSON-safe text for one element (reports are written with allow_nan=False)."""
    if isinstance(value, (np.integer, np.bool_, bool, int)):
        return str(int(value))
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "-0.0" if np.signbit(v) else "0.0"
    return repr(int(v)) if v.is_integer() and abs(v) < 2**53 else f"{v:.9g}"


def same_elements(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise identity: equal values, NaN equal to NaN, the sign of zero counted."""
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        return np.asarray(a == b)
    x, y = a.astype(np.float64), b.astype(np.float64)
    return ((x == y) & (np.signbit(x) == np.signbit(y))) | (np.isnan(x) & np.isnan(y))


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(same_elements(a, b).all())


def _differing(comparison: cmp.Comparison, eager: np.ndarray,
               onnx: np.ndarray) -> tuple[int, ...] | None:
    """An element the comparison failed on: the worst one if it differs, else the first
    that does (a signed-zero failure's worst element by size is one that agrees)."""
    index = comparison.worst_index or comparison.first_index
    signed = comparison.verdict is cmp.Verdict.SIGNED_ZERO
    if index is not None and not signed and not same_elements(eager[index], onnx[index]):
        return index
    differ = ~same_elements(eager, onnx)
    if signed:
        differ &= (eager == 0) & (onnx == 0)
    hits = np.argwhere(differ)
    return tuple(int(i) for i in hits[0]) if hits.size else index


def example(comparison: cmp.Comparison, eager: np.ndarray, onnx: np.ndarray,
            inputs: dict[str, np.ndarray]) -> Example | None:
    """An element that differs (the worst one when it does), with the inputs at the same
    index for elementwise ops."""
    if eager.shape != onnx.shape or not eager.size:
        return None
    index = _differing(comparison, eager, onnx)
    if index is None:
        return None
    at = {name: fmt_value(arr[index]) for name, arr in inputs.items()
          if arr.shape == eager.shape}
    return Example(output=comparison.name, index=list(index), eager=fmt_value(eager[index]),
                   onnx=fmt_value(onnx[index]), inputs=at)
