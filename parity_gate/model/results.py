"""The result model every later stage reads: case → comparison → outcome → run.

Reports, the gate, shard merging and GitHub integration are functions of a
`RunResult` (or of its JSON form, `results.json`, validated by the shipped
`results.schema.json`) and never re-run anything.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import field
from typing import Any, Literal

from pydantic import ValidationError, computed_field
from pydantic.dataclasses import dataclass

from parity_gate.errors import UserError
from parity_gate.model.bisect import Bisection
from parity_gate.model.comparison import Comparison
from parity_gate.model.findings import CrashRepro, Finding, Lost, OpCase, Recheck, Rerun
from parity_gate.model.gate import GateDecision
from parity_gate.model.generation import Generation
from parity_gate.model.keys import CaseKey
from parity_gate.model.localisation import Localisation
from parity_gate.model.outcomes import Outcome
from parity_gate.model.performance import Performance
from parity_gate.model.precision import ExportCause, Reexport, Reference
from parity_gate.model.quantized import QuantizedResult
from parity_gate.model.record import CONFIG, Record, adapter
from parity_gate.model.task import TaskResult
from parity_gate.model.upstream import UpstreamReport

SCHEMA_VERSION: Literal[2] = 2


@dataclass(frozen=True, config=CONFIG)
class Provenance(Record):
    """What actually ran for a case: the graph's opset and IR version, the export options."""

    exporter: str = ""
    opset: int | None = None
    ir_version: int | None = None
    export_options: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    reference_device: str = "cpu"
    # The ONNX translation came from the export cache (keyed by the digest of the program
    # torch.export captured in this very run); everything else was computed in this run.
    export_cached: bool = False


@dataclass(frozen=True, config=CONFIG)
class CheckRun(Record):
    """One per-case follow-up check the worker ran on a case (engine.followups' table):
    which, whether it ran to the end, and what it cost."""

    check: str
    status: Literal["ran", "failed"] = "ran"
    seconds: float = 0.0
    note: str = ""  # how it failed


# How the planner words a skip for a provider this machine lacks (plan.providers): only an
# optional one reaches the reports, since a required one stops the run before it starts.
ABSENT_PROVIDER = "ExecutionProvider not available (onnxruntime offers: "


def absent_provider(case: CaseResult) -> bool:
    """Skipped because an optional provider is not on this machine."""
    return case.outcome is Outcome.SKIPPED and ABSENT_PROVIDER in case.reason


@dataclass(config=CONFIG)
class CaseResult(Record):
    """What happened to one case, with the evidence a reviewer needs."""

    key: CaseKey
    outcome: Outcome
    reason: str = ""
    detail: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=Provenance)
    samples: int = 0
    rerun: Rerun | None = None       # the mismatch re-run with ORT optimizations off
    recheck: Recheck | None = None   # both sides against a higher-precision truth
    lost: Lost | None = None         # set by the pool: the worker never reported this case
    op: OpCase | None = None         # op-sweep cases only
    localisation: Localisation | None = None  # follow-up checks on a failing case
    reference: Reference | None = None  # float16/bfloat16: both sides against float64
    reexport: Reexport | None = None    # the mismatch exported again with optimize: false
    cause: ExportCause | None = None    # export failures: the root of the exception chain
    crash: CrashRepro | None = None     # a crash in ONNX Runtime, replayed in a repro folder
    performance: Performance | None = None  # latency vs eager, placement, memory
    generation: Generation | None = None  # generation cases: N greedy steps, step by step
    checks: list[CheckRun] = field(default_factory=list)  # follow-up checks run, in order
    probe: str = ""  # `shapes: auto`: the probe's sizes and the assumption it tests
    task: TaskResult | None = None  # task-metric cases: the paired metric on the slice
    quantized: QuantizedResult | None = None  # quantized cases: steps, SQNR, the bad node

    @computed_field  # type: ignore[prop-decorator]
    @property
    def id(self) -> str:
        return self.key.id

    @property
    def failed(self) -> bool:
        return self.outcome.failed

    @property
    def notes(self) -> list[str]:
        """Follow-up findings in words, after the reason (shown, never parsed back); the
        localisation's first, since it names the layer and the op to blame."""
        loc = self.localisation.summary() if self.localisation is not None else []
        if self.reference is not None and self.reference.unattainable and self.outcome.failed:
            loc = [self.reference.describe(), *loc]  # the tolerance, not the export, is off
        out = loc[:2]
        if self.rerun is not None and not (self.localisation and self.localisation.levels):
            out.append(self.rerun.describe())  # the optimizer-level check supersedes it
        if self.reexport is not None:
            out.append(self.reexport.describe())
        if self.reference is not None and self.outcome.failed \
                and not self.reference.unattainable:
            out.append(self.reference.describe())
        if self.crash is not None:
            out.append(self.crash.describe())
        if self.recheck is not None and self.outcome.failed:
            out.append(f"re-check: {self.recheck.describe()}")
        if self.op is not None and self.op.low_precision is not None and self.outcome.failed:
            out.append(self.op.low_precision.describe())
        out += loc[2:]
        if self.probe and self.probe not in self.reason:  # a passing probe says what it tried
            out.insert(0, f"probe {self.probe}")
        return out

    @property
    def judged_pass(self) -> bool:
        """Passed because a float64 run excused its eager-vs-ONNX difference (the two
        sides differ; reports show it apart from a plain match)."""
        return self.outcome is Outcome.PASS and self.reference is not None \
            and not self.reference.ruling.defect

    @property
    def explanation(self) -> str:
        """The reason with its notes: the one line a failure message shows."""
        return " — ".join([self.reason, *self.notes]) if self.notes else self.reason

    def worst(self) -> Comparison | None:
        """The comparison that failed worst (or the largest error if all passed)."""
        if not self.comparisons:
            return None
        failing = [c for c in self.comparisons if not c.passed]
        pool = failing or self.comparisons
        return max(pool, key=lambda c: _finite_or_inf(c.max_abs))


@dataclass(frozen=True, config=CONFIG)
class RunVerdict(Record):
    """The one answer: does this run block the merge, and why (counts beside it).

    Only "pass" does not block: an interrupted run never passes, whatever its finished
    cases say, and neither does one in which no case ran (unless the user allowed it)."""

    blocks: bool
    result: str  # "pass" | "fail" | "interrupted"
    why: str
    by_outcome: dict[str, int]
    by_ruling: dict[str, int]
    finished: int = 0  # cases with a result (skipped ones included)
    planned: int | None = None  # cases the run meant to finish


@dataclass(config=CONFIG)
class RunResult(Record):
    """All cases of one run, the environment they ran in, and the gate's decision."""

    cases: list[CaseResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    tool_version: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    interrupted: bool = False
    shard: str | None = None
    planned: int | None = None  # cases the run meant to finish (None: as many as it has)
    gate: GateDecision | None = None
    upstream: list[UpstreamReport] = field(default_factory=list)  # per op, `parity-gate upstream`
    bisect: list[Bisection] = field(default_factory=list)  # `parity-gate bisect`: per cause

    def skip_reasons(self) -> dict[str, int]:
        return skip_reasons(self.cases)

    def counts(self) -> dict[str, int]:
        c = Counter(r.outcome.value for r in self.cases)
        return {o.value: c[o.value] for o in Outcome if c.get(o.value)}

    @property
    def failures(self) -> list[CaseResult]:
        return sorted((r for r in self.cases if r.failed),
                      key=lambda r: (-r.outcome.severity, r.id))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def schema_version(self) -> Literal[2]:
        """Bumped on any change a reader of the older form would misread."""
        return SCHEMA_VERSION

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> RunVerdict:
        gate = self.gate or GateDecision(blocking=[c.id for c in self.failures])
        failing = len(self.failures)
        finished, planned = sum(not c.probe for c in self.cases), self.planned
        if self.interrupted:
            result, why = "interrupted", (f"interrupted: {finished} of "
                                          f"{planned if planned is not None else '?'} planned "
                                          "cases finished; the others never ran")
        elif not gate.passed:
            result = "fail"
            reasons = []
            if gate.blocking:
                reasons.append(f"{len(gate.blocking)} blocking case(s) (fail-on {gate.fail_on})")
            if gate.hazards:
                reasons.append(f"export hazards the manifest makes failing: "
                               f"{', '.join(gate.hazards)}")
            if gate.slow:
                reasons.append(f"{len(gate.slow)} performance rule(s) broken: "
                               + ", ".join(f"{f.id} ({f.rule})" for f in gate.slow[:5]))
            if gate.unreported:
                reasons.append(f"{gate.unreported} of {planned} planned cases have no outcome "
                               "(the run was not interrupted)")
            why = "; ".join(reasons) or (f"no case ran ({finished} skipped): nothing was "
                                         "checked (--allow-all-skipped accepts that)")
        else:
            result = "pass"
            why = (f"{failing} failing case(s) do not block (fail-on {gate.fail_on})"
                   if failing else "every case that ran matches eager"
                   if not gate.all_skipped else
                   f"no case ran ({finished} skipped), allowed by "
                   + ("--allow-all-skipped" if gate.allow_all_skipped else "fail-on never"))
        return RunVerdict(blocks=result != "pass", result=result, why=why,
                          by_outcome=self.counts(),
                          by_ruling=gate.counts() if self.gate is not None else {},
                          finished=finished, planned=planned)

    def to_dict(self) -> dict[str, Any]:
        # Cases in key order (numeric batch sizes) whatever order they finished in.
        ordered = dataclasses.replace(self, cases=sorted(self.cases, key=lambda r: r.key.sort_key))
        body = adapter(RunResult).dump_python(ordered, mode="json")
        # The answer first, for people who open the file.
        return {"schema_version": body.pop("schema_version"), "verdict": body.pop("verdict"),
                **body}

    @classmethod
    def from_dict(cls, data: Any, source: str = "results") -> RunResult:
        """Validate a results document; an older or foreign file is a clear user error."""
        if not isinstance(data, dict):
            raise UserError(f"{source}: expected a parity-gate results object, "
                            f"got {type(data).__name__}")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise UserError(f"{source}: schema_version {version!r} is not supported (expected "
                            f"{SCHEMA_VERSION}; re-run the gate with this version to "
                            "regenerate the file)")
        try:
            return super().from_dict(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UserError(f"{source}: {where}: {first['msg']}") from None


def skip_reasons(cases: list[CaseResult]) -> dict[str, int]:
    """How many cases were skipped for each distinct reason, in first-seen order."""
    return dict(Counter(c.reason for c in cases if c.outcome is Outcome.SKIPPED))


def _finite_or_inf(x: float | None) -> float:
    if x is None or math.isnan(x):
        return math.inf
    return x
