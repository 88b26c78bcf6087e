"""End to end through real torch export and ONNX Runtime, in real worker processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import junitparser
import pytest

from parity_gate.cli import main
from parity_gate.gate.merge import read_results
from parity_gate.model.results import RunResult

pytestmark = pytest.mark.process  # real worker runs, exports or subprocesses

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "parity_gate" / "example" / "parity.yml"
FAULTY = ROOT / "tests" / "data" / "faulty" / "parity.yml"


def run_cli(args: list[str]) -> int:
    return main(["run", *args, "--quiet"])


def load(out: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    doc = json.loads((out / "results.json").read_text())
    return doc, {c["id"]: c for c in doc["cases"]}


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, Path]:
    out = tmp_path_factory.mktemp("example")
    step = out / "step_summary.md"
    step.write_text("earlier step\n")
    os.environ["GITHUB_STEP_SUMMARY"] = str(step)
    try:
        code = run_cli([str(EXAMPLE), "--out", str(out)])
    finally:
        del os.environ["GITHUB_STEP_SUMMARY"]
    return code, out, step


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("faulty")
    return run_cli([str(FAULTY), "--out", str(out)]), out


def test_example_passes_with_every_planned_case(example_run: tuple[int, Path, Path]) -> None:
    code, out, _ = example_run
    doc, cases = load(out)
    assert code == 0
    assert doc["verdict"]["result"] == "pass" and doc["verdict"]["blocks"] is False
    # 3 modules; cnn+encoder: 1 fixture x 3 batches; mlp: 2 dtypes x (3 + 4 edge batches)
    cpu = [c for c in cases.values() if c["key"]["provider"] == "cpu"]
    assert len(cpu) == 3 + 3 + 2 * (3 + 4)
    assert all(c["outcome"] == "pass" for c in cpu), [c["id"] for c in cpu
                                                     if c["outcome"] != "pass"]
    assert "mlp/float16/tabular_edge/b0/cpu" in cases  # edge sets add an empty batch
    mlp = cases["mlp/float16/tabular/b7/cpu"]
    assert [c["name"] for c in mlp["comparisons"]] == ["score", "embedding"]
    assert mlp["comparisons"][0]["dtype_got"] == "float16"
    cnn = cases["cnn/float32/images/b4/cpu"]
    assert cnn["comparisons"][0]["top1_agreement"] == 1.0
    assert cnn["samples"] == 2 and cnn["provenance"]["reference_device"] == "cpu"
    assert cnn["provenance"]["exporter"] == "dynamo" and cnn["provenance"]["seed"] is not None
    assert {"torch", "onnx", "onnxscript", "onnxruntime"} <= set(doc["versions"])
    # The first run of the example leaves a newcomer nothing to investigate: no finding,
    # and every case compares finite numbers (none passes on the NaN pattern alone).
    assert doc["findings"] == [], doc["findings"]
    for case in cpu:
        for cmp in case["comparisons"]:
            assert cmp["total"] == 0 or (cmp["max_abs"] is not None
                                         and not cmp["nonfinite"]), case["id"]


def test_example_unavailable_provider_is_skipped_with_reason(
        example_run: tuple[int, Path, Path]) -> None:
    _, out, _ = example_run
    _, cases = load(out)
    cuda = cases["cnn/float32/images/b1/cuda"]
    if "CUDAExecutionProvider" in load(out)[0]["versions"]["providers_available"]:
        pytest.skip("this machine has CUDA")
    assert cuda["outcome"] == "skipped"
    assert "CUDAExecutionProvider not available" in cuda["reason"]


def test_example_reports_parse(example_run: tuple[int, Path, Path]) -> None:
    _, out, step = example_run
    xml = junitparser.JUnitXml.fromfile(str(out / "junit.xml"))
    suites = {s.name: s for s in xml}
    assert set(suites) == {"cnn", "encoder", "mlp"}
    names = {(c.classname, c.name) for s in xml for c in s}
    assert ("mlp", "float16/tabular_edge/b0/cpu") in names
    skipped = [c for s in xml for c in s if c.result and isinstance(c.result[0],
                                                                     junitparser.Skipped)]
    assert skipped and all(c.name.endswith("/cuda") for c in skipped)
    summary = (out / "summary.md").read_text()
    # the 20 skipped cases are an optional CUDA provider this machine lacks: said once below
    assert summary.startswith("## ✅ parity-gate: all 20 cases match eager\n")
    assert "<details>" in summary
    appended = step.read_text()
    assert appended.startswith("earlier step\n") and "parity-gate" in appended


def test_faulty_manifest_exit_code_and_outcomes(faulty_run: tuple[int, Path]) -> None:
    code, out = faulty_run
    doc, cases = load(out)
    assert code == 1
    assert doc["verdict"]["result"] == "fail" and doc["verdict"]["blocks"] is True
    outcome = {cid: c["outcome"] for cid, c in cases.items() if c["key"]["provider"] == "cpu"}
    assert outcome == {
        "healthy/float32/vec/b2/cpu": "pass",
        "healthy/float32/vec/b3/cpu": "pass",
        "training/float32/vec/b2/cpu": "pass",
        "training/float32/vec/b3/cpu": "pass",
        "approximated/float32/vec/b2/cpu": "mismatch",
        "approximated/float32/vec/b3/cpu": "mismatch",
        "baked/float32/vec/b2/cpu": "pass",
        "baked/float32/vec/b3/cpu": "baked_shape",
        "segfault/float32/vec/b2/cpu": "crash",
        "segfault/float32/vec/b3/cpu": "crash",
        "abort/float32/vec/b2/cpu": "crash",
        "abort/float32/vec/b3/cpu": "crash",
        "hang/float32/vec/b2/cpu": "timeout",
        "hang/float32/vec/b3/cpu": "timeout",
        "oom/float32/vec/b2/cpu": "crash",
        "oom/float32/vec/b3/cpu": "crash",
        "traced_view/float32/vec/b2/cpu": "pass",
        "traced_view/float32/vec/b3/cpu": "baked_shape",
    }


def test_faulty_crash_and_hang_reasons(faulty_run: tuple[int, Path]) -> None:
    _, out = faulty_run
    _, cases = load(out)
    # the signal, whose code it was in (the line faulthandler's stack names, else the
    # library a report goes to), and the step
    assert cases["segfault/float32/vec/b2/cpu"]["reason"].startswith(
        "worker killed by SIGSEGV in the model's own code (models.py:47, in forward) while "
        "eager ")
    assert "SIGABRT" in cases["abort/float32/vec/b2/cpu"]["reason"]
    assert "timeout of 8s" in cases["hang/float32/vec/b2/cpu"]["reason"]
    assert "SIGKILL (likely out of memory)" in cases["oom/float32/vec/b3/cpu"]["reason"]
    baked = cases["baked/float32/vec/b3/cpu"]["reason"]
    assert "exported at batch 2" in baked and "eager works" in baked
    # legacy tracer: no runtime error, the graph silently reshapes to the export batch
    silent = cases["traced_view/float32/vec/b3/cpu"]["reason"]
    assert "(2, 6) where eager gives (3, 4)" in silent


def test_faulty_mismatch_evidence(faulty_run: tuple[int, Path]) -> None:
    _, out = faulty_run
    doc, cases = load(out)
    comp = cases["approximated/float32/vec/b3/cpu"]["comparisons"][0]
    assert not comp["passed"]
    assert comp["max_abs"] > comp["atol"]
    assert comp["worst_index"] is not None and comp["ulp"] > 0
    assert comp["needed_atol"] >= comp["max_abs"] - comp["rtol"] * abs(comp["ref_value"])
    # the graph itself differs, so switching ORT's optimizations off does not help
    case = cases["approximated/float32/vec/b3/cpu"]
    assert case["rerun"]["level"] == "disabled" and case["rerun"]["outcome"] == "mismatch"
    assert case["rerun"]["max_abs"] > comp["atol"]
    explained = RunResult.from_dict(doc).cases[
        [c["id"] for c in doc["cases"]].index(case["id"])].explanation
    # the localisation's optimizer-level check supersedes the single optimizations-off note
    assert "fails at every ORT optimization level: the graph itself differs" in explained
    # what ran is recorded on the case: the opset and IR version of the graph
    assert case["provenance"]["opset"] >= 18 and case["provenance"]["ir_version"] >= 8


def test_faulty_findings(faulty_run: tuple[int, Path]) -> None:
    _, out = faulty_run
    doc, _ = load(out)
    kinds = {(f["module"], f["kind"]) for f in doc["findings"]}
    assert ("training", "training-mode") in kinds
    assert ("healthy", "training-mode") not in kinds
    # the export hazards, each a typed record: the baked input dim, and the legacy tracer's
    # baked Reshape and Python value (TracerWarning) with their source line
    assert ("baked", "dynamic-dim-specialised") in kinds
    assert {("traced_view", "baked-dim"), ("traced_view", "python-control-flow")} <= kinds
    assert ("approximated", "eager-mismatch-by-design") in kinds
    assert all(f["hazard"]["rule"] == f["kind"] for f in doc["findings"] if f["hazard"])
    warnings = [f["message"] for f in doc["findings"] if f["module"] == "traced_view"]
    assert any("TracerWarning" in w or "Python value" in w for w in warnings)
    assert not any("DeprecationWarning" in w for w in warnings)


def test_faulty_junit_failures_and_errors(faulty_run: tuple[int, Path]) -> None:
    _, out = faulty_run
    xml = junitparser.JUnitXml.fromfile(str(out / "junit.xml"))
    results: dict[tuple[str, str], Any] = {
        (c.classname, c.name): (c.result[0] if c.result else None) for s in xml for c in s}
    mismatch = results[("approximated", "float32/vec/b3/cpu")]
    assert isinstance(mismatch, junitparser.Failure) and mismatch.type == "mismatch"
    crash = results[("segfault", "float32/vec/b2/cpu")]
    assert isinstance(crash, junitparser.Error) and crash.type == "crash"
    timeout = results[("hang", "float32/vec/b2/cpu")]
    assert isinstance(timeout, junitparser.Error) and timeout.type == "timeout"
    assert results[("healthy", "float32/vec/b2/cpu")] is None
    assert isinstance(results[("healthy", "float32/vec/b2/tensorrt")], junitparser.Skipped)
    summary = (out / "summary.md").read_text()
    assert summary.startswith("## ❌ parity-gate: 3 modules crash, 1 times out, 2 bake in a "
                              "shape, 1 mismatches — blocking (12 of 18 cases fail)")
    first_table = summary[summary.index("| module |"):summary.index("<details>")]
    # one row per module, worst outcomes first: crash before timeout before mismatch
    assert first_table.index("**crash**") < first_table.index("**timeout**") < \
        first_table.index("**mismatch**")


def test_faulty_annotations_one_per_failing_module_with_file_and_line(
        faulty_run: tuple[int, Path]) -> None:
    from parity_gate.github.annotations import annotate, module_lines

    _, out = faulty_run
    run = read_results(out / "results.json")[1]
    lines = module_lines(FAULTY.read_text())
    notes = annotate(run, manifest_file="tests/data/faulty/parity.yml", manifest_lines=lines)
    failing = {"segfault", "abort", "oom", "hang", "approximated", "baked", "traced_view"}
    modules = [n.title.split()[1].split("/")[0] for n in notes if n.level == "error"
               and "/" in n.title]
    assert sorted(modules) == sorted(failing)  # one each, none twice
    # failing modules first, then the findings (hazards), within GitHub's 10 per step
    assert len(notes) <= 10 and any(n.title.endswith("-mode") or "hazard" in n.title
                                    or n.title.split()[-1] in ("baked-dim", "training-mode",
                                                               "dynamic-dim-specialised",
                                                               "python-control-flow",
                                                               "eager-mismatch-by-design")
                                    for n in notes)
    for n in (n for n in notes if n.title != "parity-gate: more results not annotated"):
        assert n.file == "tests/data/faulty/parity.yml"
        module = n.title.split()[1].split("/")[0]
        assert n.line == lines[module], n.title
    crash = next(n for n in notes if "segfault" in n.title)
    assert "(+1 more case)" in crash.title


def test_faulty_junit_cases_carry_file_line_and_time(faulty_run: tuple[int, Path]) -> None:
    _, out = faulty_run
    xml = junitparser.JUnitXml.fromfile(str(out / "junit.xml"))
    lines = {c.classname: c._elem.get("line") for s in xml for c in s}
    text = FAULTY.read_text().splitlines()
    for module, line in lines.items():
        assert f"name: {module}" in text[int(line) - 1]
    for case in (c for s in xml for c in s):
        assert case._elem.get("file", "").endswith("tests/data/faulty/parity.yml")
        skipped = case.result and isinstance(case.result[0], junitparser.Skipped)
        assert skipped or case.time > 0, (case.classname, case.name)
    hang = next(c for s in xml for c in s if c.classname == "hang")
    assert hang.time > 1  # the timeout's seconds are shared by its cases
    # a crash's evidence is that worker's own stack (faulthandler), not earlier modules' output
    crash = next(c for s in xml for c in s if c.classname == "segfault" and c.result)
    body = crash.result[0].text or ""
    assert "Segmentation fault" in body and "models.py" in body


def test_missing_required_provider_is_a_usage_error(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this machine has CUDA")
    text = FAULTY.read_text().replace("tensorrt: {required: false}", "cuda: {required: true}")
    manifest = tmp_path / "parity.yml"
    manifest.write_text(text)
    shutil.copy(FAULTY.parent / "models.py", tmp_path / "models.py")
    code = run_cli([str(manifest), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "providers.cuda.required" in err[0]
    assert not (tmp_path / "out").exists()


def test_sigterm_writes_reports_of_finished_cases(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity_gate", "run", str(FAULTY), "--out", str(tmp_path),
         "--select", "healthy", "--select", "hang", "--jobs", "1"],  # hang runs after healthy
        stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if "healthy/float32/vec/b3/cpu" in line:
            break
    time.sleep(1.0)  # now inside the hanging module
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    code = proc.wait(timeout=60)
    assert code == 128 + signal.SIGTERM, seen + rest
    doc, cases = load(tmp_path)
    assert doc["interrupted"] is True
    assert cases["healthy/float32/vec/b3/cpu"]["outcome"] == "pass"
    assert "hang/float32/vec/b2/cpu" not in cases
    junitparser.JUnitXml.fromfile(str(tmp_path / "junit.xml"))
    assert "interrupted" in (tmp_path / "summary.md").read_text()
