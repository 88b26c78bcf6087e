"""The GPU lane's rules, checked on the CPU (issue 53): nothing here ran on a GPU.

* float16 accumulation: an fp16 matmul whose accumulator is float16 (emulated in numpy:
  the running sum rounded to float16 after every product, the worst order) against one
  accumulated in float32 (cuBLAS's default, what eager on CUDA does), both judged against
  float64 by the real referee with and without the reduction length.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from parity_gate.compare.reference import ACCUMULATION, OutputRules, judge_against_float64
from parity_gate.engine.reductions import reduction_lengths
from parity_gate.model.comparison import Tolerance
from parity_gate.model.precision import Reference, Ruling

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
