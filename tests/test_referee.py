"""The float64 referee excuses no defect (issue 34), on real modules through the real gate.

A float64 run may excuse a low-precision mismatch only where it computes the same
function: where an intermediate overflows in float32 and not in float64, it
abstains and names the op; and a discrete output (rounded, compared, an index)
is never excused by its distance to float64: a whole unit apart is another
branch taken. Where float64 shows each differing element within one rounding of
a boundary, that is a tie, which fails unless the output allows ties. On the
gate before this, `overflow` and `trunc` passed ("the eager low-precision
reference is the less accurate side").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from parity_gate.cli import main
from parity_gate.engine.discrete import discrete_outputs

MANIFEST = Path(__file__).parent / "data" / "referee" / "parity.yml"


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("referee")
    code = main(["run", str(MANIFEST), "--out", str(out), "--quiet", "--no-localise"])
    assert code == 1
    return {f"{c['key']['module']}/{c['key']['dtype']}": c
            for c in json.loads((out / "results.json").read_text())["cases"]}


@pytest.mark.process
def test_float64_abstains_where_float32_overflows_and_float64_does_not(
        cases: dict[str, dict[str, Any]]) -> None:
    case = cases["overflow/float32"]
    assert case["outcome"] == "mismatch", case["reason"]  # before: pass, "onnx is closer"
    assert case["comparisons"][0]["verdict"] == "region"  # its normal diagnosis stands
    ref = case["reference"]
    assert ref["ruling"] == "out_of_range"
    assert ref["error"] == ("float32 overflows to inf at models.py:15 (aten.mul) where "
                            "float64 does not: the float64 check cannot referee this case")


@pytest.mark.process
def test_a_model_with_no_overflow_is_untouched(cases: dict[str, dict[str, Any]]) -> None:
    for dtype in ("float32", "float16"):
        assert cases[f"scaled/{dtype}"]["outcome"] == "pass"


@pytest.mark.process
def test_a_discrete_output_is_never_excused_by_float64(
        cases: dict[str, dict[str, Any]]) -> None:
    case = cases["trunc/float16"]
    assert case["outcome"] == "mismatch", case["reason"]  # before: pass, "onnx matches"
    ref = case["reference"]
    assert ref["ruling"] == "discrete"
    assert ref["error"].startswith("output0: tie at a rounding boundary: the ")
    assert "within one float16 rounding of a boundary" in ref["error"]
    assert "(0, 5), (0, 7)" in ref["error"]  # the elements are named
    assert "does not allow ties on output0 (ties: true)" in ref["error"]


@pytest.mark.process
def test_a_tie_passes_where_the_output_allows_ties(cases: dict[str, dict[str, Any]]) -> None:
    case = cases["trunc_ties/float16"]
    assert case["outcome"] == "pass", case["reason"]
    assert case["reference"]["ruling"] == "tie"
    assert case["reason"].startswith("float16 eager and ONNX differ, but output0: tie at a "
                                     "rounding boundary")
    assert case["reason"].endswith("ties: true allows it")


@pytest.mark.process
def test_a_real_step_defect_is_no_tie(cases: dict[str, dict[str, Any]]) -> None:
    case = cases["stepped/float16"]
    assert case["outcome"] == "mismatch"
    ref = case["reference"]
    assert ref["ruling"] == "discrete"
    assert "not all within one float16 rounding of a boundary" in ref["error"]


def _graph(*nodes: Any, out: str, inputs: list[Any] | None = None) -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [4])
    return helper.make_model(helper.make_graph(list(nodes), "g", inputs or [x], [y]))


def test_discrete_outputs_follow_the_producer_chain() -> None:
    trunc = _graph(helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Floor", ["a"], ["f"]),
                   helper.make_node("Sign", ["x"], ["s"]),
                   helper.make_node("Mul", ["f", "s"], ["y"]), out="y")
    assert discrete_outputs(trunc) == [True]
    half = _graph(helper.make_node("Floor", ["x"], ["f"]),
                  helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                      "c", TensorProto.FLOAT, [], [0.5])),
                  helper.make_node("Mul", ["f", "c"], ["y"]), out="y")
    assert discrete_outputs(half) == [False]  # floor(x) * 0.5 is no longer whole
    cast = _graph(helper.make_node("ArgMax", ["x"], ["i"]),
                  helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT), out="y")
    assert discrete_outputs(cast) == [True]
    assert discrete_outputs(_graph(helper.make_node("Relu", ["x"], ["y"]), out="y")) == [False]
    onnx.checker.check_model(trunc)
