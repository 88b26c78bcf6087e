"""N workers share the cores: each worker's torch and ONNX Runtime get cores // N threads."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from parity_gate.engine import runtime
from parity_gate.engine.environment import usable_cores
from parity_gate.engine.pool import WorkerPool


def _model() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=9).SerializeToString()


def test_sessions_take_the_workers_share_of_the_cores() -> None:
    try:
        runtime.set_thread_budget(1)
        options = runtime.create_session(_model(), "cpu", {}).get_session_options()
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
        runtime.set_thread_budget(0)  # no budget: ONNX Runtime's own default
        assert runtime.create_session(_model(), "cpu", {}).get_session_options() \
            .intra_op_num_threads == 0
    finally:
        runtime.set_thread_budget(0)
    onnx.checker.check_model(onnx.load_from_string(_model()))


def test_the_pool_splits_the_usable_cores_between_its_workers() -> None:
    for size in (1, 2, 64):
        pool = WorkerPool(size)
        try:
            assert pool.threads == max(1, usable_cores() // size)
        finally:
            pool.close()
