"""The GPU lane's rules, checked on the CPU (issue 53): nothing here ran on a GPU.

* float16 accumulation: an fp16 matmul whose accumulator is float16 (emulated in numpy:
  the running sum rounded to float16 after every product, the worst order) against one
  accumulated in float32 (cuBLAS's default, what eager on CUDA does), both judged against
  float64 by the real referee with and without the reduction length;
* copies around nodes that left the GPU: a real ONNX Runtime profile and optimized graph
  recorded on the CPU, and a graph built with the Memcpy nodes ONNX Runtime inserts, whose
  profile is a real CPU profile of the same graph with Identity in the Memcpy nodes' place
  (their op and provider then set as a CUDA session writes them);
* TensorRT's engine cache options and the first run kept out of the latency samples;
* the IOBinding the ONNX side is timed through, on the CPU device.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from parity_gate.compare.reference import ACCUMULATION, OutputRules, judge_against_float64
from parity_gate.engine import performance, placement, runtime
from parity_gate.engine.reductions import reduction_lengths
from parity_gate.gate.performance import flags
from parity_gate.manifest.models import PerformanceSettings
from parity_gate.model.comparison import Tolerance
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.performance import Performance, PerformanceLimits
from parity_gate.model.precision import Reference, Ruling
from parity_gate.model.results import CaseResult
from parity_gate.plan.providers import provider_chain

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
FP16 = Tolerance(atol=1e-2, rtol=1e-2)

# ------------------------------------------------------------ float16 accumulation


def _half_accumulated(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b with a float16 accumulator: each product is exact in float32 (two float16
    mantissas), the running sum is rounded to float16 after every add."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float16)
    for k in range(a.shape[1]):
        acc = (acc.astype(np.float32) + np.outer(a[:, k], b[k]).astype(np.float32)
               ).astype(np.float16)
    return acc


def _matmul(k: int, positive: bool = False) -> tuple[np.ndarray, ...]:
    """float16 operands, float64 truth, eager (float32 accumulator), ONNX (float16 one)."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((32, k)).astype(np.float16)
    a = np.abs(a) if positive else a  # after a ReLU: partial sums grow linearly
    b = (rng.standard_normal((k, 32)) * 0.05).astype(np.float16)
    truth = a.astype(np.float64) @ b.astype(np.float64)
    eager = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    return truth, eager, _half_accumulated(a, b)


def _judge(eager: np.ndarray, onnx_out: np.ndarray, truth: np.ndarray,
           reductions: list[int | None]) -> Reference:
    return judge_against_float64([eager], [onnx_out], [truth],
                                 OutputRules(["y"], [FP16], [False], (), reductions), [0])


@pytest.mark.parametrize("positive", [False, True])
def test_a_float16_accumulator_is_no_defect_for_its_reduction_length(positive: bool) -> None:
    truth, eager, onnx_out = _matmul(1024, positive)
    before = _judge(eager, onnx_out, truth, [])
    assert before.ruling is Ruling.ONNX_WORSE  # the false alarm the rule removes
    assert (before.onnx_error or 0) > 4 * (before.eager_error or 0)
    judged = _judge(eager, onnx_out, truth, [1024])
    assert judged.ruling is Ruling.ONNX_ACCUMULATION and not judged.ruling.defect
    assert judged.reduction == 1024 and 0 < (judged.accumulation or 0) <= 1
    said = judged.describe()
    assert "eager is closer to float64" in said and "K=1024 reduction" in said


def test_a_defect_beyond_the_accumulation_bound_stands() -> None:
    truth, eager, onnx_out = _matmul(1024)
    wrong = (onnx_out.astype(np.float32) * 1.1).astype(np.float16)  # a 10% scale error
    judged = _judge(eager, wrong, truth, [1024])
    assert judged.ruling is Ruling.ONNX_WORSE and (judged.accumulation or 0) > 1
    assert "x the float16 accumulation bound for its K=1024 reduction" in judged.describe()
    short = _judge(eager, onnx_out, truth, [16])  # the same error is far too much for K=16
    assert short.ruling is Ruling.ONNX_WORSE


def test_where_eager_accumulates_in_float16_eager_is_the_less_accurate_side() -> None:
    truth, single, half = _matmul(1024)
    judged = _judge(half, single, truth, [1024])  # eager fp16-accumulated, ONNX fp32
    assert not judged.ruling.defect and judged.ruling is not Ruling.ONNX_ACCUMULATION
    assert (judged.onnx_error or 0) < (judged.eager_error or 0)


def test_the_rule_is_for_float16_on_the_gpu_providers_only() -> None:
    assert ACCUMULATION.applies("float16", "cuda") and ACCUMULATION.applies("float16",
                                                                            "tensorrt")
    assert not ACCUMULATION.applies("float16", "cpu")
    assert not ACCUMULATION.applies("bfloat16", "cuda")
    assert not ACCUMULATION.applies("float32", "cuda")


def _vi(name: str, dims: list[Any], elem: int = TensorProto.FLOAT) -> Any:
    return helper.make_tensor_value_info(name, elem, dims)


def test_reduction_lengths_follow_matmul_gemm_and_conv_to_each_output() -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 16], np.zeros(64 * 16))
    cw = helper.make_tensor("cw", TensorProto.FLOAT, [8, 3, 3, 3], np.zeros(8 * 27))
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["out_mm"]),
        helper.make_node("Conv", ["img", "cw"], ["out_conv"]),
        helper.make_node("Gemm", ["g", "m"], ["out_gemm"], transA=1),  # g: [128, 2]
        helper.make_node("MatMul", ["s", "w"], ["out_sym"]),  # s: [2, n]: length unknown
        helper.make_node("Neg", ["x"], ["out_none"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [_vi("x", [2, 64]), _vi("img", [1, 3, 8, 8]), _vi("g", [128, 2]), _vi("s", [2, "n"])],
        [_vi(n, []) for n in ("out_mm", "out_conv", "out_gemm", "out_sym", "out_none")],
        [w, cw])
    # the Gemm reads m (a 64-long reduction) and sums 128 products itself: the longer
    assert reduction_lengths(helper.make_model(graph)) == [64, 27, 128, None, None]


# ------------------------------------------------------------ copies around fallback nodes


def _fallback_graph(copy: tuple[str, str]) -> onnx.ModelProto:
    """relu (on the GPU) → copy to host → nz (NonZero, a CPU node) → copy back → cast.
    `copy`: the op types in the two copies' places."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node(copy[0], ["r"], ["r_host"], name="Memcpy"),
             helper.make_node("NonZero", ["r_host"], ["idx"], name="nz"),
             helper.make_node(copy[1], ["idx"], ["idx_dev"], name="Memcpy_token_1"),
             helper.make_node("Cast", ["idx_dev"], ["y"], name="cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "fallback", [_vi("x", [4, 256])],
                              [_vi("y", [2, "n"])], value_info=[_vi("r", [4, 256])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _cpu_profile(model: onnx.ModelProto, folder: Path, runs: int = 2) -> list[dict[str, Any]]:
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(folder / "p")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep Identity
    session = ort.InferenceSession(model.SerializeToString(), so, providers=[CPU])
    x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    for _ in range(runs):
        session.run(None, {"x": x})
    return list(json.loads(Path(session.end_profiling()).read_text()))


def _as_cuda(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A real CPU profile of the Identity stand-in graph, placed as a CUDA session places
    it: the copies are CUDA's Memcpy kernels, NonZero stays on the CPU, the rest on CUDA."""
    ops = {"Memcpy": "MemcpyToHost", "Memcpy_token_1": "MemcpyFromHost"}
    for e in events:
        args = e.get("args") or {}
        node = str(e.get("name", "")).removesuffix("_kernel_time")
        if e.get("cat") == "Node" and "provider" in args:
            args["op_name"] = ops.get(node, args["op_name"])
            args["provider"] = CPU if node == "nz" else CUDA
    return events


def test_each_copy_is_named_with_its_size_time_and_the_node_it_serves(tmp_path: Path) -> None:
    events = _as_cuda(_cpu_profile(_fallback_graph(("Identity", "Identity")), tmp_path))
    graph = _fallback_graph(("MemcpyToHost", "MemcpyFromHost"))
    p = placement.from_profile(events, CUDA, graph)
    assert [n.name for n in p.fallback] == ["nz"] and len(p.memcpy) == 2
    down, up = p.copies
    assert (down.name, down.op, down.tensor, down.nodes) == ("Memcpy", "MemcpyToHost", "r",
                                                             ["nz"])
    assert (up.op, up.tensor, up.nodes) == ("MemcpyFromHost", "idx", ["nz"])
    assert down.bytes == 4 * 256 * 4  # the profile's output size: float32 [4, 256]
    assert up.bytes is not None and up.bytes % 16 == 0  # int64 [2, n]: n from this run
    durs = [float(e["dur"]) for e in events if e.get("name") == "Memcpy_kernel_time"]
    assert len(durs) == 2 and down.time_us == pytest.approx(sum(durs) / 2)
    said = p.describe()
    assert "1 fell back from CUDA: nz (NonZero; copies 4.0KiB to host in " in said
    assert "2 Memcpy node(s) inserted (" in said and "per run" in said
    perf = Performance(PerformanceLimits(max_fallback_nodes=0, memcpy="warn", gpu=True),
                       placement=p)
    case = CaseResult(CaseKey("m", "float16", "x", 1, "cuda"), Outcome.PASS, performance=perf)
    fallback, memcpy = flags(case)
    assert "nz (NonZero on CPU; copy 4.0KiB to host in" in fallback.message
    assert "Memcpy (MemcpyToHost: 4.0KiB to host in" in memcpy.message


def test_the_graph_alone_gives_the_static_sizes_and_a_profile_alone_the_costs(
        tmp_path: Path) -> None:
    links = placement.copies_in(_fallback_graph(("MemcpyToHost", "MemcpyFromHost")))
    assert links["Memcpy"].bytes == 4096 and links["Memcpy"].nodes == ["nz"]
    assert links["Memcpy_token_1"].bytes is None  # [?]: not static in the graph
    events = _as_cuda(_cpu_profile(_fallback_graph(("Identity", "Identity")), tmp_path, 1))
    bare = placement.from_profile(events, CUDA)
    first = bare.copies[0]
    assert (first.name, first.tensor, first.nodes, first.bytes) == ("Memcpy", "", [], 4096)
    assert first.time_us is not None


def test_the_profiled_session_writes_the_graph_the_parser_reads(tmp_path: Path) -> None:
    """The Measurer's own path on a real CPU session with the optimized graph written (on
    CUDA it is on by default): a clean graph, no copies, nothing failed."""
    model = _fallback_graph(("Identity", "Identity")).SerializeToString()
    path = tmp_path / "opt.onnx"
    runtime.create_session(model, "cpu", {}, optimized_path=str(path))
    assert placement.copies_in(onnx.load(str(path), load_external_data=False)) == {}
    m = performance.Measurer(model, "cpu", {}, PerformanceSettings(budget_s=0.05), 0)
    assert not m.graph  # off on the CPU by default
    m.graph = True
    session = runtime.create_session(model, "cpu", {})
    feeds = {"x": np.ones((4, 256), np.float32)}
    perf = m.measure(session, lambda: None, feeds, "m/float32/x/b4/cpu")
    assert perf.errors == [] and perf.placement is not None
    # the optimizer removed the two Identity nodes
    assert perf.placement.by_provider == {CPU: 3} and perf.placement.copies == []
    assert perf.latency is not None and perf.latency.io_binding


# ------------------------------------------------------------ TensorRT's engine cache


def test_tensorrt_sessions_get_the_engine_and_timing_caches() -> None:
    (trt, *_) = provider_chain("tensorrt", {}, "/cache/tensorrt")
    assert trt == ("TensorrtExecutionProvider", {
        "trt_engine_cache_enable": True, "trt_engine_cache_path": "/cache/tensorrt",
        "trt_timing_cache_enable": True, "trt_timing_cache_path": "/cache/tensorrt"})
    (own, *_) = provider_chain("tensorrt", {"trt_engine_cache_path": "/mine"}, "/c")
    assert own[1]["trt_engine_cache_path"] == "/mine"  # the manifest's option wins
    assert provider_chain("cuda", {}, "/c")[0] == ("CUDAExecutionProvider", {"use_tf32": 0})


def test_the_first_run_is_timed_apart_and_tells_an_engine_build_from_a_load(
        tmp_path: Path) -> None:
    runtime.set_engine_cache(tmp_path / "tensorrt")
    try:
        session = runtime.create_session(
            _fallback_graph(("Identity", "Identity")).SerializeToString(), "cpu", {})
        feeds = {"x": np.ones((4, 256), np.float32)}
        cpu = performance.first_run(session, feeds, 0.25, "cpu", set())
        assert cpu is not None and cpu.session_ms == 250 and cpu.first_run_ms > 0
        assert cpu.engine_cache == "" and "not in the latency" in cpu.describe()
        # TensorRT's bookkeeping, on the same (CPU) session: a file the run added to the
        # cache is an engine built, none added is one loaded
        before = performance.cache_files("tensorrt")
        (runtime.engine_cache() / "TensorrtExecutionProvider_abc.engine").write_bytes(b"x")
        built = performance.first_run(session, feeds, 0.0, "tensorrt", before)
        assert built is not None and built.engine_cache == "built"
        assert built.cache_path == str(tmp_path / "tensorrt")
        again = performance.first_run(session, feeds, 0.0, "tensorrt",
                                      performance.cache_files("tensorrt"))
        assert again is not None and again.engine_cache == "loaded"
        assert performance.first_run(session, {"nope": feeds["x"]}, 0.0, "cpu", set()) is None
    finally:
        runtime.set_engine_cache(None)


def test_a_slow_first_call_never_enters_the_latency_samples() -> None:
    """An engine build on the first call (a 0.3 s sleep here, on a real CPU session) is
    not in any sample: gated or not, the figure is the warm call's."""
    session = runtime.create_session(
        _fallback_graph(("Identity", "Identity")).SerializeToString(), "cpu", {})
    call, why = performance.bound_call(session, {"x": np.ones((4, 256), np.float32)}, "cpu",
                                       {})
    assert why == ""
    calls = [0]

    def building() -> Any:
        calls[0] += 1
        if calls[0] == 1:
            time.sleep(0.3)
        return call()

    building.io_binding = True  # type: ignore[attr-defined]
    for limit in (None, 1e6):  # ungated (the warm-up pair may be the figure) and gated
        calls[0] = 0
        lat = performance.latency(lambda: None, building, budget_s=0.05, limit=limit)
        assert lat.onnx_ms < 100 and lat.io_binding, lat


# ------------------------------------------------------------ IOBinding


def test_the_timed_call_runs_through_an_iobinding_with_session_run_s_outputs() -> None:
    model = _fallback_graph(("Identity", "Identity")).SerializeToString()
    session = runtime.create_session(model, "cpu", {})
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)}
    call, why = performance.bound_call(session, feeds, "cpu", {})
    assert isinstance(call, performance.BoundCall) and why == ""
    call()
    (expected,) = session.run(None, feeds)
    (got,) = call.outputs()
    np.testing.assert_array_equal(got, expected)
    assert call.binding.get_outputs()[0].device_name() == "cpu"
    assert performance.device_of("cuda") == performance.device_of("tensorrt") == "cuda"


def test_without_a_working_binding_the_copies_are_timed_and_it_says_so() -> None:
    session = runtime.create_session(
        _fallback_graph(("Identity", "Identity")).SerializeToString(), "cpu", {})
    call, why = performance.bound_call(session, {"x": np.ones((4, 256), np.float32)}, "cuda",
                                       {})  # no CUDA device here: the binding fails
    assert not isinstance(call, performance.BoundCall)
    assert why.startswith("IOBinding not used (") and "copies are timed" in why
