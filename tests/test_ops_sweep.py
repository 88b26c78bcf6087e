"""The op sweep end to end: isolation in workers, real outcomes, reports, repro scripts.

These start worker processes and export real modules; the whole catalogue
runs only under `-m slow`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest

from parity_gate.ops.jobs import Unit
from parity_gate.ops.planner import OpPlan, Selection, job_for
from parity_gate.ops.registry import load_variants
from parity_gate.ops.sweep import SweepStats, sweep
from parity_gate.outcomes import Outcome

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TEST_SOURCES = ("ops_test_variants:VARIANTS",)
# The outcomes below were recorded with these versions; an upstream fix changes them.
RECORDED = {"torch": "2.13", "onnxscript": "0.7.2", "onnxruntime": "1.32"}


def _versions_match() -> bool:
    return all(metadata.version(k).startswith(v) for k, v in RECORDED.items())


def test_one_bad_op_never_hides_the_others() -> None:
    """One batch: an op without translation, one giving an invalid model, one killing
    the worker during export, one eager rejects, and six good ops."""
    variants = load_variants(TEST_SOURCES)
    units = [Unit(v, "float32", "normal") for v in
             ("t.sin", "t.cos", "t.no_translation", "t.tanh", "t.abort_on_export",
              "t.sigmoid", "t.neg", "t.exp")]
    units += [Unit("t.sin_bf16", "bfloat16", "normal"), Unit("t.rejected", "float32", "empty")]
    selection = Selection()
    job = job_for("mixed", units, selection, TEST_SOURCES, 0)
    stats = SweepStats()
    results = list(sweep(OpPlan([job], [], variants), selection, workers=1, stats=stats))

    by_variant = {r.meta["variant"]: r for r in results}
    assert sorted(r.id for r in results) == sorted(k.id for k in job.cases)  # each once
    for good in ("t.sin", "t.cos", "t.tanh", "t.sigmoid", "t.neg", "t.exp"):
        assert by_variant[good].outcome is Outcome.PASS, by_variant[good].reason
    assert by_variant["t.no_translation"].outcome is Outcome.UNSUPPORTED_OP
    assert "paritytest.twice" in by_variant["t.no_translation"].reason
    assert by_variant["t.sin_bf16"].outcome is Outcome.INVALID_MODEL
    crash = by_variant["t.abort_on_export"]
    assert crash.outcome is Outcome.CRASH and "SIGABRT" in crash.reason
    assert by_variant["t.rejected"].outcome is Outcome.SKIPPED
    assert "not applicable" in by_variant["t.rejected"].reason
    assert stats.resplits >= 2  # the crashing batch was split until the crasher ran alone
    for r in results:
        assert {"op", "variant", "input_class"} <= set(r.meta), r.id


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, float]:
    """`parity-gate ops` on one real case per outcome class (CLI, reports, repros)."""
    out = tmp_path_factory.mktemp("ops")
    select = ["op/sin/float32/normal/*", "op/avg_pool2d.divisor/float32/normal/*",
              "op/abs/float16/normal/*", "op/softmax.dtype_f32/float16/normal/*",
              "op/sin/bfloat16/normal/*", "op/exp/bfloat16/normal/*",
              "op/digamma/float32/normal/*", "op/max.dim/float32/empty/*",
              "op/sdpa.3d/float32/normal/*", "op/circular.1d/float32/empty/*",
              "op/atan2/float32/specials/*", "op/floor_divide/int64/specials/*"]
    cmd = [sys.executable, "-m", "parity_gate", "ops", "--out", str(out), "--no-baseline",
           "--jobs", "2", "--quiet"]
    for s in select:
        cmd += ["--select", s]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, out, time.monotonic() - t0


def _cases(out: Path) -> dict[str, dict]:
    doc = json.loads((out / "results.json").read_text())
    return {c["meta"]["variant"] + "/" + c["dtype"]: c for c in doc["cases"]}


@pytest.mark.skipif(not _versions_match(), reason=f"outcomes recorded on {RECORDED}")
def test_each_outcome_class_on_a_real_op(cli_run: tuple[int, Path, float]) -> None:
    code, out, _ = cli_run
    cases = _cases(out)
    expected = {
        "sin/float32": "pass",
        "avg_pool2d.divisor/float32": "mismatch",      # divisor_override ignored
        "abs/float16": "dtype_mismatch",               # float16 op returns float32
        "softmax.dtype_f32/float16": "dtype_mismatch", # Softmax(float16) -> Cast: hidden
        "sin/bfloat16": "invalid_model",               # ONNX Sin has no bfloat16
        "exp/bfloat16": "no_kernel",                   # valid, but no CPU kernel
        "digamma/float32": "unsupported_op",           # feature request, not a bug
        "max.dim/float32": "skipped",                  # eager rejects an empty reduction
        "sdpa.3d/float32": "export_error",             # torchlib asserts 4-D inputs
        "circular.1d/float32": "runtime_error",        # ORT Pad fails on an empty input
        "atan2/float32": "mismatch",                   # NaN and signed-zero handling
        "floor_divide/int64": "crash",                 # ORT: SIGFPE on int64 min // -1
    }
    assert {k: cases[k]["outcome"] for k in expected} == expected
    assert code == 1  # findings fail the gate without a baseline
    hidden = cases["softmax.dtype_f32/float16"]
    assert hidden["meta"]["structure"]["hidden_by_provider"] == "cpu"
    assert cases["avg_pool2d.divisor/float32"]["meta"]["recheck"]["verdict"] == "confirmed"
    assert cases["atan2/float32"]["meta"]["op"] == "aten.atan2.default"
    assert "not applicable" in cases["max.dim/float32"]["reason"]
    assert "SIGFPE" in cases["floor_divide/int64"]["reason"]


def test_reports_and_repro_scripts(cli_run: tuple[int, Path, float]) -> None:
    _, out, _ = cli_run
    doc = json.loads((out / "results.json").read_text())
    assert doc["cases"] and all(re.fullmatch(r"op/[\w.]+/\w+/\w+/cpu", c["id"])
                                for c in doc["cases"])  # no /bN: op cases have no batch
    for c in doc["cases"]:
        assert {"op", "variant", "input_class"} <= set(c["meta"])
    suites = ET.parse(out / "junit.xml").getroot()
    assert int(suites.get("tests")) == len(doc["cases"])
    table = (out / "findings.md").read_text()
    assert "### Exporter findings" in table and "prims.digamma" in table
    scripts = sorted((out / "repro").glob("*.py"))
    assert scripts and any("atan2" in p.name for p in scripts)


def test_a_repro_script_runs_standalone(cli_run: tuple[int, Path, float],
                                        tmp_path: Path) -> None:
    _, out, _ = cli_run
    script = next((out / "repro").glob("atan2__mismatch*.py"))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "eager:" in proc.stdout and "onnx:" in proc.stdout and "max |eager - onnx|" in \
        proc.stdout


@pytest.mark.slow
def test_full_sweep_finishes_in_ten_minutes(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "parity_gate", "ops", "--out", str(tmp_path),
                           "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    elapsed = time.monotonic() - t0
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert len(doc["cases"]) > 5000 and doc["manifest"]["variants"] >= 350
    internal = [c["id"] for c in doc["cases"] if "internal error" in c["reason"]]
    assert not internal, internal[:5]
    assert elapsed < 600, f"full sweep took {elapsed:.0f}s"
    if _versions_match():
        gate = doc["gate"]
        assert proc.returncode == 0, f"blocking: {gate['blocking'][:20]}\n{proc.stderr[-3000:]}"
