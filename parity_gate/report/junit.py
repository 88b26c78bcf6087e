"""JUnit XML in the shape GitHub reporters (dorny, mikepenz, EnricoMi) and junitparser read."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Any

from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import strip_control


def _message(case: CaseResult) -> str:
    worst = case.worst()
    if worst is not None and not worst.passed:
        return worst.headline()
    return case.explanation or case.outcome.info.description


def _body(case: CaseResult) -> str:
    lines = [f"case: {case.id}", f"outcome: {case.outcome.value}", f"reason: {case.explanation}"]
    for c in case.comparisons:
        lines.append(f"{'pass' if c.passed else 'FAIL'} {c.headline()}")
    if case.detail:
        lines += ["", case.detail]
    return "\n".join(lines)


def _seconds(case: CaseResult) -> float:
    t = case.timings
    return float(t.get("run_s", 0.0) + t.get("compare_s", 0.0) + t.get("eager_s", 0.0))


def to_xml(run: RunResult) -> bytes:
    root = ET.Element("testsuites", name="parity-gate")
    by_module: dict[str, list[CaseResult]] = defaultdict(list)
    for case in sorted(run.cases, key=lambda c: c.key.sort_key):
        by_module[case.key.module].append(case)
    totals: dict[str, Any] = defaultdict(int)
    for module, cases in by_module.items():
        suite = ET.SubElement(root, "testsuite", name=module)
        counts = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
        props = ET.SubElement(suite, "properties")
        for key, value in sorted(run.versions.items()):
            if isinstance(value, (str, int, float)):
                ET.SubElement(props, "property", name=key, value=str(value))
        for case in cases:
            tc = ET.SubElement(suite, "testcase", classname=module, name=case.key.junit_name,
                               time=f"{_seconds(case):.3f}")
            kind = case.outcome.info.junit
            if kind == "skipped":
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", message=strip_control(case.reason or "skipped"))
            elif kind in ("failure", "error"):
                counts["failures" if kind == "failure" else "errors"] += 1
                el = ET.SubElement(tc, kind, message=strip_control(_message(case))[:1000],
                                   type=case.outcome.value)
                el.text = strip_control(_body(case))
        suite_time = sum(_seconds(c) for c in cases)
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("time", f"{suite_time:.3f}")
        if run.started_at:
            suite.set("timestamp", run.started_at)
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(totals[k]))
    root.set("time", f"{run.duration_s:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
