"""JUnit XML in the shape GitHub reporters (dorny, mikepenz, EnricoMi) and junitparser read,
valid under the Jenkins xunit junit-10.xsd (tests/data/junit-schema) plus `file`/`line`
on test cases, the attributes reporters place annotations with.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime, timezone

from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import strip_control
from parity_gate.report.locate import Located

OWN = ("run_s", "compare_s", "eager_s", "wall_s")  # seconds that belong to one case
# Seconds measured once and recorded on every case that shared them, with what they
# were shared by: an export per (module, dtype), a session per provider as well.
SHARED = {"export_s": 2, "check_s": 2, "session_s": 3}


def case_seconds(cases: list[CaseResult]) -> dict[str, float]:
    """Each case's own time plus its share of the export, check and session time it
    shared with the other cases of its module and dtype (and provider)."""
    groups: dict[tuple[str, tuple[str, ...]], list[CaseResult]] = defaultdict(list)
    for case in cases:
        key = (case.key.module, case.key.dtype, case.key.provider)
        for name, depth in SHARED.items():
            if name in case.timings:
                groups[(name, key[:depth])].append(case)
    out = {c.id: float(sum(c.timings.get(k, 0.0) for k in OWN)) for c in cases}
    for (name, _), members in groups.items():
        total = max(c.timings[name] for c in members)
        for c in members:
            out[c.id] += total / len(members)
    return out


def timestamp(started_at: str) -> str:
    """ISO 8601 in UTC without an offset, the form the common JUnit schemas accept."""
    try:
        when = datetime.fromisoformat(started_at)
    except ValueError:
        return ""
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when.strftime("%Y-%m-%dT%H:%M:%S")


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
        lines += ["", "last lines of the worker's output:", case.detail]
    return "\n".join(lines)


def _verdict_case(root: ET.Element, run: RunResult, totals: dict[str, int]) -> None:
    """A run that blocks with no failing case in view (interrupted, every case skipped, a
    blocking hazard), or any interrupted run, gets one error test case saying why: a JUnit
    view of green or skipped cases alone would read as a pass."""
    verdict = run.verdict
    if not (run.interrupted or (verdict.blocks and not totals["failures"] + totals["errors"])):
        return
    suite = ET.SubElement(root, "testsuite", name="parity-gate", tests="1", failures="0",
                          errors="1", skipped="0", time="0.000")
    tc = ET.SubElement(suite, "testcase", classname="parity-gate",
                       name="interrupted" if run.interrupted else "verdict", time="0.000")
    el = ET.SubElement(tc, "error", message=strip_control(verdict.why)[:1000],
                       type=verdict.result)
    el.text = strip_control(verdict.why)
    for k in ("tests", "errors"):
        totals[k] += 1


def to_xml(run: RunResult, where: Located | None = None) -> bytes:
    """One <testsuite> per module; every test case names the manifest line of its module."""
    where = where or Located()
    root = ET.Element("testsuites", name="parity-gate")
    by_module: dict[str, list[CaseResult]] = defaultdict(list)
    for case in sorted(run.cases, key=lambda c: c.key.sort_key):
        by_module[case.key.module].append(case)
    seconds = case_seconds(run.cases)
    stamp = timestamp(run.started_at) if run.started_at else ""
    totals: dict[str, int] = defaultdict(int)
    # A case that matches eager but breaks a blocking performance rule fails in JUnit too.
    slow: dict[str, list[str]] = defaultdict(list)
    for flag in run.gate.slow if run.gate is not None else []:
        slow[flag.id].append(f"{flag.rule}: {flag.message}")
    for module, cases in by_module.items():
        suite = ET.SubElement(root, "testsuite", name=module)
        counts = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
        props = ET.SubElement(suite, "properties")
        for key, value in sorted(run.versions.items()):
            if isinstance(value, (str, int, float)):
                ET.SubElement(props, "property", name=key, value=str(value))
        for case in cases:  # task metrics as properties a dashboard can chart
            if case.task is not None:
                for name in ("eager", "onnx", "delta", "low", "high"):
                    ET.SubElement(props, "property", name=f"task.{case.key.junit_name}.{name}",
                                  value=f"{getattr(case.task, name):.6g}")
                ET.SubElement(props, "property", name=f"task.{case.key.junit_name}.verdict",
                              value=case.task.verdict)
        line = where.line(module)
        for case in cases:
            tc = ET.SubElement(suite, "testcase", classname=module, name=case.key.junit_name,
                               time=f"{seconds[case.id]:.3f}")
            if where.file:
                tc.set("file", where.file)
                if line is not None:
                    tc.set("line", str(line))
            kind = case.outcome.info.junit
            if kind == "skipped":
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", message=strip_control(case.reason or "skipped"))
            elif kind in ("failure", "error"):
                counts["failures" if kind == "failure" else "errors"] += 1
                el = ET.SubElement(tc, kind, message=strip_control(_message(case))[:1000],
                                   type=case.outcome.value)
                el.text = strip_control(_body(case))
            elif slow.get(case.id):
                counts["failures"] += 1
                el = ET.SubElement(tc, "failure", message=strip_control(slow[case.id][0])[:1000],
                                   type="performance")
                el.text = strip_control("\n".join([f"case: {case.id}", *slow[case.id]]))
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("time", f"{sum(seconds[c.id] for c in cases):.3f}")
        if stamp:
            suite.set("timestamp", stamp)
        if where.file:
            suite.set("file", where.file)
    _verdict_case(root, run, totals)
    # `skipped` is a per-suite attribute only: the common schemas reject it on <testsuites>.
    for k in ("tests", "failures", "errors"):
        root.set(k, str(totals[k]))
    root.set("time", f"{run.duration_s:.3f}")
    ET.indent(root)
    for el in root.iter():  # every attribute and text, names too (an output's, a module's)
        el.attrib = {k: strip_control(v) for k, v in el.attrib.items()}
        if el.text:
            el.text = strip_control(el.text)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
