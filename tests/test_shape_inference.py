"""Issue 34, item 1: ONNX's shape inference alone does not block.

An avg_pool2d with ceil_mode=True whose last window would start in the padding: torch
skips it (output 3x3 on a 5x5 input), ONNX Runtime computes the same, and ONNX's shape
inference (onnx.checker's full check) counts it (4x4). Before, the gate blocked the
correct model as invalid_model without running it; now the case runs and is compared,
and the disagreement is a warning finding naming both shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from parity_gate.cli import main
from parity_gate.engine import stages
from parity_gate.engine.stages import StageFailure
from parity_gate.model.outcomes import Outcome

MODEL = '''
import torch

class Pool(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.avg_pool2d(x, kernel_size=2, stride=2, padding=1,
                                              ceil_mode=True)

def build():
    return Pool()
'''

MANIFEST = '''
version: 1
seed: 0
python_path: [.]
defaults:
  batch_sizes: [1, 2]
  dtypes: [float32]
providers:
  cpu: {required: true}
fixtures:
  images:
    kind: random
    inputs:
      x: {shape: [batch, 2, 5, 5], distribution: normal}
modules:
  - name: pool
    factory: pool:build
    inputs:
      - name: x
        dynamic: {0: batch}
    fixtures: [images]
'''


@pytest.mark.process
def test_checker_shape_disagreement_runs_the_case_and_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "pool.py").write_text(MODEL)
    (tmp_path / "parity.yml").write_text(MANIFEST)
    out = tmp_path / "out"
    code = main(["run", str(tmp_path / "parity.yml"), "--out", str(out), "--quiet"])
    data = json.loads((out / "results.json").read_text())
    outcomes = {c["key"]["batch_size"]: c["outcome"] for c in data["cases"]}
    # before: exit 1, every case invalid_model "onnx.checker: InferenceError: ..."
    assert outcomes == {1: "pass", 2: "pass"}, [c["reason"] for c in data["cases"]]
    assert code == 0
    assert all(c["comparisons"] and c["comparisons"][0]["max_abs"] == 0
               for c in data["cases"])  # compared, and eager's values
    found = [f for f in data["findings"] if f["kind"] == "shape-inference"]
    assert len(found) == 1 and found[0]["severity"] == "warning"
    message = found[0]["message"]
    assert "[batch, 2, 3, 3] in the exported graph" in message  # torch's (and ORT's) shape
    assert "[batch, 2, 4, 4] by ONNX's shape inference" in message


def _add(out_shape: list[int], *, dup_output: bool = False) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    nodes = [helper.make_node("Add", ["x", "x"], ["y"], name="add")]
    if dup_output:  # two nodes write one value: structurally invalid
        nodes.append(helper.make_node("Neg", ["x"], ["y"], name="neg"))
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_check_returns_an_inference_disagreement_and_raises_a_structural_failure() -> None:
    assert stages.check(_add([2])) is None
    found = stages.check(_add([3]).SerializeToString())
    assert found is not None and found.values == (("y", "Add add", "[3]", "[2]"),)
    assert found.failure().outcome is Outcome.INVALID_MODEL  # the op sweep keeps the block
    with pytest.raises(StageFailure) as raised:
        stages.check(_add([2], dup_output=True))
    assert raised.value.outcome is Outcome.INVALID_MODEL
