"""Evidence that tells a real defect from a false alarm, per case.

A float16 eager run is not the truth, an exporter's optimizer is not ONNX
Runtime, and a wrapped exception is not its cause: each record below is filled
by one worker step and read by the reports. Nothing is parsed back out of a
reason string.
"""

from __future__ import annotations

import enum
import re
from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.findings import Rerun
from parity_gate.model.record import CONFIG, Real, Record

# Unit roundoff, and the depth factor (in units of it) below which an error is still
# rounding: fewer mantissa bits -> fewer operations fit before an error becomes visible,
# so narrower types get smaller factors (matches the field's starting tolerances: fp32
# ~1e-4, fp16 ~1e-2, bf16 ~2e-2..5e-2 relative).
ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}
ROUNDING_DEPTH = {"float16": 32.0, "bfloat16": 16.0, "float32": 2048.0, "float64": 65536.0}


def rounding_level(dname: str) -> float:
    """The relative error the comparison still calls rounding for `dname` (0 for
    non-floats); the gates ignore a known failure's figure growth below it."""
    return ROUNDING_DEPTH.get(dname, 0.0) * ROUNDOFF.get(dname, 0.0)


# ONNX is "clearly worse" than eager when it is this many times further from float64: two
# bits of precision lost beyond eager's own rounding. Below that the ratio is noise (one
# MobileNetV2 in float16 measured 2.0x at batch 1 and 0.6x at batch 4, same weights);
# a real low-precision defect (an op run in float16 that eager runs in float32, a wrong
# op) is 8x and more.
CLEARLY_WORSE = 4.0


class Ruling(str, enum.Enum):
    """What a float64 run of the same weights and inputs says about a low-precision mismatch."""

    ONNX_WORSE = "onnx_worse"    # the exported model is clearly further from float64: a defect
    ONNX_EXACT = "onnx_exact"    # the exported model matches float64 within tolerance
    ONNX_ROUNDING = "onnx_rounding"  # within the dtype's rounding of float64: a correct kernel
    AS_EAGER = "as_eager"        # both are about as far from float64: the reference is the noise
    # float16 on a GPU provider: eager is closer, and ONNX within a float16 accumulator's
    # error for its longest reduction (compare.reference.ACCUMULATION): not a defect
    ONNX_ACCUMULATION = "onnx_accumulation"
    UNVERIFIED = "unverified"    # no float64 run (it failed, or its outputs do not line up)
    # float64 computes another function: an intermediate overflows (or is NaN) in one run only
    OUT_OF_RANGE = "out_of_range"
    DISCRETE = "discrete"        # a rounded/compared/index output differs: never excused
    TIE = "tie"                  # ... within one rounding of a boundary, and ties are allowed

    @property
    def defect(self) -> bool:
        """False when the mismatch is the low-precision reference's own error."""
        return self in (Ruling.ONNX_WORSE, Ruling.UNVERIFIED, Ruling.OUT_OF_RANGE,
                        Ruling.DISCRETE)


@dataclass(frozen=True, config=CONFIG)
class Reference(Record):
    """Eager and ONNX outputs of a float16/bfloat16 case, each against float64.

    Errors are the smallest atol (at the case's rtol) each side needs against
    the float64 outputs rounded to the case's dtype; `output` is the output the
    ruling rests on (the largest onnx/eager ratio). For classification outputs,
    `labels_*` count the samples whose top-1 differs from float64's.
    """

    ruling: Ruling
    dtype: str = "float64"
    output: str = ""
    eager_error: Real | None = None
    onnx_error: Real | None = None
    factor: Real = CLEARLY_WORSE
    labels_eager_wrong: int | None = None
    labels_onnx_wrong: int | None = None
    error: str = ""  # why the run is unverified, out of range, or what a discrete output shows
    case_dtype: str = ""  # the case's dtype, whose rounding ONNX_ROUNDING refers to
    # The longest reduction (K) the output depends on, where the provider may accumulate it
    # in the case's dtype; `accumulation`: ONNX's largest error against float64 in units of
    # that accumulator's bound (<= 1: within it). None where the rule did not apply.
    reduction: int | None = None
    accumulation: Real | None = None
    # Set when the ruling excuses the mismatch but the tolerance is the manifest's own (a
    # contract): the atol the case needs at the manifest's rtol, and the manifest's atol.
    needed_atol: Real | None = None
    manifest_atol: Real | None = None
    manifest_rtol: Real | None = None

    @property
    def unattainable(self) -> bool:
        """The manifest's tolerance is tighter than any correct implementation meets."""
        return self.manifest_atol is not None and not self.ruling.defect

    @property
    def dtype_rounding(self) -> str:
        return self.case_dtype or "the dtype's"

    def describe(self) -> str:
        if self.ruling is Ruling.UNVERIFIED:
            return f"no {self.dtype} reference: {self.error}" if self.error else \
                f"no {self.dtype} reference"
        if self.ruling in (Ruling.OUT_OF_RANGE, Ruling.DISCRETE, Ruling.TIE):
            return self.error
        figures = (f"against {self.dtype}, {self.output}: onnx needs atol>="
                   f"{_num(self.onnx_error)}, eager {_num(self.eager_error)}")
        if self.reduction is not None and self.ruling is Ruling.ONNX_WORSE:
            figures += (f"; {_num(self.accumulation)}x the {self.dtype_rounding} accumulation "
                        f"bound for its K={self.reduction} reduction")
        if self.labels_onnx_wrong is not None:
            figures += (f"; top-1 differs from {self.dtype} in {self.labels_onnx_wrong} "
                        f"sample(s) on onnx, {self.labels_eager_wrong} on eager")
        verdict = {
            Ruling.ONNX_WORSE: f"onnx is clearly worse than eager (more than {self.factor:g}x): "
                               "a defect",
            Ruling.ONNX_EXACT: "onnx matches float64 within tolerance: the eager low-precision "
                               "reference is the less accurate side",
            Ruling.ONNX_ROUNDING: f"onnx is within {self.dtype_rounding} rounding of float64 at "
                                  "this output's scale, as any correct implementation may be: "
                                  "not a defect",
            Ruling.AS_EAGER: f"onnx is within {self.factor:g}x of eager's own error: the "
                             "difference is rounding noise on both sides, not a defect",
            Ruling.ONNX_ACCUMULATION: f"eager is closer to {self.dtype}, but onnx is within "
                                      f"{self.dtype_rounding} accumulation error for its "
                                      f"K={self.reduction} reduction ({_num(self.accumulation)}"
                                      " of the bound): an accumulator in the narrow type, as "
                                      "the provider's kernels may use, not a defect",
        }[self.ruling]
        if self.ruling is Ruling.AS_EAGER and (self.onnx_error or 0.0) < (self.eager_error or 0.0):
            verdict = ("onnx is closer to float64 than eager: the eager reference is the less "
                       "accurate side, not a defect")
        if self.unattainable:
            return (f"unattainable by any correct implementation in {self.case_dtype}: "
                    f"{self.output} needs atol>={_num(self.needed_atol)} at rtol "
                    f"{_num(self.manifest_rtol)}, the manifest sets atol "
                    f"{_num(self.manifest_atol)} ({figures} — {verdict})")
        return f"{figures} — {verdict}"


@dataclass(frozen=True, config=CONFIG)
class Reexport(Rerun):
    """The same case exported again with the exporter's own graph optimizer off.

    `optimize: false` skips onnxscript's rewrites and constant folding (BatchNorm
    folded into a convolution's weights, for instance), which ORT's own
    optimization level (`Rerun`) does not undo; `onnx_error` is this graph's
    error against float64 when the case has a float64 reference.
    """

    level: str = "exporter optimizer off"
    onnx_error: Real | None = None

    def describe(self) -> str:
        if self.error:
            return f"re-export with optimize: false failed: {self.error}"
        tail = (f" (against float64 it needs atol>={_num(self.onnx_error)})"
                if self.onnx_error is not None else "")
        if self.vanishes:
            return ("passes when exported with optimize: false: the exporter's graph "
                    f"optimizer (onnxscript rewrites, constant folding) is the likely cause{tail}")
        return f"persists when exported with optimize: false (not the exporter's optimizer){tail}"


class ExportStage(str, enum.Enum):
    """Which step of `torch.onnx.export` an export failure came from."""

    CAPTURE = "torch.export"          # capturing the program (step 1/3 of the dynamo path)
    DECOMPOSE = "decomposition"       # decomposing the FX graph (step 2/3)
    TRANSLATE = "onnx translation"    # translating to ONNX (step 3/3)
    TORCHSCRIPT = "torchscript"       # the legacy exporter
    UNKNOWN = "export"


@dataclass(frozen=True, config=CONFIG)
class ExportCause(Record):
    """The root of an export failure's exception chain and what the user can try.

    Reports group cases by `kind` + `message` (identical causes, one line);
    `hints` are workarounds from a fixed table (parity_gate.engine.exporting).
    """

    kind: str                # the root exception's class, e.g. "ValueError"
    message: str             # its first meaningful line
    stage: ExportStage = ExportStage.UNKNOWN
    op: str = ""             # the FX node's target when the exporter names it (aten.view.default)
    where: str = ""          # the model's source line it came from: "modeling_t5.py:368: <code>"
    hints: list[str] = field(default_factory=list)
    source: str = ""         # that line's `path:line`, relative to the manifest's folder

    @property
    def key(self) -> str:
        """What identical causes share: symbolic sizes (s43, u0) do not tell them apart."""
        return re.sub(r"\b([su])\d+\b", r"\1#", f"{self.kind}: {self.message}")

    def describe(self) -> str:
        at = f" at {self.where}" if self.where else ""
        tried = f"; try {' or '.join(self.hints)}" if self.hints else ""
        return f"export failed in {self.stage.value}: {self.kind}: {self.message}{at}{tried}"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"
