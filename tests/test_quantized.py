"""Quantized models (issue 52): outputs and quantize nodes in quantization steps (pt2e),
SQNR per output and per node (runtime), the first bad node and its owner. Real PT2E
quantization (torchao), real torch.onnx.export and real ONNX Runtime; the defects are
planted in the exported graph, and ONNX Runtime's u8s8 saturation is its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parity_gate.compare import steps
from parity_gate.compare.steps import NodeSteps, blame, in_steps, int_steps, sqnr_db

DATA = Path(__file__).parent / "data" / "quantized"


# ------------------------------------------------------------------- the maths


def test_rounding_only_and_a_tie_named_half_even_vs_away() -> None:
    pre = np.array([2.5, 3.5, 1.2, -0.5])          # eager's values before rounding
    eager = np.array([2.0, 4.0, 1.0, -0.0])        # half to even
    away = np.array([3.0, 4.0, 1.0, -1.0])         # half away from zero
    s = in_steps(eager, away, 1.0, pre)
    assert s.verdict == "one_step" and s.ties == 2 and s.tie_rule == "half_even_vs_away"
    assert "round-half-even vs half away from zero" in s.describe()
    assert in_steps(eager, eager + 0.3, 1.0, pre).verdict == "rounding"


def test_a_floor_is_a_rounding_mode_defect_and_two_steps_a_defect() -> None:
    rng = np.random.default_rng(0)
    pre = rng.uniform(0, 100, 1000)
    nearest, floor = np.rint(pre), np.floor(pre)
    s = int_steps(nearest, floor, pre)
    assert s.verdict == "rounding_mode" and s.failed and s.off_tie > 300
    two = nearest.copy()
    two[7] += 2
    d = int_steps(nearest, two, pre)
    assert d.verdict == "defect" and d.first == (7,) and d.histogram["2"] == 1


def test_sqnr_in_db() -> None:
    x = np.ones(100)
    assert sqnr_db(x, x) == float("inf")
    assert sqnr_db(x, x + 0.1) == pytest.approx(20.0)
    assert sqnr_db(x, np.full(100, np.nan)) == float("-inf")


def test_blame_names_the_first_failing_node_and_its_owner() -> None:
    ok = int_steps(np.zeros(4), np.zeros(4))
    bad = int_steps(np.zeros(4), np.array([0, 0, 3, 0]))
    assert blame([NodeSteps("a", ok, ok)]) is None
    node, owner, _ = blame([NodeSteps("a", ok, ok), NodeSteps("b", bad, ok),
                            NodeSteps("c", bad, bad)]) or (None, "", "")
    assert node is not None and node.name == "b" and owner == "onnxruntime"
    assert blame([NodeSteps("c", bad, bad)])[1] == "exporter"  # type: ignore[index]
    assert blame([NodeSteps("d", bad, bad, params_match=False)])[1] == "exporter"  # type: ignore[index]
    assert blame([NodeSteps("e", bad, ok, representable=False)])[1] == "quantizer"  # type: ignore[index]
    assert steps.STEP_BINS[0] == "0"


# ------------------------------------------------------------------- real PT2E graphs


def _cnn_twin(reduce_range: bool = True) -> dict[str, Any]:
    """The test CNN quantized by PT2E (calibrated on generated data) and exported."""
    import onnx
    import torch

    from parity_gate.engine import qdq
    from parity_gate.engine.exporting import export_module
    from parity_gate.manifest.models import ExportSettings, InputSpec

    sys.path.insert(0, str(DATA))
    try:
        import quant_models
        module = quant_models.cnn().eval()
    finally:
        sys.path.remove(str(DATA))
    g = torch.Generator().manual_seed(1)
    calibration = [{"x": torch.randn(8, 3, 8, 8, generator=g)} for _ in range(4)]
    x = {"x": torch.randn(8, 3, 8, 8, generator=g)}
    converted = qdq.pt2e_convert(torch, module, x, calibration,
                                 {"x": {0: torch.export.Dim("batch")}}, reduce_range)
    twin = export_module(converted, x, [InputSpec(name="x")], ["logits"], ExportSettings())
    with torch.no_grad():
        out = [converted(**x).numpy()]
        eager = qdq.eager_nodes(torch, twin.program, [x["x"]])
    return {"model": onnx.load_from_string(twin.model), "out": out, "eager": eager,
            "program": twin.program,
            "feeds": {"x": x["x"].numpy()}}


def _judge(twin: dict[str, Any], model: Any = None, repro: Path | None = None) -> Any:
    from parity_gate.engine import qdq
    from parity_gate.engine.quantize import judge_pt2e, run_values, write_repro

    model = model if model is not None else twin["model"]
    data = qdq.with_outputs(model, list(qdq.q_params(model)))
    fused_out, fused = run_values(data, "cpu", {}, twin["feeds"])
    _, literal = run_values(data, "cpu", {}, twin["feeds"], "disabled")
    got = judge_pt2e(model, twin["out"], ["logits"], twin["eager"], fused, literal,
                     fused_out[:1])
    if repro is not None and got.first_bad:
        write_repro(repro, data, twin["feeds"], twin["eager"], got.first_bad)
    return got


@pytest.fixture(scope="module")
def cnn() -> dict[str, Any]:
    return _cnn_twin()


def _node(model: Any, output: str) -> Any:
    return next(n for n in model.graph.node if n.output[0] == output)


@pytest.mark.process
def test_the_pt2e_cnn_passes_within_one_step_with_its_histogram(cnn: dict[str, Any]) -> None:
    got = _judge(cnn)
    out = got.outputs[0]
    assert out.verdict in ("rounding", "one_step"), out.summary
    assert out.max_steps is not None and out.max_steps <= 1.0 + 1e-6
    assert sum(out.histogram.values()) == cnn["out"][0].size
    assert not got.first_bad and next(n.name for n in got.nodes) == "quantize_per_tensor"


@pytest.mark.process
def test_a_wrong_scale_after_export_is_the_exporters_at_its_node(
        cnn: dict[str, Any], tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    from parity_gate.engine import qdq

    model = onnx.ModelProto()
    model.CopyFrom(cnn["model"])
    node = _node(model, "quantize_per_tensor_1")
    scale = qdq.constants(model)[node.input[1]] * np.float32(1.25)
    model.graph.initializer.append(numpy_helper.from_array(scale, "planted_scale"))
    node.input[1] = "planted_scale"
    got = _judge(cnn, model, tmp_path / "repro")
    assert got.first_bad == "quantize_per_tensor_1" and got.owner == "exporter", got.why
    assert "scale" in got.why
    ran = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path / "repro", check=True,
                         capture_output=True, text=True, timeout=120)
    lines = ran.stdout.splitlines()  # the graph itself is wrong: both levels show it
    assert len(lines) == 2 and all("quantize_per_tensor_1 max" in x for x in lines), ran.stdout
    assert all(int(x.split(" max ")[1].split()[0]) > 1 for x in lines)


@pytest.mark.process
def test_a_rounding_mode_change_is_named_and_blamed(cnn: dict[str, Any]) -> None:
    """Half a step subtracted before the Q node: a floor instead of round-to-nearest."""
    import onnx
    from onnx import helper, numpy_helper

    from parity_gate.engine import qdq

    model = onnx.ModelProto()
    model.CopyFrom(cnn["model"])
    node = _node(model, "quantize_per_tensor_1")
    half = qdq.constants(model)[node.input[1]] * np.float32(0.5)
    model.graph.initializer.append(numpy_helper.from_array(half.astype(np.float32), "half"))
    model.graph.node.insert(list(model.graph.node).index(node),
                            helper.make_node("Sub", [node.input[0], "half"], ["floored"]))
    node.input[0] = "floored"
    got = _judge(cnn, model)
    assert got.first_bad == "quantize_per_tensor_1" and got.owner == "exporter", got.why
    bad = next(n for n in got.nodes if n.name == "quantize_per_tensor_1")
    assert bad.verdict == "rounding_mode"


def _vnni() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True
    return any(f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))


@pytest.mark.process
@pytest.mark.skipif(_vnni(), reason="the u8s8 int16 saturation is an x86 CPU without VNNI's")
def test_full_range_weights_saturate_onnxruntimes_u8s8_kernel() -> None:
    """Not planted: ONNX Runtime's uint8 x int8 convolution on AVX2 adds products in pairs
    into int16 and saturates; the graph run op by op agrees with eager."""
    got = _judge(_cnn_twin(reduce_range=False))
    assert got.first_bad == "quantize_per_tensor_1" and got.owner == "onnxruntime", got.why
    node = next(n for n in got.nodes if n.name == got.first_bad)
    assert node.literal_steps == 0 and (node.max_steps or 0) > 1


# ------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def quant_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    from parity_gate.cli import main

    folder = tmp_path_factory.mktemp("quantized")
    (folder / "quant_models.py").write_text((DATA / "quant_models.py").read_text())
    (folder / "parity.yml").write_text((DATA / "parity.yml").read_text())
    import torch  # a labelled slice: the float CNN's own labels on random images

    sys.path.insert(0, str(DATA))
    try:
        import quant_models
        x = np.random.default_rng(3).standard_normal((256, 3, 8, 8), dtype=np.float32)
        with torch.no_grad():
            labels = quant_models.cnn().eval()(torch.from_numpy(x)).argmax(-1).numpy()
    finally:
        sys.path.remove(str(DATA))
    np.savez(folder / "slice.npz", x=x, labels=labels)
    out = folder / "out"
    code = main(["run", str(folder / "parity.yml"), "--out", str(out), "--no-cache", "--quiet"])
    return code, json.loads((out / "results.json").read_text()), out


def _case(doc: dict[str, Any], case_id: str) -> dict[str, Any]:
    return next(c for c in doc["cases"] if c["id"] == case_id)


@pytest.mark.process
@pytest.mark.slow
def test_both_flows_end_to_end_with_their_reports(
        quant_run: tuple[int, dict[str, Any], Path]) -> None:
    code, doc, out = quant_run
    pt2e = _case(doc, "cnn/float32/img@quant=pt2e/b8/cpu")
    assert pt2e["outcome"] == "pass", pt2e["reason"]
    assert pt2e["quantized"]["outputs"][0]["histogram"]
    runtime = _case(doc, "cnn_ort/float32/img@quant=runtime/b8/cpu")
    assert runtime["outcome"] == "pass", runtime["reason"]
    q = runtime["quantized"]
    assert q["outputs"][0]["sqnr_db"] > 20 and len(q["nodes"]) >= 3
    block = _case(doc, "block/float32/seq@quant=pt2e/b4/cpu")  # the transformer block
    assert block["outcome"] == "pass", block["reason"]
    assert any("in float between Q/DQ pairs" in h for h in block["quantized"]["hazards"])
    summary = (out / "summary.md").read_text().replace("\\_", "_")
    assert "Quantized" in summary and "quantize_per_tensor" in summary
    assert "Quantized" in (out / "report.html").read_text()
    task = _case(doc, "cnn_ort/float32/slice@task@quant=runtime/b128/cpu")
    assert task["outcome"] == "pass" and task["task"]["eager"] == 100.0, task["reason"]
    assert task["task"]["onnx"] < 100.0  # quantization error, within the budget
    assert task["task"]["samples"] == 256
    full = _case(doc, "cnn_full/float32/img@quant=pt2e/b8/cpu")["quantized"]
    if _vnni():
        assert code == 0
        return
    assert code == 1 and full["first_bad"] == "quantize_per_tensor_1"
    assert full["owner"] == "onnxruntime" and Path(full["repro"]).parent == out / "artifacts"
    ran = subprocess.run([sys.executable, "repro.py"], cwd=full["repro"], check=True,
                         capture_output=True, text=True, timeout=120)
    assert "ORT_DISABLE_ALL: quantize_per_tensor_1 max 0 step(s)" in ran.stdout, ran.stdout
    assert "repro folder of `quantize_per_tensor_1`" in summary


# ------------------------------------------------------------------- the runtime flow


@pytest.fixture(scope="module")
def float_cnn() -> dict[str, Any]:
    """The test CNN's float export and eager outputs, for ONNX Runtime's quantizer."""
    import torch

    from parity_gate.engine.exporting import export_module
    from parity_gate.manifest.models import ExportSettings, InputSpec

    sys.path.insert(0, str(DATA))
    try:
        import quant_models
        module = quant_models.cnn().eval()
    finally:
        sys.path.remove(str(DATA))
    rng = np.random.default_rng(1)
    calibration = [{"x": rng.standard_normal((8, 3, 8, 8), dtype=np.float32)} for _ in range(4)]
    x = rng.standard_normal((8, 3, 8, 8), dtype=np.float32)
    exported = export_module(module, {"x": torch.from_numpy(x)}, [InputSpec(name="x")],
                             ["logits"], ExportSettings())
    with torch.no_grad():
        out = [module(torch.from_numpy(x)).numpy()]
    return {"model": exported.model, "calibration": calibration, "feeds": {"x": x}, "out": out}


def _runtime(cnn: dict[str, Any], calibration: list[dict[str, np.ndarray]],
             min_sqnr_db: float = 20.0) -> Any:
    import onnx

    from parity_gate.engine import qdq
    from parity_gate.engine.quantize import judge_runtime, run_values

    float_model = onnx.load_from_string(cnn["model"])
    qdq_model = onnx.load_from_string(qdq.ort_quantize(cnn["model"], calibration))
    grids = qdq.q_params(qdq_model)
    known = {v for n in float_model.graph.node for v in n.output} | {"x"}
    q_out, q_values = run_values(qdq.with_outputs(qdq_model, list(grids)), "cpu", {},
                                 cnn["feeds"])
    _, f_values = run_values(qdq.with_outputs(float_model, [
        n.input[0] for n, _ in grids.values() if n.input[0] in known]), "cpu", {}, cnn["feeds"])
    return judge_runtime(float_model, qdq_model, cnn["out"], ["logits"], q_out[:1], f_values,
                         q_values, min_sqnr_db)


@pytest.mark.process
def test_runtime_flow_reports_sqnr_per_output_and_per_layer(float_cnn: dict[str, Any]) -> None:
    got = _runtime(float_cnn, float_cnn["calibration"])
    assert got.outputs[0].verdict == "sqnr_ok" and 20 < got.outputs[0].sqnr_db < 60
    layers = {n.op for n in got.nodes}
    assert "Relu" in layers and all(n.sqnr_db is not None for n in got.nodes)
    assert "worst layer" in got.summary and not got.hazards
    strict = _runtime(float_cnn, float_cnn["calibration"], min_sqnr_db=60)
    assert strict.outputs[0].verdict == "sqnr_low"


@pytest.mark.process
def test_a_calibration_set_that_misses_the_inputs_is_a_hazard(
        float_cnn: dict[str, Any]) -> None:
    narrow = [{"x": c["x"] * np.float32(0.05)} for c in float_cnn["calibration"]]
    got = _runtime(float_cnn, narrow)
    assert any("calibration set does not cover" in h for h in got.hazards), got.hazards
    assert got.outputs[0].sqnr_db < _runtime(float_cnn, float_cnn["calibration"]).outputs[
        0].sqnr_db


# ------------------------------------------------------------------- the manifest


def test_quantize_plans_float32_cases_and_checks_its_calibration_set(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from parity_gate.cli import main
    from parity_gate.manifest.load import load_manifest
    from parity_gate.manifest.models import resolve_settings
    from parity_gate.plan.cases import all_case_keys

    (tmp_path / "quant_models.py").write_text((DATA / "quant_models.py").read_text())
    text = (DATA / "parity.yml").read_text()
    path = tmp_path / "parity.yml"
    path.write_text(text.replace("dtypes: [float32]", "").replace(
        "batch_sizes: [4]", "batch_sizes: [4]\n  dtypes: [float32, float16]"))
    manifest = load_manifest(path)
    module = manifest.modules[0]
    ids = [k.id for k in all_case_keys(manifest, module, resolve_settings(manifest, module))]
    assert ids == ["cnn/float32/img/b4/cpu", "cnn/float32/img@quant=pt2e/b8/cpu",
                   "cnn/float16/img/b4/cpu"]
    runtime = manifest.modules[1]  # with a task: its metric on the QDQ graph too
    assert "cnn_ort/float32/slice@task@quant=runtime/b128/cpu" in [
        k.id for k in all_case_keys(manifest, runtime, resolve_settings(manifest, runtime))]
    path.write_text(text.replace("calibration: calib}", "calibration: calibb}", 1))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "quantize.calibration: unknown fixture set 'calibb'" in err and "calib" in err


@pytest.mark.process
def test_a_moved_per_channel_axis_is_a_hazard(cnn: dict[str, Any]) -> None:
    import onnx

    from parity_gate.engine import qdq

    assert qdq.weight_axes(cnn["program"], cnn["model"]) == []
    model = onnx.ModelProto()
    model.CopyFrom(cnn["model"])
    node = _node(model, "dequantize_per_channel")
    kept = [a for a in node.attribute if a.name != "axis"]
    del node.attribute[:]
    node.attribute.extend([*kept, onnx.helper.make_attribute("axis", 1)])
    found = qdq.weight_axes(cnn["program"], model)
    assert found and "axis 1 in ONNX, 0 in eager" in found[0], found


@pytest.mark.process
def test_a_grid_onnx_cannot_store_is_the_quantizers_before_export() -> None:
    """A zero point of 300 on a uint8 grid: torch computes with it (clamping), the exporter
    would fail on it; the gate names the node and the quantizer before exporting."""
    import torch

    from parity_gate.engine import qdq

    sys.path.insert(0, str(DATA))
    try:
        import quant_models
        module = quant_models.cnn().eval()
    finally:
        sys.path.remove(str(DATA))
    x = {"x": torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))}
    converted = qdq.pt2e_convert(torch, module, x, [x], {"x": {0: torch.export.Dim("batch")}})
    assert qdq.unrepresentable(torch, converted) == []
    node = next(n for n in converted.graph.nodes if n.op == "call_function"
                and getattr(n.target, "__name__", "").startswith("quantize_per_tensor")
                and n.args[0].op != "placeholder")
    node.args = (*node.args[:2], 300, *node.args[3:])
    found = qdq.unrepresentable(torch, converted)
    assert found == [f"{node.name}: a zero point outside [0, 255]"], found
