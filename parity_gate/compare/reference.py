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
from parity_gate.model.precision import CLEARLY_WORSE, Reference, Ruling

__all__ = ["OutputRules", "judge_against_float64", "labels_wrong"]

_ORDER = {Ruling.ONNX_EXACT: 0, Ruling.ONNX_ROUNDING: 1, Ruling.AS_EAGER: 2, Ruling.ONNX_WORSE: 3}

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
    excused by distance to float64); `discrete` may be shorter than the outputs."""

    names: Sequence[str]
    tolerances: Sequence[Tolerance]
    classify: Sequence[bool]
    discrete: Sequence[bool] = ()


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
    else:
        ruling = Ruling.ONNX_WORSE
    wrong: tuple[int, int] | None = None
    if rules.classify[m]:
        wrong = labels_wrong(e, t, dname), labels_wrong(o, t, dname)
        if wrong[1] > max(CLEARLY_WORSE * wrong[0], wrong[0] + 1):
            ruling = Ruling.ONNX_WORSE
    return Reference(ruling, output=name, eager_error=e_err, onnx_error=o_err,
                     case_dtype=dname,
                     labels_eager_wrong=wrong[0] if wrong else None,
                     labels_onnx_wrong=wrong[1] if wrong else None)


def _within_rounding(truth: np.ndarray, side: np.ndarray, tol: Tolerance) -> bool:
    """Every element of `side` within its dtype's rounding bound of float64 (compared in
    that dtype: in float64 arrays the bound would be float64's)."""
    from parity_gate.compare import compare

    with np.errstate(all="ignore"):
        rounded = truth.astype(side.dtype)
    return compare(rounded, side, tol).verdict in (Verdict.PASS, Verdict.ROUNDING)


def _ratio(r: Reference) -> float:
    o, e = r.onnx_error or 0.0, r.eager_error or 0.0
    if e == 0:
        return math.inf if o > 0 else 0.0
    return o / e
