"""Re-check a mismatch before believing it: which side is closer to the truth?

False alarm 2 (tolerance artefacts): an ill-conditioned op amplifies the last
bits of its inputs, so eager and the exported model can disagree while both
are as right as the dtype allows. The truth here is the same op run in
float64 (or an exact reference); each side is compared against it with the
case's own tolerance. Pure maths: arrays in, a verdict out, `compare()` doing
every number.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity_gate import compare as cmp

# How much further one side must be from the truth to be called the wrong one.
FACTOR = 10.0


class RecheckVerdict(str, enum.Enum):
    CONFIRMED = "confirmed"              # eager is (much) closer to the truth: the export is wrong
    EAGER_OFF = "eager_off"              # the exported model is (much) closer: an eager quirk
    ILL_CONDITIONED = "ill_conditioned"  # both comparably close/far: a tolerance artefact
    BOTH_OFF = "both_off"                # both sides give non-finite values the truth does not
    UNVERIFIED = "unverified"            # no independent reference for this case

    @property
    def explanation(self) -> str:
        return _EXPLAIN[self]

    @property
    def dismisses(self) -> bool:
        """True when the mismatch is explained away (not a finding)."""
        return self is RecheckVerdict.ILL_CONDITIONED


_EXPLAIN = {
    RecheckVerdict.CONFIRMED: "eager matches the float64 reference; the exported model does not",
    RecheckVerdict.EAGER_OFF: "the exported model is closer to the float64 reference than eager "
                              "(eager quirk, not an exporter bug)",
    RecheckVerdict.ILL_CONDITIONED: "both sides are as close to the float64 reference as each "
                                    "other: ill-conditioned input, tolerance artefact",
    RecheckVerdict.BOTH_OFF: "both sides differ from the float64 reference in non-finite values",
    RecheckVerdict.UNVERIFIED: "no independent reference (float64 or integer-only inputs)",
}


@dataclass(frozen=True)
class Recheck:
    verdict: RecheckVerdict
    closer: str  # "eager" | "onnx" | "neither" | "n/a"
    eager_error: float | None = None  # needed atol of eager vs truth (inf: non-finite)
    onnx_error: float | None = None
    ort_unoptimized: str | None = None  # "vanishes" | "persists" | None (not tried)
    note: str = ""

    def describe(self) -> str:
        text = f"{self.verdict.value}: {self.verdict.explanation}"
        if self.ort_unoptimized == "vanishes":
            text += "; the difference vanishes with ORT graph optimizations off (fusion)"
        if self.note:
            text += f"; {self.note}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "closer": self.closer,
            "eager_error": _enc(self.eager_error),
            "onnx_error": _enc(self.onnx_error),
            "ort_unoptimized": self.ort_unoptimized,
            "conclusion": self.describe(),
        }


def _enc(x: float | None) -> Any:
    if x is None:
        return None
    return "inf" if math.isinf(x) else float(x)


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
            tolerances: list[cmp.Tolerance], outputs: list[int]) -> Recheck:
    """Judge each side of the failing `outputs` against the truth with the same tolerance."""
    if truth is None or len(truth) != len(eager):
        return Recheck(RecheckVerdict.UNVERIFIED, "n/a")
    e_err = o_err = 0.0
    e_ok = o_ok = True
    for m in outputs:
        ref = _rounded(np.asarray(truth[m]), eager[m])
        if ref.shape != eager[m].shape or ref.shape != onnx[m].shape:
            return Recheck(RecheckVerdict.UNVERIFIED, "n/a",
                           note="shapes differ from the reference")
        ce = cmp.compare(ref, _as_truth_dtype(eager[m], ref), tolerances[m], name=f"o{m}")
        co = cmp.compare(ref, _as_truth_dtype(onnx[m], ref), tolerances[m], name=f"o{m}")
        e_ok &= ce.passed
        o_ok &= co.passed
        e_err = max(e_err, _error(ce))
        o_err = max(o_err, _error(co))
    return Recheck(*_decide(e_ok, o_ok, e_err, o_err), eager_error=e_err, onnx_error=o_err)


def _decide(e_ok: bool, o_ok: bool, e_err: float,
            o_err: float) -> tuple[RecheckVerdict, str]:
    if e_ok and o_ok:
        return RecheckVerdict.ILL_CONDITIONED, "neither"
    if e_ok:
        return RecheckVerdict.CONFIRMED, "eager"
    if o_ok:
        return RecheckVerdict.EAGER_OFF, "onnx"
    if math.isinf(e_err) and math.isinf(o_err):
        return RecheckVerdict.BOTH_OFF, "neither"
    if o_err > FACTOR * e_err:
        return RecheckVerdict.CONFIRMED, "eager"
    if e_err > FACTOR * o_err:
        return RecheckVerdict.EAGER_OFF, "onnx"
    return RecheckVerdict.ILL_CONDITIONED, "neither"
