"""JUnit as reporters read it: valid under the vendored junit-10.xsd (plus the `file`/`line`
attributes reporters place annotations with), every case on its module's manifest line,
and case times that include the export and session time the cases shared."""

from __future__ import annotations

import re
from pathlib import Path

import junitparser
import pytest
import xmlschema

from parity_gate.gate.decision import decide
from parity_gate.model.findings import Lost, Stage, Step
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.report import junit
from parity_gate.report.write import ReportPaths, write_all

SCHEMAS = Path(__file__).parent / "data" / "junit-schema"
MANIFEST = """\
version: 1
fixtures: {vec: {kind: random, inputs: {x: {shape: [batch, 8]}}}}
modules:
  - name: mlp
    factory: m:mlp
    inputs: [{name: x}]
    fixtures: [vec]
  - factory: m:crashy   # `name` is not the first key
    inputs: [{name: x}]
    name: crashy
    fixtures: [vec]
"""


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema11:
    return xmlschema.XMLSchema11(str(SCHEMAS / "file-line.xsd"))


def timed(batch: int, provider: str = "cpu", **extra: float) -> dict[str, float]:
    return {"export_s": 6.0, "check_s": 0.0, "session_s": 0.5 if provider == "cpu" else 1.0,
            "run_s": 0.01 * batch, "compare_s": 0.0, "eager_s": 0.0, **extra}


def sample(manifest: Path) -> RunResult:
    lost = Lost(Step(Stage.EXPORTING, "float32"), signal="SIGSEGV")
    cases = [CaseResult(CaseKey("mlp", "float32", "vec", b, p), Outcome.PASS,
                        timings=timed(b, p)) for b in (2, 10) for p in ("cpu", "cuda")]
    cases += [CaseResult(CaseKey("crashy", "float32", "vec", b, "cpu"), Outcome.CRASH,
                         "worker killed by SIGSEGV", "Fatal Python error", lost=lost,
                         timings={"wall_s": 4.0}) for b in (2, 3)]
    cases.append(CaseResult(CaseKey("crashy", "float32", "vec", 2, "tensorrt"),
                            Outcome.SKIPPED, "TensorRT not available"))
    run = RunResult(cases=cases, started_at="2026-01-02T03:04:05+01:00", duration_s=34.0,
                    manifest={"path": str(manifest)}, versions={"torch": "2.13.0"})
    run.gate = decide(run)
    return run


def written(tmp_path: Path) -> tuple[RunResult, Path]:
    manifest = tmp_path / "parity.yml"
    manifest.write_text(MANIFEST)
    run = sample(manifest)
    paths = ReportPaths.in_folder(tmp_path / "out")
    write_all(run, paths)
    assert paths.junit is not None
    return run, paths.junit


def test_valid_under_the_vendored_schema(tmp_path: Path, schema: xmlschema.XMLSchema11) -> None:
    _, path = written(tmp_path)
    schema.validate(str(path))  # raises with the offending element on any violation
    text = path.read_text()
    suites = re.search(r"<testsuites [^>]*>", text)
    assert suites is not None and "skipped=" not in suites.group(0)
    stamp = re.search(r'timestamp="([^"]+)"', text)
    assert stamp is not None and stamp.group(1) == "2026-01-02T02:04:05"  # UTC, no offset
    base = xmlschema.XMLSchema10(str(SCHEMAS / "junit-10.xsd"))
    errors = [e.reason or "" for e in base.iter_errors(str(path))]
    # junit-10.xsd itself only misses the two attributes the overlay adds
    assert errors and all("file" in e or "line" in e for e in errors)


def test_every_case_has_its_modules_manifest_line(tmp_path: Path) -> None:
    _, path = written(tmp_path)
    xml = junitparser.JUnitXml.fromfile(str(path))
    cases = [c for s in xml for c in s]
    assert len(cases) == 7
    # outside the working folder the path stays as recorded (inside it: relative to it)
    assert {c._elem.get("file") for c in cases} == {str(tmp_path / "parity.yml")}
    lines = {c.classname: c._elem.get("line") for c in cases}
    assert lines == {"mlp": "4", "crashy": "8"}  # the entries' first lines, whatever the keys


def test_case_time_includes_its_share_of_shared_work(tmp_path: Path) -> None:
    manifest = tmp_path / "parity.yml"
    manifest.write_text(MANIFEST)
    run = sample(manifest)
    seconds = junit.case_seconds(run.cases)
    # 4 cases share one 6 s export; each provider's 2 cases share their session
    assert seconds["mlp/float32/vec/b2/cpu"] == pytest.approx(1.5 + 0.25 + 0.02)
    assert seconds["mlp/float32/vec/b10/cuda"] == pytest.approx(1.5 + 0.5 + 0.10)
    mlp = sum(v for k, v in seconds.items() if k.startswith("mlp/"))
    assert mlp == pytest.approx(6.0 + 0.5 + 1.0 + 2 * 0.02 + 2 * 0.10)  # counted once
    assert seconds["crashy/float32/vec/b2/cpu"] == 4.0  # the pool's share of the wall time
    assert seconds["crashy/float32/vec/b2/tensorrt"] == 0.0
    _, path = written(tmp_path)
    xml = junitparser.JUnitXml.fromfile(str(path))
    ran = [c for s in xml for c in s if not (c.result and isinstance(c.result[0],
                                                                     junitparser.Skipped))]
    assert all(c.time > 0 for c in ran)
    assert float(xml._elem.get("time")) == 34.0


def test_manifest_unreadable_still_names_the_file(tmp_path: Path) -> None:
    run = sample(tmp_path / "gone.yml")
    text = junit.to_xml(run, None).decode()
    assert 'file="' not in text  # no location given: no attribute at all
    from parity_gate.report.locate import locate

    where = locate(run, root=tmp_path)
    assert where.file == str(tmp_path / "gone.yml") and where.lines == {}
    (tmp_path / "gone.yml").write_text(MANIFEST)
    assert locate(run, root=tmp_path).file == "gone.yml"  # relative to the working folder


@pytest.mark.parametrize("kind", ["interrupted", "all-skipped", "passing"])
def test_a_blocking_run_without_failing_cases_shows_an_error(kind: str) -> None:
    """An interrupted run, or one whose every case was skipped, must not look green in a
    JUnit view: one error case says why; a passing run gets none."""
    outcome = Outcome.SKIPPED if kind == "all-skipped" else Outcome.PASS
    run = RunResult(cases=[CaseResult(CaseKey("mlp", "float32", "vec", 1, "cpu"), outcome,
                                      reason="CUDAExecutionProvider not available")],
                    interrupted=kind == "interrupted", planned=4 if kind == "interrupted" else 1)
    run.gate = decide(run)
    xml = junitparser.JUnitXml.fromstring(junit.to_xml(run))
    verdicts = [c for s in xml for c in s if c.classname == "parity-gate"]
    if kind == "passing":
        assert not verdicts and not run.verdict.blocks
        return
    (case,) = verdicts
    assert case.name == ("interrupted" if kind == "interrupted" else "verdict")
    (error,) = case.result
    assert isinstance(error, junitparser.Error) and error.message == run.verdict.why
    assert ("1 of 4 planned" if kind == "interrupted" else "skipped") in error.message
