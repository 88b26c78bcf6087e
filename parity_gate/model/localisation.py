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
from parity_gate.model.upstream import Owner

# ONNX Runtime's graph optimization levels, lowest first: the optimizer check and crash
# repros try each (engine.runtime maps the names to ORT's enum).
LEVELS = ("disabled", "basic", "extended", "all")


class Check(str, enum.Enum):
    """The follow-up checks, cheapest first (the order they run in)."""

    OPTIMIZER = "optimizer"      # which ORT graph-optimization level the mismatch appears at
    PROVIDER = "provider"        # does the CPU provider agree with eager?
    CAPTURE = "capture"          # does the torch.export program already differ from eager?
    CONDITIONING = "conditioning"  # both sides against a float64 run: defect or artefact?
    LAYER = "layer"              # the blame rule: the owning module call and its culprit node
    OP = "op"                    # a known exporter defect at the culprit
    OWNER = "owner"              # the culprit's ONNX nodes in ONNX's reference evaluator and ORT
    REPRO = "repro"              # model, inputs, outputs and a standalone script


EXPENSIVE = (Check.LAYER, Check.OP, Check.OWNER, Check.REPRO)


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
    """The module call that owns the divergence by the blame rule: its inputs within
    tolerance, an output out of it, and no child call that satisfies the same."""

    module: str
    kind: str
    path: list[str]                       # from the top-level module down to `module`
    onnx_ops: list[str]                   # ONNX node types inside it
    aten_ops: list[str]                   # ATen overloads inside it
    source: str = ""                      # a source line of the module's forward, when known


@dataclass(frozen=True, config=CONFIG)
class Culprit(Record):
    """The node that owns a divergence by the blame rule: its inputs agree with eager's
    and its output does not, in the scope whose inputs agree and outputs do not."""

    scope: str                   # the owning module call: "blocks.6", "fc (call 2 of 2)", "(root)"
    kind: str                    # that module's class
    aten: str                    # the ATen overload, e.g. "aten.scatter_reduce.two"
    call: str                    # with its literal arguments (tensors as %name)
    source: str = ""             # "models.py:27" where the exported program says it came from
    code: str = ""               # that source line
    onnx_nodes: list[str] = field(default_factory=list)  # the ONNX nodes it became (op types)
    owner: Owner | None = None   # set by the owner check; None with `owned_by`: unknown, why
    owned_by: str = ""           # the torchlib function, or the op type and provider, or why not
    reference: str = ""          # what ONNX's reference evaluator did ("" when not asked)
    # the optional arguments the call sets (name → "float32 tensor" or the literal): the
    # trigger beyond the op itself, e.g. {"attn_mask": "float32 tensor"}
    options: dict[str, str] = field(default_factory=dict)
    fix: str = ""  # what to change, as an engineer would say it ("" where none is known)

    def describe(self) -> str:
        """The culprit line, first in every report."""
        where = f" at {self.source}" if self.source else ""
        onnx = f" → ONNX {', '.join(self.onnx_nodes[:6])}" if self.onnx_nodes else ""
        owner = (f"; owner: {self.owner.value}" if self.owner is not None
                 else "; owner unknown" if self.owned_by else "")
        by = f" ({self.owned_by})" if self.owned_by else ""
        return f"culprit: {self.scope}: {self.call}{where}{onnx}{owner}{by}"


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
    layer: DivergentLayer | None = None    # the owning module call (None: the root's code)
    culprit: Culprit | None = None
    curve: list[LayerError] = field(default_factory=list)
    known_op: KnownOp | None = None
    repro: str | None = None               # the artifacts folder of this case
    node_repro: str | None = None          # the culprit's nodes alone; only one that reproduces

    def step(self, check: Check) -> StepRun | None:
        return next((s for s in self.steps if s.check is check), None)

    def summary(self) -> list[str]:
        """The findings in words, most actionable first (the op, then the layer...)."""
        out: list[str] = []
        if self.culprit is not None:
            out.append(self.culprit.describe())
            if self.culprit.fix:
                out.append(f"fix: {self.culprit.fix}")
        if self.known_op is not None:
            where = self.culprit.scope if self.culprit is not None else (
                self.layer.module if self.layer is not None else "")
            out.append(f"{where}: {self.known_op.aten} is a known exporter defect "
                       f"({self.known_op.finding})")
        if self.layer is not None and self.culprit is None:
            out.append(f"first divergent layer: {self.layer.module} ({self.layer.kind}; "
                       f"ONNX {', '.join(self.layer.onnx_ops[:8]) or '-'})")
        if self.capture_owns and (self.culprit is None or self.culprit.owner is None):
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
