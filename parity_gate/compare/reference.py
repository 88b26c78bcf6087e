"""Judge a mismatch against a float64 run of the same weights and inputs.

The eager reference is not the truth: it carries its own rounding, and the
exported model may well be the more accurate side (a MobileNetV2 in float16 was
0.018 off float64 in eager and 0.033 in ONNX Runtime; their 0.049 apart failed
the gate; float32 torchvision classifiers differ from ORT by 1-2 units in the
4th digit on one element in 2000). So each side is measured against float64
(rounded to the case's dtype: what an exact model of that dtype would return)
with the case's own tolerance. The mismatch is a defect only when the exported
model is clearly further from float64 than eager is, and, in float32, also
outside float32's rounding bound at the output's scale (within it, any correct
implementation may land there, however lucky eager was). An infinite distance
(a NaN or inf on one side) is never excused. Pure: arrays in, a `Reference`
record out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parity_gate.compare.decide import tie_window
from parity_gate.compare.ulp import dtype_name, kind_of
from parity_gate.model.comparison import Comparison, Tolerance, Verdict
from parity_gate.model.precision import CLEARLY_WORSE, ROUNDOFF, Reference, Ruling

__all__ = ["ACCUMULATION", "AccumulationRule", "OutputRules", "judge_against_float64",
           "labels_wrong"]

_ORDER = {Ruling.ONNX_EXACT: 0, Ruling.ONNX_ROUNDING: 1, Ruling.AS_EAGER: 2,
          Ruling.ONNX_ACCUMULATION: 3, Ruling.ONNX_WORSE: 4}


@dataclass(frozen=True)
class AccumulationRule:
    """Where a reduction's accumulator may be the narrow dtype itself, and how far that
    legitimately lands from float64.

    Eager float16 on CUDA runs matmuls and convolutions through cuBLAS and cuDNN, which
    accumulate in float32 unless told otherwise; ONNX Runtime's CUDA and TensorRT kernels
    may pick a float16 accumulator (cuBLAS compute-16F, a cuDNN or TensorRT tactic, split-K
    partial sums stored in float16). Both are correct implementations of a float16 matmul,
    and the float16 one is further from float64 by the accumulator's rounding alone:
    summing K products in float16 makes an error of about sqrt(K)·u·Σ|a_i·b_i| in the
    probabilistic model (Higham & Mary 2019, rounding errors independent and zero-mean),
    which is about sqrt(K)·u·|the sum's scale| for data without a large common sign. So,
    for a `dtype` output on one of `providers` that depends on a reduction of length K (the
    longest MatMul/Gemm inner dimension or Conv C_in/group·kernel area upstream of it), ONNX
    Runtime is a correct kernel when every element is within
    `slack`·sqrt(K)·u·max(|float64|, mean|float64|) of float64: eager being closer only
    says cuBLAS accumulated in float32. `slack` covers the largest of many elements (about
    4 standard deviations of the accumulated error); above it the kernel lost more than
    its accumulator explains, and the mismatch stands."""

    dtype: str = "float16"
    providers: tuple[str, ...] = ("cuda", "tensorrt")
    slack: float = 4.0

    def applies(self, dtype: str, provider: str) -> bool:
        return dtype == self.dtype and provider in self.providers

    def bound(self, length: int, truth: np.ndarray) -> np.ndarray:
        """The per-element bound for a K=`length` reduction, at float64's scale `truth`."""
        t = np.abs(np.asarray(truth, np.float64))
        finite = t[np.isfinite(t)]
        scale = float(finite.mean()) if finite.size else 0.0
        return self.slack * math.sqrt(length) * ROUNDOFF[self.dtype] * np.maximum(t, scale)


ACCUMULATION = AccumulationRule()

# Dtypes whose comparison's rounding bound (ROUNDING_DEPTH units of roundoff at the output's
# scale) is tight enough to call an ONNX output within it a correct implementation whatever
# eager did: float32's bound is 1.2e-4 relative, inside the default rtol of 1e-3. Float16's
# (1.6%) and bfloat16's (6%) would let an op computed in the narrow type where eager
# accumulates in float32 through, so those keep the eager-relative factor alone.
ROUNDING_IS_CORRECT = ("float32", "float64")


def _needed(c: Comparison) -> float:
    """Smallest atol (at the case's rtol) that passes; inf for a one-sided NaN/Inf."""
    return math.inf if c.needed_atol is None else float(c.needed_atol)


def labels_wrong(side: np.ndarray, truth: np.ndarray, dname: str) -> int:
    """Samples whose top-1 is below float64's best by more than the dtype's tie window
    (a label the dtype cannot tell from the best one is not wrong)."""
    if side.ndim == 0 or side.shape[-1] == 0 or side.size == 0:
        return 0
    t2 = truth.reshape(-1, truth.shape[-1]).astype(np.float64)
    pick = np.argmax(side.reshape(-1, side.shape[-1]), axis=1)
    best = t2.max(axis=1)
    chosen = t2[np.arange(t2.shape[0]), pick]
    scale = np.maximum(np.abs(best), np.abs(t2).mean(axis=1))
    return int(np.count_nonzero(best - chosen > tie_window(scale, dname)))


@dataclass(frozen=True)
class OutputRules:
    """How each output of a case is judged, index for index: its name (for the
    reason), its tolerance, whether it is a classification's logits (wrong labels
    are counted), and whether it is discrete (rounded, compared, an index: never
    excused by distance to float64); `discrete` may be shorter than the outputs.
    `reductions`: per output, the longest reduction it depends on where the case's dtype
    and provider may accumulate in the narrow type (ACCUMULATION.applies), else None or
    absent: the accumulation bound is then not considered."""

    names: Sequence[str]
    tolerances: Sequence[Tolerance]
    classify: Sequence[bool]
    discrete: Sequence[bool] = ()
    reductions: Sequence[int | None] = ()


def judge_against_float64(
    eager: Sequence[np.ndarray], onnx: Sequence[np.ndarray], truth: Sequence[np.ndarray],
    rules: OutputRules, outputs: Sequence[int],
) -> Reference:
    """The ruling over the failing `outputs` (indices): the worst output decides. A
    failing discrete output (integer, bool, or marked in `rules.discrete`: rounded,
    compared, an index) is never excused by distance to float64: the ruling is then
    DISCRETE, unless another output is already a defect."""
    names = rules.names
    if len(truth) != len(eager):
        return Reference(Ruling.UNVERIFIED, error=f"float64 run returns {len(truth)} "
                         f"output(s), the case {len(eager)}")
    best: Reference | None = None
    steps: list[int] = []
    for m in outputs:
        e, o, t = np.asarray(eager[m]), np.asarray(onnx[m]), np.asarray(truth[m])
        if kind_of(e.dtype) != "float" or (m < len(rules.discrete) and rules.discrete[m]):
            steps.append(m)  # a whole unit apart is another branch taken, not rounding
            continue
        if not (t.shape == e.shape == o.shape):
            return Reference(Ruling.UNVERIFIED, output=names[m],
                             error=f"{names[m]}: float64 shape {t.shape} vs {e.shape}")
        here = _judge_output(e, o, t, rules, m)
        if best is None or (_ORDER[here.ruling], _ratio(here)) > (_ORDER[best.ruling],
                                                                  _ratio(best)):
            best = here
    if steps and (best is None or not best.ruling.defect):
        name = names[steps[0]]
        return Reference(Ruling.DISCRETE, output=name,
                         case_dtype=dtype_name(np.asarray(eager[steps[0]]).dtype),
                         error=f"{name} is discrete (an integer, a rounding, a comparison or "
                         "an index): its values differ by whole steps, which no distance to "
                         "float64 excuses")
    return best or Reference(Ruling.UNVERIFIED, error="no floating output failed")


def _judge_output(e: np.ndarray, o: np.ndarray, t: np.ndarray, rules: OutputRules,
                  m: int) -> Reference:
    """One floating output's ruling: each side's distance to float64 (rounded to the
    case's dtype) with the output's own tolerance, then, for a classification, the
    labels each side gets wrong against float64's."""
    from parity_gate.compare import compare

    name, tol = rules.names[m], rules.tolerances[m]
    dname = dtype_name(e.dtype)
    length = rules.reductions[m] if m < len(rules.reductions) else None
    with np.errstate(all="ignore"):
        rounded = t.astype(e.dtype).astype(np.float64)
    ce = compare(rounded, e.astype(np.float64), tol, name=name)
    co = compare(rounded, o.astype(np.float64), tol, name=name)
    e_err, o_err = _needed(ce), _needed(co)
    if co.passed:
        ruling = Ruling.ONNX_EXACT
    elif dname in ROUNDING_IS_CORRECT and _within_rounding(t, o, tol):
        ruling = Ruling.ONNX_ROUNDING
    elif math.isfinite(o_err) and o_err <= CLEARLY_WORSE * e_err:
        ruling = Ruling.AS_EAGER  # never on an infinite distance: inf <= 4 * inf says nothing
    elif length is not None and _within_accumulation(t, o, length):
        ruling = Ruling.ONNX_ACCUMULATION
    else:
        ruling = Ruling.ONNX_WORSE
    wrong: tuple[int, int] | None = None
    if rules.classify[m]:
        wrong = labels_wrong(e, t, dname), labels_wrong(o, t, dname)
        if wrong[1] > max(CLEARLY_WORSE * wrong[0], wrong[0] + 1):
            ruling = Ruling.ONNX_WORSE
    accumulated = length is not None and ruling is not Ruling.ONNX_EXACT
    return Reference(ruling, output=name, eager_error=e_err, onnx_error=o_err,
                     case_dtype=dname, reduction=length if accumulated else None,
                     accumulation=_accumulation(t, o, length) if accumulated else None,
                     labels_eager_wrong=wrong[0] if wrong else None,
                     labels_onnx_wrong=wrong[1] if wrong else None)


def _within_rounding(truth: np.ndarray, side: np.ndarray, tol: Tolerance) -> bool:
    """Every element of `side` within its dtype's rounding bound of float64 (compared in
    that dtype: in float64 arrays the bound would be float64's)."""
    from parity_gate.compare import compare

    with np.errstate(all="ignore"):
        rounded = truth.astype(side.dtype)
    return compare(rounded, side, tol).verdict in (Verdict.PASS, Verdict.ROUNDING)


def _accumulation(truth: np.ndarray, side: np.ndarray, length: int | None) -> float:
    """The largest error of `side` against float64 in units of ACCUMULATION's bound for a
    `length` reduction (<= 1: within it; inf for a NaN or inf on one side only)."""
    if length is None:
        return math.inf
    t = np.asarray(truth, np.float64)
    with np.errstate(all="ignore"):
        s = np.asarray(side).astype(np.float64)
        err = np.abs(s - t)
        both = (np.isnan(s) & np.isnan(t)) | (s == t)
        err = np.where(both, 0.0, err)
        units = err / ACCUMULATION.bound(length, t)
    units = np.where(err == 0, 0.0, units)
    return float(np.nan_to_num(units, nan=math.inf).max(initial=0.0))


def _within_accumulation(truth: np.ndarray, side: np.ndarray, length: int) -> bool:
    return _accumulation(truth, side, length) <= 1.0


def _ratio(r: Reference) -> float:
    o, e = r.onnx_error or 0.0, r.eager_error or 0.0
    if e == 0:
        return math.inf if o > 0 else 0.0
    return o / e
