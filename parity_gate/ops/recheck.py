"""Re-check a mismatch before believing it: which side is closer to the truth?

False alarm 2 (tolerance artefacts): an ill-conditioned op amplifies the last
bits of its inputs, so eager and the exported model can disagree while both
are as right as the dtype allows. The truth here is the same op run in
float64, or exactly (ops/exact.py: integers exactly, floats in mpmath); each
side is compared against it with the case's own tolerance and signed-zero
policy. "confirmed" means the reference agrees with eager and not with ONNX.
Pure maths: arrays in, a verdict out, `compare()` doing every number; the
verdict's record (`Recheck`) lives in the result model.
"""

from __future__ import annotations

import math

import numpy as np

from parity_gate import compare as cmp
from parity_gate.model.findings import Recheck, RecheckReference, RecheckVerdict

# How much further one side must be from the truth to be called the wrong one.
FACTOR = 10.0


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or a.dtype.name == "bfloat16"


def _rounded(truth: np.ndarray, like: np.ndarray) -> np.ndarray:
    """The float64 result rounded to the output's dtype: what a correct op returns.

    Comparing with the unrounded value would call a float32 overflow to inf
    wrong; rounding first keeps only the errors the op itself makes.
    """
    if not _is_float(truth):
        return truth
    if _is_float(like):
        with np.errstate(over="ignore"):
            truth = truth.astype(like.dtype)
    return truth.astype(np.float64)


def _as_truth_dtype(a: np.ndarray, truth: np.ndarray) -> np.ndarray:
    if truth.dtype.kind == "f":
        return np.asarray(a).astype(np.float64)
    return np.asarray(a).astype(truth.dtype)


def _error(c: cmp.Comparison) -> float:
    if c.passed:
        return 0.0
    return math.inf if c.needed_atol is None else float(c.needed_atol)


def recheck(eager: list[np.ndarray], onnx: list[np.ndarray], truth: list[np.ndarray] | None,
            tolerances: list[cmp.Tolerance], outputs: list[int], *,
            signed_zeros: bool = False,
            reference: RecheckReference = RecheckReference.FLOAT64) -> Recheck:
    """Judge each side of the failing `outputs` against the truth with the same tolerance.

    `signed_zeros`: the case's own signed-zero policy applies to the truth too, so
    a -0/+0 difference is judged the same way in every dtype.
    """
    if truth is None or len(truth) != len(eager):
        return Recheck(RecheckVerdict.UNVERIFIED, "n/a", reference=RecheckReference.NONE)
    e_err = o_err = 0.0
    e_ok = o_ok = True
    for m in outputs:
        ref = _rounded(np.asarray(truth[m]), eager[m])
        if ref.shape != eager[m].shape or ref.shape != onnx[m].shape:
            return Recheck(RecheckVerdict.UNVERIFIED, "n/a",
                           reference=RecheckReference.NONE,
                           note="shapes differ from the reference")
        ce = cmp.compare(ref, _as_truth_dtype(eager[m], ref), tolerances[m], name=f"o{m}",
                         strict_signed_zeros=signed_zeros)
        co = cmp.compare(ref, _as_truth_dtype(onnx[m], ref), tolerances[m], name=f"o{m}",
                         strict_signed_zeros=signed_zeros)
        e_ok &= ce.passed
        o_ok &= co.passed
        e_err = max(e_err, _error(ce))
        o_err = max(o_err, _error(co))
    return Recheck(*_decide(e_ok, o_ok, e_err, o_err), eager_error=e_err, onnx_error=o_err,
                   reference=reference)


def _decide(e_ok: bool, o_ok: bool, e_err: float,
            o_err: float) -> tuple[RecheckVerdict, str]:
    if e_ok and o_ok:
        return RecheckVerdict.ILL_CONDITIONED, "neither"
    if e_ok:
        return RecheckVerdict.CONFIRMED, "eager"
    if o_ok:
        return RecheckVerdict.EAGER_OFF, "onnx"
    # Neither side matches the truth: never "confirmed" (that needs eager to match it).
    if math.isinf(e_err) and math.isinf(o_err):
        return RecheckVerdict.BOTH_OFF, "neither"
    if o_err > FACTOR * e_err:
        return RecheckVerdict.BOTH_OFF, "eager"
    if e_err > FACTOR * o_err:
        return RecheckVerdict.EAGER_OFF, "onnx"
    return RecheckVerdict.ILL_CONDITIONED, "neither"
