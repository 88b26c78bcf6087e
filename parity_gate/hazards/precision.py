"""Which ops a graph computes in a narrower float than the program asked for.

Read on the graph with the onnxscript optimizer off (the optimizer folds and
fuses casts away). The same audit serves the op sweep (one op per case: the
expected width is eager's result dtype) and the module hazard check (the
expected width of each ONNX node is the dtype of the torch.export node it was
translated from). A runtime can hide a wrong graph: the CPU provider may
compute float16 ops in float32 internally while other providers do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import onnx

FLOAT_BITS: dict[int, int] = {
    onnx.TensorProto.FLOAT16: 16, onnx.TensorProto.BFLOAT16: 16,
    onnx.TensorProto.FLOAT: 32, onnx.TensorProto.DOUBLE: 64,
}
FLOAT_NAMES: dict[int, str] = {
    onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64"}
NUMPY_FLOAT_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}

# Ops whose result is exact whatever the precision they run in (they move,
# select, compare or re-sign values): running them narrow loses nothing.
EXACT_OPS = frozenset({
    "Cast", "CastLike", "Constant", "ConstantOfShape", "Identity", "Reshape", "Shape", "Size",
    "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "SplitToSequence", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Flatten", "Tile", "Pad", "Where",
    "Range", "ScatterElements", "ScatterND", "Compress", "NonZero", "TopK", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf",
    "Abs", "Neg", "Sign", "Relu", "Max", "Min", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin",
    "Trilu", "ReverseSequence", "SequenceAt", "SequenceConstruct", "DepthToSpace",
    "SpaceToDepth", "Dropout", "MaxPool", "GlobalMaxPool", "Floor", "Ceil", "Round",
})

# Ops whose output does not carry their input's values (only its shape): the
# data path from the inputs stops at them.
_SHAPE_ONLY_OPS = frozenset({"Shape", "Size", "EyeLike", "ConstantOfShape", "RandomNormalLike",
                             "RandomUniformLike", "Bernoulli"})


@dataclass(frozen=True)
class PrecisionFinding:
    """A node computing in a narrower float than the program's result: what, where, how wide."""

    op_type: str
    node: str
    computed_in: str
    expected: str

    def describe(self) -> str:
        return (f"{self.op_type} ({self.node}) computes in {self.computed_in} although eager "
                f"returns {self.expected}")


def _refs(node: onnx.NodeProto) -> list[str]:
    """Every value a node reads, including outer-scope values its subgraphs read."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for g in graphs:
            for inner in g.node:
                names += _refs(inner)
    return names


def ancestors(graph: onnx.GraphProto, outputs: Iterable[str]) -> tuple[set[int], set[str]]:
    """Indices of the nodes that `outputs` depend on, and every value name they touch."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output}
    nodes: set[int] = set()
    seen: set[str] = set()
    stack = list(outputs)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        i = producer.get(name)
        if i is not None and i not in nodes:
            nodes.add(i)
            stack.extend(_refs(graph.node[i]))
    return nodes, seen


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value shape inference can tell (non-strict: never raises)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        inferred = model
    g = inferred.graph
    types = {t.name: t.data_type for t in g.initializer}
    for v in [*g.input, *g.value_info, *g.output]:
        if v.type.HasField("tensor_type"):
            types[v.name] = v.type.tensor_type.elem_type
    for node in g.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].HasField("t"):
            types.setdefault(node.output[0], node.attribute[0].t.data_type)
    return types


def data_path(graph: onnx.GraphProto, outputs: list[str]) -> set[int]:
    """Nodes between the graph's inputs and `outputs` along which input values flow.

    Index arithmetic (sizes, coordinates of a resize, an identity mask) and
    constant subgraphs are off this path: their precision is not the op's.
    """
    nodes, _ = ancestors(graph, outputs)
    live = {v.name for v in graph.input}
    path: set[int] = set()
    for i, node in enumerate(graph.node):  # nodes are topologically sorted
        if i not in nodes or node.op_type in _SHAPE_ONLY_OPS:
            continue
        if any(n in live for n in _refs(node)):
            path.add(i)
            live.update(o for o in node.output if o)
    return path


def _narrow(node: onnx.NodeProto, types: Mapping[str, int], bits: int) -> int | None:
    """The first float input type narrower than `bits`, if any."""
    return next((types[n] for n in node.input
                 if n and types.get(n) in FLOAT_BITS and FLOAT_BITS[types[n]] < bits), None)


def audit(model: onnx.ModelProto, types: Mapping[str, int], outputs: list[str],
          expected_bits: int) -> list[PrecisionFinding]:
    """Op sweep: arithmetic nodes on one case's data path that read floats narrower than
    eager's float output (`expected_bits`)."""
    if expected_bits <= 16:
        return []
    graph = model.graph
    expected = next(n for n, b in NUMPY_FLOAT_BITS.items() if b == expected_bits)
    found: list[PrecisionFinding] = []
    for i in sorted(data_path(graph, outputs)):
        node = graph.node[i]
        if node.op_type in EXACT_OPS:
            continue
        narrow = _narrow(node, types, expected_bits)
        if narrow is not None:
            found.append(PrecisionFinding(node.op_type, node.name or f"#{i}",
                                          FLOAT_NAMES[narrow], expected))
    return found


def audit_nodes(model: onnx.ModelProto, types: Mapping[str, int],
                expected: Mapping[int, str]) -> list[tuple[int, PrecisionFinding]]:
    """Modules: each arithmetic node (by index) against the dtype its program node asked
    for (`expected`: node index → "float32", ...), when that is wider than what it reads."""
    found: list[tuple[int, PrecisionFinding]] = []
    for i, node in enumerate(model.graph.node):
        want = expected.get(i)
        if want is None or node.op_type in EXACT_OPS or NUMPY_FLOAT_BITS.get(want, 0) <= 16:
            continue
        narrow = _narrow(node, types, NUMPY_FLOAT_BITS[want])
        if narrow is not None:
            found.append((i, PrecisionFinding(node.op_type, node.name or f"#{i}",
                                              FLOAT_NAMES[narrow], want)))
    return found
