"""Which outputs of an exported graph are discrete: rounded, compared, or an index.

A discrete value that differs by a whole unit has taken another branch; it is
never "closer to float64 by rounding", so the float64 referee must not excuse it.
Read from the ONNX graph (what ONNX Runtime computed), walking back from each
output: it is discrete when its producer makes discrete values (a rounding, a
comparison, an index, a cast to an integer) or only moves, selects or combines
discrete values exactly (a reshape, a gather, a sign times a floor).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["discrete_outputs"]

# Producers whose every output value is discrete (integral or boolean), whatever they read.
MAKES_DISCRETE = frozenset({
    "Floor", "Ceil", "Round", "Sign", "ArgMax", "ArgMin", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf", "NonZero",
    "Shape", "Size", "OneHot", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "BitwiseNot",
})
# Producers that keep values discrete when the data inputs at these positions are (None:
# all inputs): they move, select or combine integers exactly.
KEEPS_DISCRETE: dict[str, tuple[int, ...] | None] = {
    **{op: (0,) for op in ("Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                           "Flatten", "Slice", "Gather", "GatherElements", "GatherND",
                           "Expand", "Tile", "Split", "Neg", "Abs", "Relu", "ReduceMax",
                           "ReduceMin", "ReduceSum", "CumSum", "Cast", "CastLike",
                           "DepthToSpace", "SpaceToDepth", "Compress", "ReverseSequence")},
    **{op: None for op in ("Concat", "Add", "Sub", "Mul", "Max", "Min", "Sum")},
    "Where": (1, 2),
    "TopK": (0,),
}
_INTEGER = frozenset({2, 3, 4, 5, 6, 7, 9, 12, 13})  # onnx TensorProto (u)int*, bool


def _constant_discrete(tensor: Any) -> bool:
    """An integer constant, or a small float one holding only whole numbers."""
    from onnx import numpy_helper

    if tensor.data_type in _INTEGER:
        return True
    if tensor.data_location == 1 or np.prod(tensor.dims, dtype=np.int64) > 4096:
        return False  # external or large weights: not worth reading, not discrete
    try:
        a = numpy_helper.to_array(tensor).astype(np.float64)
    except Exception:  # unreadable: call it continuous (never excused less)
        return False
    return bool(np.all(np.isfinite(a) & (a == np.floor(a))))


def discrete_outputs(proto: Any) -> list[bool]:
    """Per graph output (in order), whether its values are discrete (one pass over the
    nodes, which a valid graph lists in topological order)."""
    graph = proto.graph
    known = {v.name: v.type.tensor_type.elem_type in _INTEGER for v in graph.input}
    known.update({t.name: _constant_discrete(t) for t in graph.initializer})
    known[""] = True  # an omitted optional input
    for node in graph.node:
        for k, out in enumerate(node.output):
            known[out] = _node(node, k, known)
    return [known.get(o.name, False) for o in graph.output]


def _node(node: Any, k: int, known: dict[str, bool]) -> bool:
    """Whether output `k` of `node` is discrete, given its inputs' answers."""
    op = node.op_type
    if op == "Constant":
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        return value is not None and _constant_discrete(value)
    if op in MAKES_DISCRETE or (op == "TopK" and k == 1):  # TopK's indices
        return True
    if op == "Cast" and any(a.name == "to" and a.i in _INTEGER for a in node.attribute):
        return True
    if op not in KEEPS_DISCRETE:
        return False
    at = KEEPS_DISCRETE[op]
    inputs = list(node.input) if at is None else [node.input[i] for i in at
                                                   if i < len(node.input)]
    return bool(inputs) and all(known.get(i, False) for i in inputs)
