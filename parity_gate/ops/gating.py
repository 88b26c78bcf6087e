"""The sweep's gate: a new finding fails it; known ones (baseline, catalogue xfail) do not.

Reuses the project's baseline file and gate (parity_gate.gate.baseline, .gate)
keyed on case ids. A catalogue `xfail` is a known finding too: it becomes a
glob entry of the same baseline, so one rule decides both and a fixed xfail
shows up as `fixed` exactly like a fixed baseline entry.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from parity_gate.gate import baseline as bl
from parity_gate.gate.decision import decide
from parity_gate.model.gate import GateDecision
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.ops.findings import effect
from parity_gate.ops.jobs import source_of
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


def gate(run: RunResult, baseline: bl.Baseline | None, fail_on: str | None = None,
         strict: bool = False, universe: set[str] | None = None) -> GateDecision:
    """The one call that decides the exit code of `parity-gate ops`.

    The project's decision (gate.decision, where figure growth at the rounding
    level is ignored for both gates). `universe`: the whole catalogue's case ids (see
    planner.case_ids); default the run's.
    """
    return decide(run, fail_on, baseline=baseline, strict=strict,
                  universe=universe if universe is not None else {c.id for c in run.cases})


def updated_baseline(path: Path, run: RunResult, variants: dict[str, OpVariant],
                     sources: tuple[str, ...] | None = None) -> tuple[str, list[bl.Change]]:
    """The refreshed file text: old entries kept (reasons and links), new findings added.

    New findings are written as one glob per (variant, dtype) when every case
    there fails the same way, so the file lists findings rather than cases.
    The generated file keeps every finding's figures; where a catalogue
    `.xfail(reason, link)` covers a case, its entry carries that human reason
    and link (the catalogue is where they are reviewed). Entries of a source
    outside `sources` (default: every source) are carried over untouched and in
    place: this run cannot tell whether they still fail, as gating ignores them.
    """
    xfails = bl.Baseline("xfails", tuple(xfail_entries(variants)))
    mine = RunResult(cases=list(run.cases), versions=run.versions)
    whole = bl.load(path) if path.is_file() else bl.Baseline(str(path))

    def swept(entry: bl.Entry) -> bool:
        return sources is None or source_of(entry.id) in sources

    old = replace(whole, entries=tuple(e for e in whole.entries if swept(e)))
    new, changes = bl.update(old, mine, _reason(run))
    added = {c.id for c in changes if c.action == "added"}
    ids = bl.CaseIds(c.id for c in run.cases)
    kept = {e.id: _human(e, xfails, ids) for e in new.entries if e.id not in added}
    in_place = [kept[e.id] if swept(e) else e for e in whole.entries
                if not swept(e) or e.id in kept]
    fresh = [_human(e, xfails, ids)
             for e in _compact([c for c in mine.cases if c.id in added], mine, ids)]
    changes = [c for c in changes if c.action != "added"] + [
        bl.Change("added", e.id, e.reason) for e in fresh]
    return bl.dump(replace(new, entries=(*in_place, *fresh))), changes


def _human(entry: bl.Entry, xfails: bl.Baseline, ids: bl.CaseIds) -> bl.Entry:
    """The entry with the reason and link of the catalogue xfail that covers it, if any."""
    probe = ids.first_match(entry) or entry.id
    xfail = xfails.entry_for(probe)
    if xfail is None:
        return entry
    return replace(entry, reason=xfail.reason, link=xfail.link or entry.link)


def _reason(run: RunResult) -> str:
    v = run.versions
    return ("found by parity-gate ops on " + ", ".join(
        f"{k} {v[k]}" for k in ("torch", "onnxscript", "onnxruntime") if k in v))


def _compact(added: list[CaseResult], run: RunResult, ids: bl.CaseIds) -> list[bl.Entry]:
    """Globs where a whole group of the run's cases (`ids`) fails alike, broadest first
    (every sample of an OpInfo, then on one dtype; a variant, then on one dtype); else case
    ids. A glob is written only if the run's cases it matches are exactly that group."""
    by_id = {c.id: c for c in run.cases}
    entries: list[bl.Entry] = []
    done: set[str] = set()
    for case in added:
        if case.id in done:
            continue
        for glob in (*scopes(case), None):
            if glob is None:
                entries.append(bl.record(bl.Entry(case.id, _why(case, run)), [case]))
                done.add(case.id)
                break
            ran = [by_id[i] for i in ids.every_match(bl.Entry(glob, ""))
                   if by_id[i].outcome is not Outcome.SKIPPED]
            if len(ran) > 1 and all(c.outcome is case.outcome for c in ran):
                entries.append(bl.record(bl.Entry(glob, _why(case, run)), ran))
                done |= {c.id for c in ran}
                break
    return entries


def scopes(case: CaseResult) -> list[str]:
    """The globs that could own a failing case, broadest first. An OpInfo's samples are
    `oi.<name>.<n>`: `oi.<name>.[0-9]*` names them all (checked against the run's ids)."""
    module, dtype = case.key.module, case.key.dtype
    found = [f"{module}/*", f"{module}/{dtype}/*"]
    head, _, number = module.rpartition(".")
    if module.startswith(variant_case_id("oi.")) and number.isdigit():
        found = [f"{head}.[0-9]*/*", f"{head}.[0-9]*/{dtype}/*", *found]
    return found


def _why(case: CaseResult, run: RunResult) -> str:
    return f"{effect(case, 160)} ({_reason(run)})"
