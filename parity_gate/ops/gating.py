"""The sweep's gate: a new finding fails it; known ones (baseline, catalogue xfail) do not.

Reuses the project's baseline file and gate (parity_gate.gate.baseline, .gate)
keyed on case ids. A catalogue `xfail` is a known finding too: it becomes a
glob entry of the same baseline, so one rule decides both and a fixed xfail
shows up as `fixed` exactly like a fixed baseline entry.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from parity_gate.compare.decide import rounding_level
from parity_gate.gate import baseline as bl
from parity_gate.gate.decision import decide, finish, worsened
from parity_gate.model.gate import KNOWN, REGRESSION, Figures, GateDecision, Ruling
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.ops.findings import effect
from parity_gate.ops.records import OpVariant, variant_case_id

# The known findings of the pinned torch/onnxscript/onnxruntime, shipped with the tool.
BUNDLED = Path(__file__).with_name("known-findings.yml")


def xfail_entries(variants: dict[str, OpVariant]) -> list[bl.Entry]:
    entries: list[bl.Entry] = []
    for v in variants.values():
        for e in v.expectations:
            if e.kind != "xfail":
                continue
            for dtype in e.dtypes or ("*",):
                for cls in e.input_classes or ("*",):
                    entries.append(bl.Entry(f"{variant_case_id(v.id)}/{dtype}/{cls}/*",
                                            f"xfail: {e.reason}", e.link))
    return entries


def load_baseline(path: Path | None, variants: dict[str, OpVariant]) -> bl.Baseline | None:
    """The file's entries, then the catalogue's xfails (an exact file entry wins)."""
    loaded = bl.load(path) if path is not None else None
    extra = tuple(xfail_entries(variants))
    if loaded is None and not extra:
        return None
    base = loaded or bl.Baseline("catalogue xfails")
    return replace(base, entries=(*base.entries, *extra))


# How far above its dtype's rounding level (compare.decide.rounding_level) a relative
# error must be before its growth counts: below it, figures move with the machine
# (vector width, summation order), not with the exporter.
ABOVE_ROUNDING = 1.0


def significant(case: CaseResult, above: float = ABOVE_ROUNDING) -> Figures:
    """The case's figures, with max_abs/max_rel dropped where they are rounding noise.

    The rule in one place: a known finding regresses by a new outcome class, or by
    error figures that grew *and* stand far above the output dtype's rounding
    level; `max_rel 1.5e-14 → 1.1e-13` on a float64 NaN-type failure is noise.
    """
    figures = Figures.of(case)
    worst = case.worst()
    if worst is None or figures.max_rel is None:
        return figures
    if figures.max_rel <= above * rounding_level(worst.dtype_ref):
        return Figures(None, None, figures.mismatch_fraction)
    return figures


def gate(run: RunResult, baseline: bl.Baseline | None, fail_on: str | None = None,
         strict: bool = False, universe: set[str] | None = None) -> GateDecision:
    """The one call that decides the exit code of `parity-gate ops`.

    The project's decision (gate.decision), with figure growth judged by
    `significant`. `universe`: the whole catalogue's case ids (see
    planner.case_ids); default the run's.
    """
    decision = decide(run, fail_on, baseline=baseline, strict=strict,
                      universe=universe if universe is not None else {c.id for c in run.cases})
    if baseline is None:
        return decision
    cases = {c.id: c for c in run.cases}
    rulings = [_rerule(r, cases[r.id], baseline, decision.worsen_factor)
               for r in decision.rulings]
    return finish(run, rulings, decision.stale, decision.fail_on, strict, decision.baseline,
                  decision.worsen_factor)


def _rerule(ruling: Ruling, case: CaseResult, baseline: bl.Baseline, factor: float) -> Ruling:
    """A regression of a known finding stays one only if it is one on significant figures."""
    entry = baseline.entry_for(case.id)
    if ruling.category != REGRESSION or entry is None:
        return ruling
    if worsened(entry, case.outcome, significant(case), factor):
        return ruling
    return replace(ruling, category=KNOWN,
                   why=f"known failure within its record (figure growth at the rounding level "
                       f"of {_dtype(case)} ignored): {entry.reason}")


def _dtype(case: CaseResult) -> str:
    worst = case.worst()
    return worst.dtype_ref if worst is not None else case.key.dtype


def updated_baseline(path: Path, run: RunResult,
                     variants: dict[str, OpVariant]) -> tuple[str, list[bl.Change]]:
    """The refreshed file text: old entries kept (reasons and links), new findings added.

    New findings are written as one glob per (variant, dtype) when every case
    there fails the same way, so the file lists findings rather than cases.
    The generated file keeps every finding's figures; where a catalogue
    `.xfail(reason, link)` covers a case, its entry carries that human reason
    and link (the catalogue is where they are reviewed).
    """
    xfails = bl.Baseline("xfails", tuple(xfail_entries(variants)))
    mine = RunResult(cases=list(run.cases), versions=run.versions)
    old = bl.load(path) if path.is_file() else bl.Baseline(str(path))
    new, changes = bl.update(old, mine, _reason(run))
    added = {c.id for c in changes if c.action == "added"}
    ids = [c.id for c in run.cases]
    kept = [_human(e, xfails, ids) for e in new.entries if e.id not in added]
    fresh = [_human(e, xfails, ids)
             for e in _compact([c for c in mine.cases if c.id in added], mine)]
    changes = [c for c in changes if c.action != "added"] + [
        bl.Change("added", e.id, e.reason) for e in fresh]
    return bl.dump(replace(new, entries=(*kept, *fresh))), changes


def _human(entry: bl.Entry, xfails: bl.Baseline, ids: list[str]) -> bl.Entry:
    """The entry with the reason and link of the catalogue xfail that covers it, if any."""
    probe = next((i for i in ids if entry.matches(i)), entry.id)
    xfail = xfails.entry_for(probe)
    if xfail is None:
        return entry
    return replace(entry, reason=xfail.reason, link=xfail.link or entry.link)


def _reason(run: RunResult) -> str:
    v = run.versions
    return ("found by parity-gate ops on " + ", ".join(
        f"{k} {v[k]}" for k in ("torch", "onnxscript", "onnxruntime") if k in v))


def _compact(added: list[CaseResult], run: RunResult) -> list[bl.Entry]:
    """Globs where a whole variant, or a variant on one dtype, fails alike; else case ids."""
    groups: dict[str, list[CaseResult]] = {}
    for case in run.cases:
        if case.outcome is not Outcome.SKIPPED:
            groups.setdefault(case.key.module, []).append(case)
            groups.setdefault(f"{case.key.module}/{case.key.dtype}", []).append(case)
    entries: list[bl.Entry] = []
    done: set[str] = set()
    for case in added:
        if case.id in done:
            continue
        for prefix in (case.key.module, f"{case.key.module}/{case.key.dtype}", None):
            ran = groups.get(prefix, []) if prefix else [case]
            if prefix is None or (len(ran) > 1 and all(c.outcome is case.outcome for c in ran)):
                entries.append(bl.record(bl.Entry(f"{prefix}/*" if prefix else case.id,
                                                  _why(case, run)), ran))
                done |= {c.id for c in ran}
                break
    return entries


def _why(case: CaseResult, run: RunResult) -> str:
    return f"{effect(case, 160)} ({_reason(run)})"
