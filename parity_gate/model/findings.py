"""Typed follow-up records a case or a module carries besides its outcome.

Each is filled by one stage and read by the reports; none is ever parsed back
out of a reason string, so rewording a message changes no behaviour.
"""

from __future__ import annotations

import enum
from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.hazards import Hazard
from parity_gate.model.outcomes import Outcome
from parity_gate.model.record import CONFIG, Real, Record
from parity_gate.model.upstream import Owner


@dataclass(frozen=True, config=CONFIG)
class Finding(Record):
    """A module-level observation that is not a case outcome (training mode, baked dims)."""

    module: str
    kind: str
    message: str
    severity: str = "warning"  # "warning" | "error"
    hazard: Hazard | None = None  # set when an export hazard rule found it


class Stage(str, enum.Enum):
    """What a worker was doing: crash and timeout attribution key on this, not on text."""

    STARTING = "starting"      # the worker process had not reported ready
    BUILDING = "building"      # importing and constructing the module
    CASTING = "casting"
    EAGER = "eager"            # computing the eager reference
    EXPORTING = "exporting"
    CHECKING = "checking"      # onnx.checker
    LOADING = "loading"        # creating the ORT session
    RUNNING = "running"        # ORT runs and comparison
    RECHECKING = "rechecking"  # follow-up runs (optimizations off, float64)

    def phrase(self, subject: str) -> str:
        return _PHRASES[self].format(subject or "").replace("  ", " ").strip()

    @property
    def library(self) -> str:
        """Whose code runs in this stage ("" where it could be several): a crash there is
        that library's to explain, and its report goes upstream to it."""
        return _LIBRARY.get(self, "")


_LIBRARY = {
    Stage.BUILDING: "the model's own code (its factory)",
    Stage.CASTING: "torch",
    Stage.EAGER: "the model's forward (eager torch)",
    Stage.EXPORTING: "the exporter (torch.onnx)",
    Stage.CHECKING: "onnx's checker",
    Stage.LOADING: "ONNX Runtime",
    Stage.RUNNING: "ONNX Runtime",
}


_PHRASES = {
    Stage.STARTING: "waiting for the worker to start",
    Stage.BUILDING: "building module {}",
    Stage.CASTING: "casting to {}",
    Stage.EAGER: "eager {}",
    Stage.EXPORTING: "exporting {}",
    Stage.CHECKING: "checking {} model",
    Stage.LOADING: "loading {} model",
    Stage.RUNNING: "running {}",
    Stage.RECHECKING: "re-running {}",
}


@dataclass(frozen=True, config=CONFIG)
class Step(Record):
    """The last thing a worker said it was doing; `subject` names the case or unit."""

    stage: Stage
    subject: str = ""
    detail: str = ""
    # What a crash in this step could be replayed from (files in the worker's folder):
    # `model`, `inputs` (an .npz of the case's feeds), `provider`, `optimization`.
    evidence: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return " ".join(p for p in (self.stage.phrase(self.subject), self.detail) if p)


@dataclass(frozen=True, config=CONFIG)
class CrashRepro(Record):
    """A crash in ONNX Runtime replayed outside the gate, so it can go upstream.

    `folder` holds the model, the case's inputs where the crash was in a run, and a
    `repro.py` that loads (and runs) it like the gate did; each graph optimization level
    is tried in a fresh process: `levels` maps a level to `ok`, the signal it died of, or
    how else it ended (`exit 1`: an error, not a crash; `timeout`).
    """

    folder: str
    reproduces: bool
    signal: str = ""
    levels: dict[str, str] = field(default_factory=dict)
    error: str = ""  # why no repro could be made or run

    def describe(self) -> str:
        if self.error:
            return f"no crash repro: {self.error}"
        if not self.reproduces:
            return (f"the crash did not reproduce outside the gate ({self.folder}/repro.py at "
                    f"the gate's optimization level: {self.signal}): not presented as a repro")
        crashing = [lvl for lvl, how in self.levels.items() if how.startswith("SIG")]
        fine = [lvl for lvl, how in self.levels.items() if how == "ok"]
        text = f"reproduced by {self.folder}/repro.py ({self.signal})"
        if crashing and fine:
            text += (f"; crashes only at ONNX Runtime optimization level "
                     f"{', '.join(crashing)} (fine at {', '.join(fine)}): a graph "
                     "optimization (fusion) pass crashes on this model")
        elif crashing:
            text += "; crashes at every optimization level: the kernel itself"
        return text


@dataclass(frozen=True, config=CONFIG)
class Lost(Record):
    """Set by the pool on a case its worker never reported (crash or timeout)."""

    step: Step
    signal: str | None = None  # e.g. "SIGKILL"
    exit_code: int | None = None

    @property
    def never_started(self) -> bool:
        return self.step.stage is Stage.STARTING


@dataclass(frozen=True, config=CONFIG)
class Rerun(Record):
    """The same case re-run with ONNX Runtime's graph optimizations at `level`."""

    level: str = "disabled"
    outcome: Outcome | None = None  # None: the re-run itself failed (see error)
    max_abs: Real | None = None
    error: str | None = None

    @property
    def vanishes(self) -> bool:
        return self.outcome is Outcome.PASS

    def describe(self) -> str:
        if self.error:
            return f"re-run with ORT optimizations {self.level} failed: {self.error}"
        if self.vanishes:
            return (f"passes with ORT graph optimizations {self.level}: an ONNX Runtime "
                    "fusion/rewrite is the likely cause")
        return f"persists with ORT graph optimizations {self.level} (not a fusion)"


@dataclass(frozen=True, config=CONFIG)
class ByDefinition(Record):
    """The case's graph run as ONNX defines it (`oracle`: ONNX's reference evaluator, or the
    op's definition where that is not one), judged against eager and ONNX Runtime: the
    owner rule (compare.owner) reads whose code the difference is. A graph that computes
    eager's answer by definition is a faithful translation, so the kernel departs."""

    oracle: str
    with_eager: bool | None = None  # None: the oracle could not run (see error)
    with_ort: bool | None = None
    owner: Owner | None = None
    error: str | None = None
    undefined: str | None = None  # a node ONNX leaves undefined on these values

    def describe(self) -> str:
        if self.undefined:
            return (f"the graph reaches {self.undefined}: the translation relies on what "
                    "ONNX leaves undefined")
        if self.error and self.owner is Owner.TRANSLATION:
            return f"{self.oracle} raises on the graph too ({self.error}): the graph is wrong"
        if self.error:
            return f"{self.oracle} cannot run the graph: {self.error}"
        if self.owner is Owner.KERNEL and self.with_ort is None:
            values = "eager's answer" if self.with_eager else "values other than eager's"
            return (f"{self.oracle} runs the graph (to {values}): ONNX Runtime's kernel "
                    "raises on a graph ONNX defines")
        if self.owner is Owner.KERNEL:
            return (f"the graph computes eager's answer by {self.oracle}: ONNX Runtime's "
                    "kernel departs from the ONNX definition")
        if self.owner is Owner.TRANSLATION:
            return f"the graph computes ONNX Runtime's answer by {self.oracle}: the graph is wrong"
        return f"{self.oracle} sides with neither side as a whole"


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
        """True when the mismatch is not an exporter finding: a tolerance artefact, or
        eager itself off the reference while the exported model matches it (an eager
        finding, listed as such; eager's approximations differ between CPUs)."""
        return self in (RecheckVerdict.ILL_CONDITIONED, RecheckVerdict.EAGER_OFF)


_EXPLAIN = {
    RecheckVerdict.CONFIRMED: "eager matches the {ref} reference; the exported model does not",
    RecheckVerdict.EAGER_OFF: "the exported model is closer to the {ref} reference than eager "
                              "(eager quirk, not an exporter bug)",
    RecheckVerdict.ILL_CONDITIONED: "both sides are as close to the {ref} reference as each "
                                    "other: ill-conditioned input, tolerance artefact",
    RecheckVerdict.BOTH_OFF: "both sides differ from the {ref} reference",
    RecheckVerdict.UNVERIFIED: "no independent reference for this op and dtype",
}


class RecheckReference(str, enum.Enum):
    """What a re-check judged both sides against."""

    EXACT = "exact"      # exact integer / rational arithmetic or mpmath, rounded to the dtype
    FLOAT64 = "float64"  # the same call on float64 inputs, rounded to the output's dtype
    NONE = "none"

    @property
    def words(self) -> str:
        return {"exact": "exact (integer, rational or mpmath)", "float64": "float64",
                "none": "no"}[self.value]


@dataclass(frozen=True, config=CONFIG)
class Recheck(Record):
    """Both sides of a mismatch judged against a higher-precision truth."""

    verdict: RecheckVerdict
    closer: str  # "eager" | "onnx" | "neither" | "n/a"
    eager_error: Real | None = None  # needed atol of eager vs truth (inf: non-finite)
    onnx_error: Real | None = None
    unoptimized: Rerun | None = None  # the ORT optimizations-off re-run, when tried
    note: str = ""
    definition: ByDefinition | None = None  # the graph by ONNX's definition, when tried
    reference: RecheckReference = RecheckReference.FLOAT64

    def describe(self) -> str:
        text = (f"{self.verdict.value}: "
                f"{self.verdict.explanation.format(ref=self.reference.words)}")
        if self.unoptimized is not None and self.unoptimized.vanishes:
            text += "; the difference vanishes with ORT graph optimizations off (fusion)"
        if self.definition is not None and self.definition.owner is not None:
            text += f"; {self.definition.describe()}"
        if self.note:
            text += f"; {self.note}"
        return text


@dataclass(frozen=True, config=CONFIG)
class LowPrecision(Record):
    """The graph (optimizer off) computes an op in lower precision than eager asked for."""

    nodes: list[str]
    hidden_by_provider: str | None = None  # values matched there, hiding the wrong graph

    def describe(self) -> str:
        return f"dtype handling (graph, optimizer off): {self.nodes[0]}" if self.nodes else ""


@dataclass(frozen=True, config=CONFIG)
class Example(Record):
    """The worst element of a failing op case, with the inputs at the same index."""

    output: str
    index: list[int]
    eager: str
    onnx: str
    inputs: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        inputs = ", ".join(f"{k}={v}" for k, v in self.inputs.items())
        where = f"[{','.join(map(str, self.index))}]"
        head = f"{inputs} → " if inputs else f"{self.output}{where}: "
        return f"{head}eager {self.eager} vs onnx {self.onnx}"


@dataclass(frozen=True, config=CONFIG)
class EagerQuirk(Record):
    """Eager gives different values for the same inputs in another memory layout.

    Vectorised CPU kernels take another code path for strided or short
    tensors (gelu(inf) is inf on the scalar path and nan in AVX-512 lanes), so
    such a value depends on the machine and the tensor size: the exported
    model matching either eager answer is not an exporter finding.
    """

    output: str
    count: int  # elements whose eager value depends on the layout
    index: list[int]
    contiguous: str  # eager's value there, inputs contiguous
    strided: str  # the same inputs as strided views (the scalar path)
    inputs: dict[str, str] = field(default_factory=dict)
    onnx: str = ""

    def describe(self) -> str:
        inputs = ", ".join(f"{k}={v}" for k, v in self.inputs.items())
        where = f"{self.output}[{','.join(map(str, self.index))}]"
        return (f"eager depends on the memory layout at {self.count} element(s): "
                f"{inputs + ' → ' if inputs else where + ': '}{self.contiguous} contiguous, "
                f"{self.strided} strided" + (f", onnx {self.onnx}" if self.onnx else ""))


class FindingClass(str, enum.Enum):
    """Whose problem a failing (or dismissed) op case is; the findings table's sections."""

    EXPORTER = "exporter_defect"     # the exported graph computes something else
    RUNTIME = "runtime_gap"          # a valid graph the provider has no kernel for, or
    #                                  one it computes otherwise than ONNX defines
    UNSUPPORTED = "unsupported_op"   # no translation: a feature request
    EAGER = "eager_quirk"            # eager itself: layout-dependent values, crashes, wrong
    ILL_CONDITIONED = "ill_conditioned"  # a tolerance artefact, dismissed (the case passes)

    @property
    def words(self) -> str:
        return {"exporter_defect": "exporter defect", "runtime_gap": "runtime gap",
                "unsupported_op": "unsupported op", "eager_quirk": "eager quirk",
                "ill_conditioned": "ill-conditioned"}[self.value]


@dataclass(config=CONFIG)
class OpCase(Record):
    """What an op-sweep case is: the variant, the call, the op the user called, its ATen ops.

    `user_op` names the op as a user calls it (`torch.isfinite`, `Tensor.masked_fill`);
    findings group by it. `op` is the ATen overload beside it: the one the exported
    graph translated for this case (else the one eager dispatched), e.g.
    `aten.ones_like.default` for an integer `torch.isfinite`.
    """

    variant: str
    family: str
    call: str
    op: str  # the ATen overload of user_op (exported graph, else eager dispatch)
    aten_ops: list[str] = field(default_factory=list)  # exported graph's; else eager's
    not_applicable: bool = False
    example: Example | None = None
    low_precision: LowPrecision | None = None
    user_op: str = ""
    eager_quirk: EagerQuirk | None = None
    finding_class: FindingClass | None = None  # set on failing and dismissed cases
    # ONNX Runtime raised while running the graph: the graph run as ONNX defines it says
    # whose code the error is (the kernel's where it computes eager's answer).
    raised: ByDefinition | None = None

