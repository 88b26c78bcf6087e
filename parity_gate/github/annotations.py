"""A run's records → annotations (one per failing module, worst first, on the module's
manifest line, and one on its culprit's source line when the workspace has that file) and
outputs."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from parity_gate.github.commands import ANNOTATION_LIMIT, MESSAGE_LIMIT, Annotation

if TYPE_CHECKING:  # the entrypoint imports this module before the gate's dependencies exist
    from parity_gate.github.paths import Paths
    from parity_gate.model.results import CaseResult, RunResult
    from parity_gate.report.modules import ModuleView

__all__ = ["OUTPUTS", "annotate", "failing_cases", "module_lines", "outputs"]

NOTICES = ("cache",)  # finding kinds about the run, not the model
OUTPUTS = ("result", "regressions", "failures", "json_path", "junit_path", "summary_path",
           "out_dir")


def failing_cases(run: RunResult) -> list[CaseResult]:
    return run.failures


def module_lines(manifest_text: str) -> dict[str, int]:
    """Line of each module's entry in the manifest (`report.locate`, shared with JUnit)."""
    from parity_gate.report.locate import module_lines as lines_of

    return lines_of(manifest_text)


def _module_annotation(view: ModuleView, level: str, rulings: Mapping[str, str],
                       file: str | None, lines: Mapping[str, int]) -> Annotation:
    """One annotation for a failing module: its worst case in full, the others counted."""
    worst = view.failing[0]
    head = worst.explanation or worst.outcome.info.description
    # The reason already quotes its worst output; list only the outputs it does not name.
    bad = [line for c in worst.comparisons if not c.passed
           if (line := f"{c.name}: {c.reason}") not in head]
    parts = [head, *bad[:3]]
    if len(bad) > 3:
        parts.append(f"… and {len(bad) - 3} more failing outputs")
    if worst.id in rulings:
        parts.append(f"baseline: {rulings[worst.id]}")
    others = view.failing[1:]
    if others:
        listed = ", ".join(f"{c.key.junit_name} ({c.outcome.value})" for c in others[:5])
        parts.append(f"also failing: {listed}" + (" …" if len(others) > 5 else ""))
    more = f" (+{len(others)} more case{'s' if len(others) != 1 else ''})" if others else ""
    tail = "" if level == "error" else " (not blocking)"
    return Annotation(level, f"parity-gate: {worst.id} {worst.outcome.value}{more}{tail}",
                      "\n".join(p for p in parts if p)[:MESSAGE_LIMIT],
                      file, lines.get(view.name))


def culprit_location(source: str, manifest_file: str | None,
                     workspace: Path | None) -> tuple[str, int] | None:
    """Where a culprit's `file:line` (relative to the manifest's folder) lies in the
    workspace, as an annotation names it; None when it is not a file of the workspace (an
    installed package, a path outside it), since GitHub can show it on no diff."""
    path, _, line = source.rpartition(":")
    if not path or not line.isdigit() or manifest_file is None:
        return None
    rel = posixpath.normpath(posixpath.join(posixpath.dirname(manifest_file),
                                            PurePath(path).as_posix()))
    if posixpath.isabs(rel) or rel == ".." or rel.startswith("../"):
        return None
    if workspace is not None and not (workspace / rel).is_file():
        return None
    return rel, int(line)


def _culprit_annotation(view: ModuleView, level: str, manifest_file: str | None,
                        workspace: Path | None) -> Annotation | None:
    """The failing module's culprit on its own source line, where the diff shows it."""
    cause = view.cause
    if cause is None or not cause.located or workspace is None:  # no file to show it on
        return None
    where = culprit_location(cause.source, manifest_file, workspace)
    if where is None:
        return None
    by = f" ({cause.owned_by})" if cause.owned_by else ""
    message = (f"{cause.counted} ({cause.outcome.value}); localised on {cause.case} to "
               f"{cause.op}; owner: {cause.owner}{by}"
               + (f"; known exporter defect {cause.known}" if cause.known else "")
               + (f"\nfix: {cause.fix}" if cause.fix else "")
               + (f"\nrepro: {cause.repro}" if cause.repro else ""))
    tail = "" if level == "error" else " (not blocking)"
    return Annotation(level, f"parity-gate: {view.name}: culprit {cause.op}{tail}",
                      message[:MESSAGE_LIMIT], where[0], where[1])


def annotate(run: RunResult, *, manifest_file: str | None = None,
             manifest_lines: Mapping[str, int] | None = None,
             limit: int = ANNOTATION_LIMIT, workspace: Path | None = None) -> list[Annotation]:
    """One annotation per failing module (and one on its culprit's source line when that
    file is in `workspace`), then findings, worst first, at most `limit`.

    A module with a case that blocks the merge is an error; a module whose failures do
    not block (known under the baseline, or `fail_on: never`) is a warning. Past the
    limit, the last slot says how many were left out.
    """
    from parity_gate.report.modules import module_views

    verdict = run.verdict
    gate = run.gate
    blocking = set(gate.blocking) if gate is not None else {c.id for c in run.failures}
    rulings = ({r.id: r.why for r in gate.rulings}
               if gate is not None and gate.baseline else {})  # without one, every failure is new
    lines = manifest_lines or {}
    ranked: list[tuple[tuple[bool, int, int, str], Annotation]] = []
    for view in module_views(run):
        if view.worst is None:
            continue
        blocks = verdict.blocks and any(c.id in blocking for c in view.failing)
        # The worst *blocking* case leads an error annotation, the worst case otherwise.
        if blocks:
            view.failing.sort(key=lambda c: c.id not in blocking)
        level = "error" if blocks else "warning"
        rank = (level != "error", 0, -view.failing[0].outcome.severity, view.name)
        ranked.append((rank, _module_annotation(view, level, rulings, manifest_file, lines)))
        culprit = _culprit_annotation(view, level, manifest_file, workspace)
        if culprit is not None:
            ranked.append(((*rank[:3], view.name + "\0culprit"), culprit))
    for f in run.findings:
        # a note about the run itself (the export cache missed) is a notice: the diff of a
        # pull request that changes a model would otherwise carry a warning per module
        level = "error" if f.severity == "error" else "notice" if f.kind in NOTICES \
            else "warning"
        ranked.append(((level != "error", 1, 0, f.module),
                       Annotation(level, f"parity-gate: {f.module} {f.kind}",
                                  f.message[:MESSAGE_LIMIT], manifest_file,
                                  lines.get(f.module))))
    # One annotation per performance rule broken, naming the nodes (fallback, memcpy).
    for flag in gate.performance if gate is not None else []:
        module = flag.id.split("/", 1)[0]
        level = "error" if flag.blocks and verdict.blocks else "warning"
        ranked.append(((level != "error", 2, 0, flag.id),
                       Annotation(level, f"parity-gate: {flag.id} {flag.rule}",
                                  flag.message[:MESSAGE_LIMIT], manifest_file,
                                  lines.get(module))))
    ranked.sort(key=lambda r: r[0])
    items = [a for _, a in ranked]
    if len(items) <= limit:
        return items
    shown = items[: limit - 1]
    return [*shown, Annotation(
        "warning", "parity-gate: more results not annotated",
        f"{len(items) - len(shown)} more failing modules or findings were omitted (GitHub "
        f"shows at most {ANNOTATION_LIMIT} annotations per step); see the step summary, "
        "report.html or the JSON report.")]


def outputs(result: str, run: RunResult | None, paths: Paths) -> dict[str, str]:
    files = {"json_path": paths.json, "junit_path": paths.junit, "summary_path": paths.summary}
    blocking = (run.gate.blocking if run is not None and run.gate is not None
                else [c.id for c in run.failures] if run is not None else [])
    return {
        "result": result,
        "regressions": str(len(blocking)) if run is not None else "",
        "failures": str(len(run.failures)) if run is not None else "",
        **{name: str(p) if p.is_file() else "" for name, p in files.items()},
        "out_dir": str(paths.out_dir),
    }
