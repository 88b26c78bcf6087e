"""Report writers on hand-built results: JUnit must parse whatever text errors carry."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import junitparser

from parity_gate.gate.decision import decide
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseKey, CaseResult, RunResult
from parity_gate.report.write import ReportPaths, write_all


def test_junit_survives_colour_codes_and_control_bytes(tmp_path: Path) -> None:
    nasty = "\x1b[96mConversionError\x1b[0m: bad\x00 byte\x07 and \x1b[1;31mcolour\x1b[0m"
    run = RunResult(cases=[
        CaseResult(CaseKey("m", "float32", "f", 2, "cpu"), Outcome.EXPORT_ERROR, nasty, nasty),
        CaseResult(CaseKey("m", "float32", "f", 3, "cpu"), Outcome.SKIPPED, nasty),
    ])
    paths = ReportPaths(json=tmp_path / "r.json", junit=tmp_path / "j.xml",
                        summary=tmp_path / "s.md")
    run.gate = decide(run)
    write_all(run, paths)
    xml = junitparser.JUnitXml.fromfile(str(paths.junit))
    results = [c.result[0] for s in xml for c in s]
    error = next(r for r in results if isinstance(r, junitparser.Error))
    assert error.type == "export_error"
    assert error.message == "ConversionError: bad byte and colour"
    assert "\x1b" not in (error.text or "")


def test_reports_respect_the_umask(tmp_path: Path) -> None:
    run = RunResult(cases=[CaseResult(CaseKey("m", "float32", "f", 2, "cpu"), Outcome.PASS)])
    run.gate = decide(run)
    paths = ReportPaths.in_folder(tmp_path / "out")
    old = os.umask(0o027)
    try:
        write_all(run, paths)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in paths.written()}
    assert modes == dict.fromkeys(("results.json", "junit.xml", "summary.md", "report.html"),
                                  0o640)
    os.umask(0o002)
    try:
        write_all(run, paths)  # replacing files: the new ones get the new umask
    finally:
        os.umask(old)
    assert {stat.S_IMODE(p.stat().st_mode) for p in paths.written()} == {0o664}
