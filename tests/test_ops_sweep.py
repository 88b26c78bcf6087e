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

from parity_gate.engine.protocol import entry_point
from parity_gate.gate.merge import read_results
from parity_gate.model.findings import RecheckVerdict, Stage, Step
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.ops.jobs import Unit
from parity_gate.ops.planner import OpPlan, Selection, job_for
from parity_gate.ops.registry import load_variants
from parity_gate.ops.sweep import SweepStats, sweep

pytestmark = pytest.mark.process  # real worker runs, exports or subprocesses

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
    # A later job meets a variant whose export already failed: sent as a suspect, exported
    # apart from the batch (its own worker may never have seen it fail).
    later = job_for("later", [Unit("t.no_translation", "float32", "specials"),
                              Unit("t.cos", "float32", "specials")], selection, TEST_SOURCES, 0)
    stats = SweepStats()
    results = list(sweep(OpPlan([job, later], [], variants), selection, workers=1,
                         stats=stats))
    assert stats.suspects == {"t.no_translation"} and stats.forewarned == 1
    assert {r.op.variant: r.outcome for r in results if r.key.inputs == "specials"
            and r.op is not None} == {"t.no_translation": Outcome.UNSUPPORTED_OP,
                                      "t.cos": Outcome.PASS}
    results = [r for r in results if r.key.inputs != "specials"]

    assert all(r.op is not None for r in results)
    by_variant = {r.op.variant: r for r in results if r.op is not None}
    assert sorted(r.id for r in results) == sorted(k.id for k in job.cases)  # each once
    for good in ("t.sin", "t.cos", "t.tanh", "t.sigmoid", "t.neg", "t.exp"):
        assert by_variant[good].outcome is Outcome.PASS, by_variant[good].reason
    assert by_variant["t.no_translation"].outcome is Outcome.UNSUPPORTED_OP
    assert "paritytest.twice" in by_variant["t.no_translation"].reason
    assert by_variant["t.sin_bf16"].outcome is Outcome.INVALID_MODEL
    crash = by_variant["t.abort_on_export"]
    assert crash.outcome is Outcome.CRASH and "SIGABRT" in crash.reason
    # made up by the pool for the lone crasher, with the typed step it died in
    assert crash.lost is not None and crash.lost.signal == "SIGABRT"
    assert crash.lost.step.stage is Stage.EXPORTING and not crash.lost.never_started
    rejected = by_variant["t.rejected"]
    assert rejected.outcome is Outcome.SKIPPED and "not applicable" in rejected.reason
    assert rejected.op is not None and rejected.op.not_applicable
    assert stats.resplits >= 2  # the crashing batch was split until the crasher ran alone
    for r in results:
        assert r.op is not None and r.op.variant == r.key.module.removeprefix("op/"), r.id
        assert r.op.family == "test" and r.op.call, r.id
        assert r.lost is None or r is crash, r.id  # every other case a worker reported
        if r.outcome is Outcome.PASS:
            assert r.op.aten_ops and r.op.op.startswith("aten."), r.id
            assert r.provenance.exporter == "dynamo" and r.provenance.opset, r.id


def test_the_worker_reports_typed_steps_and_op_fields() -> None:
    """The job is data whose entry the worker resolves; its steps name the unit
    (what the crash re-split reads) and its results carry the typed op fields."""
    units = [Unit("t.sin", "float32", "normal"), Unit("t.rejected", "float32", "empty")]
    job = job_for("steps", units, Selection(), TEST_SOURCES, 5)
    from parity_gate.ops.worker import run_batch

    assert not hasattr(job, "execute") and entry_point(job) is run_batch
    messages: list[object] = []
    run_batch(job, messages.append)
    steps = [m for m in messages if isinstance(m, Step)]
    assert steps == [Step(Stage.EAGER, "t.sin/float32/normal"),
                     Step(Stage.EAGER, "t.rejected/float32/empty"),
                     Step(Stage.EXPORTING, "1 cases"),
                     Step(Stage.RUNNING, "1 cases", "on cpu")]
    results = {m.key.module: m for m in messages if isinstance(m, CaseResult)}
    sin, rejected = results["op/t.sin"], results["op/t.rejected"]
    assert sin.outcome is Outcome.PASS and sin.op is not None
    assert sin.op.op == "aten.sin.default" and "aten.sin.default" in sin.op.aten_ops
    assert sin.provenance.seed == 5 and sin.provenance.opset and sin.provenance.ir_version
    assert sin.recheck is None and sin.op.example is None
    assert rejected.outcome is Outcome.SKIPPED and rejected.op is not None
    assert rejected.op.not_applicable and not sin.op.not_applicable


def test_an_eager_answer_that_depends_on_the_layout_is_an_eager_quirk() -> None:
    """Eager runs again on strided views of the same inputs; where the exported model
    matches that answer, the case passes and says so, never an exporter finding."""
    from parity_gate.ops.findings import finding_class
    from parity_gate.ops.worker import run_batch

    job = job_for("quirk", [Unit("t.layout_quirk", "float32", "normal")], Selection(),
                  TEST_SOURCES, 0)
    messages: list[object] = []
    run_batch(job, messages.append)
    (case,) = [m for m in messages if isinstance(m, CaseResult)]
    assert case.outcome is Outcome.PASS, case.reason
    assert case.op is not None and case.op.eager_quirk is not None
    quirk = case.op.eager_quirk
    assert quirk.contiguous == "nan" and quirk.strided == quirk.onnx == quirk.inputs["x"]
    assert float(quirk.inputs["x"]) > 0 and quirk.count > 0
    assert finding_class(case).value == "eager_quirk"
    assert "memory layout" in case.reason


def test_integer_and_float_mismatches_are_rechecked_exactly() -> None:
    """floor_divide(inf, 4.2e-45) is NaN in eager and inf in the exported graph: the
    exact answer floor(inf) = inf says eager is off, where a float64 re-run of eager
    "confirmed" eager's NaN; int8 cases get an exact reference too."""
    from parity_gate.ops.worker import run_batch

    job = job_for("exact", [Unit("t.floor_divide", "float32", "specials"),
                            Unit("t.floor_divide", "int8", "specials")],
                  Selection(), TEST_SOURCES, 0)
    messages: list[object] = []
    run_batch(job, messages.append)
    cases = {m.key.dtype: m for m in messages if isinstance(m, CaseResult)}
    f32 = cases["float32"]
    assert f32.recheck is not None, f32.reason
    assert f32.recheck.reference.value == "exact"
    # the exported graph is the one that matches floor(inf) = inf: eager's error, which
    # passes the case and lists it among the eager findings
    assert f32.recheck.verdict is RecheckVerdict.EAGER_OFF, f32.recheck.describe()
    assert f32.outcome is Outcome.PASS and "eager_off" in f32.reason
    assert f32.op is not None and f32.op.user_op == "torch.floor_divide"
    assert f32.op.op == "aten.floor_divide.default"
    i8 = cases["int8"]
    if i8.recheck is not None:  # only a mismatch is re-checked
        assert i8.recheck.reference.value == "exact"


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, float]:
    """`parity-gate ops` on one real case per outcome class (CLI, reports, repros)."""
    out = tmp_path_factory.mktemp("ops")
    select = ["op/sin/float32/normal/*", "op/avg_pool2d.divisor/float32/normal/*",
              "op/abs/float16/normal/*", "op/softmax.dtype_f32/float16/normal/*",
              "op/sin/bfloat16/normal/*", "op/exp/bfloat16/normal/*",
              "op/digamma/float32/normal/*", "op/max.dim/float32/empty/*",
              "op/sdpa.3d/float32/normal/*", "op/circular.1d/float32/empty/*",
              "op/atan2/float32/specials/*", "op/floor_divide/int64/specials/*",
              "op/gru/float32/specials/*", "op/hamming_window/float32/normal/*",
              "op/std_mean/float32/empty/*", "op/sdpa.gqa/float32/empty/*",
              "op/scatter_add/float16/normal/*"]
    cmd = [sys.executable, "-m", "parity_gate", "ops", "--out", str(out), "--no-baseline",
           "--jobs", "2", "--quiet"]
    for s in select:
        cmd += ["--select", s]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, out, time.monotonic() - t0


def _cases(out: Path) -> dict[str, CaseResult]:
    """The report read back through the records (validated), keyed variant/dtype."""
    run = read_results(out / "results.json")[1]
    return {f"{c.op.variant}/{c.key.dtype}": c for c in run.cases if c.op is not None}


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
    assert {k: cases[k].outcome.value for k in expected} == expected
    assert code == 1  # findings fail the gate without a baseline
    hidden = cases["softmax.dtype_f32/float16"]
    assert hidden.op is not None and hidden.op.low_precision is not None
    assert hidden.op.low_precision.hidden_by_provider == "cpu"
    assert "Softmax" in hidden.op.low_precision.nodes[0]
    pool = cases["avg_pool2d.divisor/float32"]
    assert pool.recheck is not None and pool.recheck.verdict is RecheckVerdict.CONFIRMED
    assert pool.recheck.unoptimized is not None and pool.recheck.unoptimized.level == "disabled"
    assert " | " not in pool.reason and "re-check" not in pool.reason  # typed, not appended
    assert "re-check: confirmed" in pool.explanation
    atan2 = cases["atan2/float32"]
    assert atan2.op is not None and atan2.op.op == "aten.atan2.default"
    assert atan2.op.example is not None and atan2.op.example.inputs  # elementwise: x, y shown
    assert "not applicable" in cases["max.dim/float32"].reason
    assert cases["max.dim/float32"].op.not_applicable  # type: ignore[union-attr]
    crash = cases["floor_divide/int64"]
    assert "SIGFPE" in crash.reason and crash.lost is not None
    assert crash.lost.signal == "SIGFPE"


@pytest.mark.skipif(not _versions_match(), reason=f"outcomes recorded on {RECORDED}")
def test_the_graph_by_onnx_definition_says_whether_graph_or_kernel_is_wrong(
        cli_run: tuple[int, Path, float]) -> None:
    """GRU over a NaN: eager and the ONNX graph run by ONNX's reference evaluator give NaN,
    ONNX Runtime's GRU kernel a number: a runtime gap, reported to onnxruntime.
    hamming_window: the graph itself computes ONNX Runtime's answer (torchlib's 25/46
    coefficients): an exporter defect, reported to the translation."""
    from parity_gate.model.findings import FindingClass
    from parity_gate.model.upstream import Owner
    from parity_gate.ops.signatures import signature_of

    cases = _cases(out=cli_run[1])
    for key, owner, found in (("gru/float32", Owner.KERNEL, FindingClass.RUNTIME),
                              ("hamming_window/float32", Owner.TRANSLATION,
                               FindingClass.EXPORTER)):
        case = cases[key]
        assert case.outcome is Outcome.MISMATCH and case.recheck is not None, key
        definition = case.recheck.definition
        assert definition is not None and definition.owner is owner, (key, definition)
        assert case.op is not None and case.op.finding_class is found, key
        assert signature_of(case).owner is owner, key
    assert "ONNX Runtime's kernel departs" in cases["gru/float32"].explanation
    # std_mean of nothing: torch says NaN; the graph takes ReduceMean over an empty set,
    # which ONNX leaves undefined, so no value is wrong by the definition: the graph is
    empty = cases["std_mean/float32"]
    assert empty.recheck is not None and empty.recheck.definition is not None
    assert empty.recheck.definition.owner is Owner.TRANSLATION
    assert "ReduceMean over an empty set" in (empty.recheck.definition.undefined or "")
    assert empty.op is not None and empty.op.finding_class is FindingClass.EXPORTER


def test_reports_and_repro_scripts(cli_run: tuple[int, Path, float]) -> None:
    _, out, _ = cli_run
    doc = json.loads((out / "results.json").read_text())
    assert doc["cases"] and all(re.fullmatch(r"op/[\w.]+/\w+/\w+/cpu", c["id"])
                                for c in doc["cases"])  # no /bN: op cases have no batch
    assert doc["gate"]["blocking"] and all(isinstance(i, str) for i in doc["gate"]["blocking"])
    for c in read_results(out / "results.json")[1].cases:
        assert c.op is not None and c.op.variant and c.op.family, c.id
        assert c.key.batch_size is None and c.key.inputs in ("normal", "specials", "empty")
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


@pytest.mark.skipif(not _versions_match(), reason=f"outcomes recorded on {RECORDED}")
def test_an_onnx_runtime_error_is_owned_by_running_the_graph_as_onnx_defines_it(
        cli_run: tuple[int, Path, float]) -> None:
    """ORT's Pad raises "Unexpected mode of 3" on an empty input, and its ScatterElements
    rejects float16 with a reduction, on graphs ONNX's reference evaluator runs to eager's
    answer: the kernel's (onnxruntime), one cause per kernel. SDPA with enable_gqa on an
    empty input reshapes 0 elements into a shape of 256: the reference raises too, so the
    graph is wrong (torchlib)."""
    from parity_gate.model.findings import FindingClass
    from parity_gate.model.upstream import Owner
    from parity_gate.ops.signatures import signature_of

    cases = _cases(out=cli_run[1])
    for key, owner, node in (("circular.1d/float32", Owner.KERNEL, "Pad"),
                             ("scatter_add/float16", Owner.KERNEL, "ScatterElements"),
                             ("sdpa.gqa/float32", Owner.TRANSLATION, "")):
        case = cases[key]
        assert case.outcome is Outcome.RUNTIME_ERROR and case.op is not None, key
        raised = case.op.raised
        assert raised is not None and raised.owner is owner, (key, raised)
        sig = signature_of(case)
        assert (sig.owner, sig.kernel) == (owner, node), key
        found = FindingClass.RUNTIME if owner is Owner.KERNEL else FindingClass.EXPORTER
        assert case.op.finding_class is found, key
    assert cases["circular.1d/float32"].op.raised.with_eager  # type: ignore[union-attr]
    gqa = cases["sdpa.gqa/float32"].op.raised  # type: ignore[union-attr]
    assert gqa is not None and "cannot reshape" in (gqa.error or "")
