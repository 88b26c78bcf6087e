"""A run's records → annotations (worst first, on the module's manifest line) and outputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from parity_gate.github.commands import ANNOTATION_LIMIT, MESSAGE_LIMIT, Annotation

if TYPE_CHECKING:
    from parity_gate.github.action import Paths
    from parity_gate.model.results import CaseResult, RunResult

OUTPUTS = ("result", "regressions", "failures", "json_path", "junit_path", "summary_path",
           "out_dir")


def failing_cases(run: RunResult) -> list[CaseResult]:
    return run.failures


def module_lines(manifest_text: str) -> dict[str, int]:
    """Line of each module's entry under `modules:` (its mapping's first line, whatever
    the order of its keys), so annotations point at it; {} when the text does not parse."""
    import yaml

    from parity_gate.errors import UserError
    from parity_gate.manifest.located import load_document, position

    try:
        doc = load_document(manifest_text, "parity.yml")
    except UserError:
        return {}
    modules = doc.node(("modules",))
    lines: dict[str, int] = {}
    for i, entry in enumerate(modules.value if isinstance(modules, yaml.SequenceNode) else []):
        name = doc.node(("modules", i, "name"))
        if isinstance(entry, yaml.MappingNode) and isinstance(name, yaml.ScalarNode):
            lines.setdefault(name.value, position(entry)[0])
    return lines


def _case_annotation(case: CaseResult, level: str, rulings: Mapping[str, str],
                     file: str | None, lines: Mapping[str, int]) -> Annotation:
    head = case.explanation or case.outcome.info.description
    # The case's reason already quotes its worst output; list the other failing ones.
    bad = [line for c in case.comparisons if not c.passed
           if (line := f"{c.name}: {c.reason}") != case.reason]
    parts = [head, *bad[:3]]
    if len(bad) > 3:
        parts.append(f"… and {len(bad) - 3} more failing outputs")
    if case.id in rulings:
        parts.append(f"baseline: {rulings[case.id]}")
    tail = "" if level == "error" else " (not blocking)"
    return Annotation(level, f"parity-gate: {case.id} {case.outcome.value}{tail}",
                      "\n".join(p for p in parts if p)[:MESSAGE_LIMIT],
                      file, lines.get(case.key.module))


def annotate(run: RunResult, *, manifest_file: str | None = None,
             manifest_lines: Mapping[str, int] | None = None,
             limit: int = ANNOTATION_LIMIT) -> list[Annotation]:
    """Failing cases and findings, worst first, at most `limit` in all.

    A case that blocks the merge is an error; a failure that does not block (a
    known one under the baseline, or `fail_on: never`) is a warning. Past the
    limit, the last slot says how many were left out.
    """
    verdict = run.verdict
    gate = run.gate
    blocking = set(gate.blocking) if gate is not None else {c.id for c in run.failures}
    rulings = ({r.id: r.why for r in gate.rulings}
               if gate is not None and gate.baseline else {})  # without one, every failure is new
    lines = manifest_lines or {}
    ranked: list[tuple[tuple[bool, int, int, str], Annotation]] = []
    for case in run.failures:
        level = "error" if verdict.blocks and case.id in blocking else "warning"
        ranked.append(((level != "error", 0, -case.outcome.severity, case.id),
                       _case_annotation(case, level, rulings, manifest_file, lines)))
    for f in run.findings:
        level = "error" if f.severity == "error" else "warning"
        ranked.append(((level != "error", 1, 0, f.module),
                       Annotation(level, f"parity-gate: {f.module} {f.kind}",
                                  f.message[:MESSAGE_LIMIT], manifest_file,
                                  lines.get(f.module))))
    ranked.sort(key=lambda r: r[0])
    items = [a for _, a in ranked]
    if len(items) <= limit:
        return items
    shown = items[: limit - 1]
    return [*shown, Annotation(
        "warning", "parity-gate: more results not annotated",
        f"{len(items) - len(shown)} more failing cases or findings were omitted (GitHub shows "
        f"at most {ANNOTATION_LIMIT} annotations per step); see the step summary or the JSON "
        "report.")]


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
