"""A run seen per module: the unit a reviewer fixes, annotates and reads a table row of.

Pure functions of the result model; markdown, HTML and annotations all read these
views so that "worst outcome", "worst error" and "needed tolerance" mean one thing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import PurePath

from parity_gate.model.comparison import Comparison
from parity_gate.model.gate import REGRESSION, GateDecision, Ruling
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ExportCause, ExportStage
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.upstream import UpstreamReport
from parity_gate.report.fmt import num, plural


def worst_first(cases: list[CaseResult]) -> list[CaseResult]:
    """Worst outcome first, then numeric case order (b2 before b10)."""
    return sorted(cases, key=lambda c: (-c.outcome.severity, c.key.sort_key))


@dataclass(frozen=True)
class Needed:
    """The tolerance a dtype's failing comparisons would have needed (the largest)."""

    dtype: str
    atol: float | None  # at the comparison's own rtol
    rtol_at: float
    rtol: float | None  # at the comparison's own atol
    atol_at: float


@dataclass
class ModuleView:
    name: str
    cases: list[CaseResult]
    rulings: dict[str, Ruling] = field(default_factory=dict)

    @cached_property
    def failing(self) -> list[CaseResult]:
        return worst_first([c for c in self.cases if c.failed])

    @property
    def worst(self) -> CaseResult | None:
        return self.failing[0] if self.failing else None

    @property
    def ran(self) -> int:
        return sum(1 for c in self.cases if c.outcome is not Outcome.SKIPPED)

    @property
    def outcome(self) -> Outcome:
        if self.worst is not None:
            return self.worst.outcome
        return Outcome.PASS if self.ran else Outcome.SKIPPED

    @property
    def counts(self) -> Counter[Outcome]:
        return Counter(c.outcome for c in self.cases)

    def failing_comparisons(self) -> list[tuple[CaseResult, Comparison]]:
        return [(c, cmp) for c in self.failing for cmp in c.comparisons if not cmp.passed]

    @property
    def worst_error(self) -> tuple[CaseResult, Comparison] | None:
        """The failing comparison with the largest absolute error (NaN counts as inf)."""
        found = [(c, cmp) for c, cmp in self.failing_comparisons() if cmp.max_abs is not None]
        return max(found, key=lambda p: _inf(p[1].max_abs)) if found else None

    @property
    def largest_passing_error(self) -> float | None:
        errors = [cmp.max_abs for c in self.cases if c.outcome is Outcome.PASS
                  for cmp in c.comparisons if cmp.max_abs is not None]
        return max(errors, key=_inf) if errors else None

    def needed(self) -> list[Needed]:
        """Per dtype, the largest atol (at the output's rtol) and rtol (at its atol) needed."""
        out: dict[str, Needed] = {}
        for case, cmp in self.failing_comparisons():
            if cmp.needed_atol is None and cmp.needed_rtol is None:
                continue
            dtype = case.key.dtype
            old = out.get(dtype)
            if old is None or _inf(cmp.needed_atol) > _inf(old.atol):
                atol, rtol_at = cmp.needed_atol, cmp.rtol
            else:
                atol, rtol_at = old.atol, old.rtol_at
            if old is None or _inf(cmp.needed_rtol) > _inf(old.rtol):
                rtol, atol_at = cmp.needed_rtol, cmp.atol
            else:
                rtol, atol_at = old.rtol, old.atol_at
            out[dtype] = Needed(dtype, atol, rtol_at, rtol, atol_at)
        return list(out.values())

    @property
    def diagnosis(self) -> str:
        """Why the worst case failed: its worst output's reason, else the case's own; for
        a passing module whose eager and ONNX outputs differ, what excused them."""
        case = self.worst
        if case is None:
            judged = [c for c in self.cases if c.judged_pass]
            return (f"{len(judged)} of {self.ran} cases differ from eager but pass the float64 "
                    f"check: {judged[0].reason}") if judged else ""
        bad = [c for c in case.comparisons if not c.passed]
        if bad and case.outcome in (Outcome.MISMATCH, Outcome.SHAPE_MISMATCH,
                                    Outcome.DTYPE_MISMATCH):
            worst = case.worst() or bad[0]
            return " — ".join([f"{worst.name}: {worst.reason}", *case.notes])
        return case.explanation or case.outcome.info.description

    def evidence(self) -> list[tuple[str, list[CaseResult]]]:
        """Distinct worker output (`detail`) of the failing cases, worst first, with the
        cases that share it: a crash or export error carries the same tail on every case."""
        groups: dict[str, list[CaseResult]] = {}
        for case in self.failing:
            if case.detail.strip():
                groups.setdefault(case.detail, []).append(case)
        return list(groups.items())

    def blocking(self, decision: GateDecision) -> list[CaseResult]:
        ids = set(decision.blocking) if not decision.passed else set()
        return [c for c in self.failing if c.id in ids]

    @property
    def cause(self) -> Cause | None:
        """What a reviewer reads first: the localised culprit of the first failing case that
        has one, else the worst case's own reason (None for a module that does not fail)."""
        worst = self.worst
        if worst is None:
            return None
        counted = (f"{len(self.failing)} of {plural(self.ran, 'case')} "
                   f"{'fails' if len(self.failing) == 1 else 'fail'}")
        located = next((c for c in self.failing if c.localisation is not None
                        and c.localisation.culprit is not None), None)
        if located is None or located.localisation is None:
            raised = next((c for c in self.failing if c.cause is not None and c.cause.where),
                          None)
            if raised is not None and raised.cause is not None:
                made = next((c.localisation.repro for c in self.failing
                             if c.localisation is not None and c.localisation.repro), "")
                return export_cause(self.name, worst.outcome, counted, raised.id, raised.cause,
                                    self.diagnosis,
                                    artifact_path(f"{made}/repro.py") if made else "")
            return Cause(self.name, worst.outcome, counted, worst.id,
                         reason=self.diagnosis or worst.outcome.info.description)
        loc = located.localisation
        culprit = loc.culprit
        assert culprit is not None
        owner = culprit.owner.value if culprit.owner is not None else "unknown"
        folder = loc.node_repro or loc.repro  # the culprit's nodes alone where they reproduce
        repro = f"{folder}/repro.py" if folder else ""
        return Cause(self.name, worst.outcome, counted, located.id,
                     reason=self.diagnosis, source=culprit.source, code=culprit.code,
                     op=culprit.aten or culprit.call,
                     onnx=", ".join(culprit.onnx_nodes[:4]), owner=owner,
                     owned_by=culprit.owned_by,
                     known=loc.known_op.finding if loc.known_op is not None else "",
                     repro=artifact_path(repro) if repro else "", fix=culprit.fix)


# Whose code an export failure is in, by the export step it stopped in (a stop in the
# model's own frame during capture is the model's: torch.export cannot trace that line).
_EXPORT_OWNERS = {ExportStage.CAPTURE: "model", ExportStage.DECOMPOSE: "capture",
                  ExportStage.TRANSLATE: "translation", ExportStage.TORCHSCRIPT: "capture"}


def export_cause(module: str, outcome: Outcome, counted: str, case: str, cause: ExportCause,
                 reason: str, repro: str = "") -> Cause:
    """An export failure as a cause: the user frame the exporter stopped in, the op it
    names (else the error's type), whose code that is, and the first workaround."""
    _, _, code = cause.where.partition(": ")
    source = cause.source or cause.where.partition(": ")[0]
    owner = "translation" if outcome is Outcome.UNSUPPORTED_OP else \
        _EXPORT_OWNERS.get(cause.stage, "unknown")
    return Cause(module, outcome, counted, case, reason=reason, source=source, code=code,
                 op=cause.op or cause.kind, owner=owner,
                 owned_by=f"the export stopped here, in {cause.stage.value}",
                 fix=cause.hints[0] if cause.hints else "", repro=repro)


@dataclass(frozen=True)
class Cause:
    """One failing module's cause as every report leads with it (culprit line, op, owner),
    or, where localisation found none, the worst case's reason."""

    module: str
    outcome: Outcome
    counted: str          # "2 of 2 cases fail"
    case: str             # the case the cause was found on
    reason: str = ""      # the worst case's diagnosis
    source: str = ""      # "models/pool.py:12", relative to the manifest's folder
    code: str = ""        # that source line
    op: str = ""          # the ATen overload, e.g. "aten.avg_pool2d.default"
    onnx: str = ""        # the ONNX nodes it became
    owner: str = ""       # model | capture | translation | kernel | unknown
    owned_by: str = ""    # the torchlib function or kernel, or why unknown
    known: str = ""       # the op sweep's known finding that names this op
    repro: str = ""       # the repro script, relative to the reports folder
    fix: str = ""         # what to change, in words

    @property
    def located(self) -> bool:
        return bool(self.op or self.source)


def short_diagnosis(view: ModuleView) -> str:
    """A table cell's diagnosis: a located failure's culprit in short (the cause line says
    it in full, with the fix; the raw error is kept for the case's own detail)."""
    cause = view.cause
    if cause is None or not cause.located or not cause.source:
        return view.diagnosis
    return f"{cause.op} at {cause.source} (owner: {cause.owner})"


def upstream_status(view: ModuleView, reports: list[UpstreamReport]) -> str:
    """What the upstream search said about this module's failure: the report covering one
    of its failing cases, else one about its culprit's op ("" when none was searched)."""
    ids = {c.id for c in view.failing}
    cause = view.cause
    op = cause.op if cause is not None else ""
    found = next((r for r in reports if ids & set(r.cases)), None) or next(
        (r for r in reports if op and r.op.overload == op), None)
    return found.status() if found is not None else ""


def artifact_path(path: str) -> str:
    """A repro path as a reviewer finds it in the uploaded reports: from the `artifacts`
    folder on (the runner's absolute path means nothing off the runner)."""
    parts = PurePath(path).parts
    if "artifacts" in parts:
        at = len(parts) - 1 - parts[::-1].index("artifacts")
        return str(PurePath(*parts[at:]))
    return str(PurePath(*parts[-3:])) if len(parts) > 3 else path


def module_views(run: RunResult) -> list[ModuleView]:
    """Failing modules worst first, then the others; by name within an outcome."""
    rulings = {r.id: r for r in run.gate.rulings} if run.gate is not None else {}
    by_module: dict[str, list[CaseResult]] = {}
    for case in sorted(run.cases, key=lambda c: c.key.sort_key):
        by_module.setdefault(case.key.module, []).append(case)
    views = [ModuleView(m, cases, {c.id: rulings[c.id] for c in cases if c.id in rulings})
             for m, cases in by_module.items()]
    return sorted(views, key=lambda v: (v.worst is None, -v.outcome.severity, v.name))


def tail_lines(text: str, lines: int = 30, chars: int = 4000) -> str:
    """The last `lines` lines (at most `chars` characters) of a worker's output."""
    kept = text.rstrip().splitlines()[-lines:]
    out = "\n".join(kept)
    return out[-chars:]


def _inf(x: float | None) -> float:
    if x is None:
        return -math.inf
    return math.inf if math.isnan(x) else x


def worst_error_text(view: ModuleView) -> str:
    """The worst failing error (abs, rel, ulp), else the largest error of a passing module."""
    found = view.worst_error
    if found is None:
        largest = view.largest_passing_error if view.worst is None else None
        return num(largest) if largest is not None else "—"
    _, c = found
    ulp = f" ({c.ulp} ulp)" if c.ulp is not None else ""
    return f"{num(c.max_abs)} abs, {num(c.max_rel)} rel{ulp}"


def needed_text(view: ModuleView) -> str:
    """Per dtype, the tolerance the failing comparisons would have needed."""
    parts = []
    for n in view.needed():
        atol = f"atol ≥ {num(n.atol)} (rtol {n.rtol_at:g})" if n.atol is not None else ""
        rtol = f"rtol ≥ {num(n.rtol)} (atol {n.atol_at:g})" if n.rtol is not None else ""
        parts.append(f"{n.dtype}: {' or '.join(p for p in (atol, rtol) if p)}")
    return "; ".join(parts) or "—"


def gate_text(view: ModuleView, decision: GateDecision) -> str:
    """What the baseline made of the module's failing cases, and whether they block."""
    if not view.failing:
        return "—"
    blocking = set(decision.blocking) if not decision.passed else set()
    cats = Counter(view.rulings[c.id].category if c.id in view.rulings else REGRESSION
                   for c in view.failing)
    words = [plural(n, "regression") if cat == REGRESSION else f"{n} {cat}"
             for cat, n in cats.items()]
    state = "blocking" if any(c.id in blocking for c in view.failing) else "not blocking"
    return f"{', '.join(words)} ({state})"
