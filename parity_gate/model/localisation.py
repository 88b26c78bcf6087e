"""What the follow-up checks on a failing case found: where, why, and a repro.

One record per failing case (`CaseResult.localisation`); each check is a step
record that says whether it ran, was skipped (and why) or failed on its own,
so a check that breaks never hides the case's verdict.
"""

from __future__ import annotations

import enum
from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Real, Record


class Check(str, enum.Enum):
    """The follow-up checks, cheapest first (the order they run in)."""

    OPTIMIZER = "optimizer"      # which ORT graph-optimization level the mismatch appears at
    PROVIDER = "provider"        # does the CPU provider agree with eager?
    CAPTURE = "capture"          # does the torch.export program already differ from eager?
    CONDITIONING = "conditioning"  # both sides against a float64 run: defect or artefact?
    LAYER = "layer"              # first module whose output leaves tolerance
    OP = "op"                    # a known exporter defect inside that layer
    REPRO = "repro"              # model, inputs, outputs and a standalone script


EXPENSIVE = (Check.LAYER, Check.OP, Check.REPRO)


class Status(str, enum.Enum):
    RAN = "ran"
    SKIPPED = "skipped"
    FAILED = "failed"    # the check itself broke; its message says how
    TIMEOUT = "timeout"


@dataclass(frozen=True, config=CONFIG)
class StepRun(Record):
    check: Check
    status: Status
    seconds: float = 0.0
    note: str = ""  # why skipped / how it failed / what it found, in words


@dataclass(frozen=True, config=CONFIG)
class LayerError(Record):
    """One point of the per-layer error curve: a module's output against the reference."""

    module: str          # qualified name, e.g. "blocks.6"
    kind: str            # the module's class
    max_abs: Real | None
    needed_atol: Real | None
    passed: bool


@dataclass(frozen=True, config=CONFIG)
class DivergentLayer(Record):
    """The first module (execution order) whose output leaves tolerance, inputs within it."""

    module: str
    kind: str
    path: list[str]                       # from the top-level module down to `module`
    onnx_ops: list[str]                   # ONNX node types inside it
    aten_ops: list[str]                   # ATen overloads inside it
    source: str = ""                      # a source line of the module's forward, when known


@dataclass(frozen=True, config=CONFIG)
class KnownOp(Record):
    """An op in the divergent layer that the op sweep's known findings list as wrong."""

    aten: str          # e.g. "aten.scatter_reduce.two"
    call: str          # the op sweep variant's call
    finding: str       # the known finding's case id, e.g. "op/scatter_reduce.mean.noself/..."
    reason: str        # the finding's recorded reason

    def describe(self, layer: str, versions: str) -> str:
        return (f"{layer}: `{self.aten}` ({self.call}) is a known exporter defect in "
                f"{versions} ({self.finding})")


@dataclass(config=CONFIG)
class Localisation(Record):
    """The answers of the follow-up checks on one failing case."""

    steps: list[StepRun] = field(default_factory=list)
    first_level: str | None = None         # disabled|basic|extended|all; None: never passes
    levels: dict[str, bool] = field(default_factory=dict)  # level -> passed
    provider_specific: bool | None = None  # True: fails on its provider, passes on CPU
    capture_owns: bool | None = None       # True: torch.export already differs from eager
    capture_max_abs: Real | None = None
    eager_error: Real | None = None        # eager vs float64 (needed atol)
    onnx_error: Real | None = None         # ORT vs float64 (needed atol)
    artefact: bool | None = None           # True: ORT is as close to float64 as eager is
    layer: DivergentLayer | None = None
    curve: list[LayerError] = field(default_factory=list)
    known_op: KnownOp | None = None
    repro: str | None = None               # the artifacts folder of this case

    def step(self, check: Check) -> StepRun | None:
        return next((s for s in self.steps if s.check is check), None)

    def summary(self) -> list[str]:
        """The findings in words, most actionable first (the op, then the layer...)."""
        out: list[str] = []
        if self.known_op is not None and self.layer is not None:
            out.append(f"{self.layer.module}: {self.known_op.aten} is a known exporter defect "
                       f"({self.known_op.finding})")
        if self.layer is not None:
            out.append(f"first divergent layer: {self.layer.module} ({self.layer.kind}; "
                       f"ONNX {', '.join(self.layer.onnx_ops[:8]) or '-'})")
        if self.capture_owns:
            out.append("the torch.export program already differs from eager: the capture "
                       "owns it, not the ONNX translation")
        if self.provider_specific:
            out.append("provider-specific: the CPU provider matches eager")
        if self.first_level is not None and self.first_level != "disabled":
            out.append(f"appears only with ORT graph optimizations at '{self.first_level}' "
                       "or above: an ONNX Runtime fusion/rewrite is the likely cause")
        if self.artefact is True:
            out.append("tolerance artefact: ONNX Runtime is as close to a float64 run as "
                       "eager is (ill-conditioned computation)")
        elif self.artefact is False:
            out.append("real defect: eager is much closer to a float64 run than ONNX Runtime")
        if self.levels and not any(self.levels.values()):
            out.append("fails at every ORT optimization level: the graph itself differs")
        return out
