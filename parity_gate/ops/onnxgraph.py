"""Reading a batch's ONNX graph per case: ownership, sub-models, blame, precision audit.

Cases in a batch share nothing but the graph container: case k's inputs are
named `c{k}_<arg>` and its outputs `c{k}_o<m>`, so the nodes of a case are
the ancestors of its outputs. That lets a failing load or run be split at
the ONNX level (no re-export), an error that names a node be pinned on its
case, and each case's dtype handling be read off the un-optimised graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import onnx

# Values are named `c{k}_...`: the case number is in the name.
_CASE_VALUE = re.compile(r"\bc(\d+)_\w+")
_NODE_NAMES = (
    re.compile(r"node name: ([^\s,)]+)"),
    re.compile(r"node with name '([^']+)'"),
    re.compile(r"Name:'([^']+)'"),
    re.compile(r"[Nn]ode \(([^)]+)\)"),
    re.compile(r"Node:\s*'?([\w./:-]+)"),
)


def case_input(k: int, arg: str) -> str:
    return f"c{k}_{arg}"


def case_output(k: int, m: int) -> str:
    return f"c{k}_o{m}"


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


@dataclass(frozen=True)
class Ownership:
    """Which cases (batch-local numbers) each node belongs to."""

    by_node: dict[str, frozenset[int]]

    @classmethod
    def of(cls, model: onnx.ModelProto, outputs: dict[int, list[str]]) -> Ownership:
        owners: dict[str, set[int]] = {}
        graph = model.graph
        for k, names in outputs.items():
            nodes, _ = ancestors(graph, names)
            for i in nodes:
                owners.setdefault(graph.node[i].name or f"#{i}", set()).add(k)
        return cls({n: frozenset(v) for n, v in owners.items()})

    def blame(self, message: str) -> set[int]:
        """Cases an error message points at: by node name, else by a `c{k}_` value name."""
        cases: set[int] = set()
        for pattern in _NODE_NAMES:
            for name in pattern.findall(message):
                cases |= self.by_node.get(name.strip("'\""), frozenset())
        if not cases:
            cases = {int(m) for m in _CASE_VALUE.findall(message)}
        return cases


def input_names(model: onnx.ModelProto, asked: list[str]) -> dict[str, str]:
    """Asked-for input name → the graph's, where the exporter did not keep ours.

    When a case returns an input unchanged, the exporter's output renaming
    also renames that input (`c3_o0_orig`); inputs keep their order, so
    they are matched by position when the counts agree.
    """
    actual = [v.name for v in model.graph.input]
    if len(actual) != len(asked):
        return {}
    return {a: b for a, b in zip(asked, actual, strict=True) if a != b}


def extract(model: onnx.ModelProto, outputs: list[str]) -> onnx.ModelProto:
    """The sub-model computing only `outputs`: their nodes, inputs and initializers."""
    graph = model.graph
    nodes, seen = ancestors(graph, outputs)
    wanted = set(outputs)
    sub = onnx.helper.make_graph(
        [graph.node[i] for i in sorted(nodes)],
        graph.name,
        [v for v in graph.input if v.name in seen],
        [v for v in graph.output if v.name in wanted],
        initializer=[t for t in graph.initializer if t.name in seen],
        value_info=[v for v in graph.value_info if v.name in seen],
    )
    sub.sparse_initializer.extend(t for t in graph.sparse_initializer
                                  if t.values.name in seen)
    out = onnx.helper.make_model(sub, opset_imports=list(model.opset_import),
                                 ir_version=model.ir_version)
    out.functions.extend(model.functions)
    return out


# --------------------------------------------------------------------------
# precision audit (false alarm 3: the runtime can hide a wrong graph)

_FLOAT_BITS: dict[int, int] = {
    onnx.TensorProto.FLOAT16: 16, onnx.TensorProto.BFLOAT16: 16,
    onnx.TensorProto.FLOAT: 32, onnx.TensorProto.DOUBLE: 64,
}
_FLOAT_NAMES: dict[int, str] = {
    onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64"}
NUMPY_FLOAT_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}

# Ops whose result is exact whatever the precision they run in (they move,
# select, compare or re-sign values): running them narrow loses nothing.
_EXACT_OPS = frozenset({
    "Cast", "CastLike", "Constant", "ConstantOfShape", "Identity", "Reshape", "Shape", "Size",
    "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "SplitToSequence", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Flatten", "Tile", "Pad", "Where",
    "Range", "ScatterElements", "ScatterND", "Compress", "NonZero", "TopK", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf",
    "Abs", "Neg", "Sign", "Relu", "Max", "Min", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin",
    "Trilu", "ReverseSequence", "SequenceAt", "SequenceConstruct", "DepthToSpace",
    "SpaceToDepth", "Dropout", "MaxPool", "GlobalMaxPool", "Floor", "Ceil", "Round",
})


@dataclass(frozen=True)
class PrecisionFinding:
    """A node computing in a narrower float than eager's result: what, where, how wide."""

    op_type: str
    node: str
    computed_in: str
    expected: str

    def describe(self) -> str:
        return (f"{self.op_type} ({self.node}) computes in {self.computed_in} although eager "
                f"returns {self.expected}")


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
    return types


# Ops whose output does not carry their input's values (only its shape): the
# data path from the case's inputs stops at them.
_SHAPE_ONLY_OPS = frozenset({"Shape", "Size", "EyeLike", "ConstantOfShape", "RandomNormalLike",
                             "RandomUniformLike", "Bernoulli"})


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


def precision_audit(model: onnx.ModelProto, types: dict[str, int], outputs: list[str],
                    expected_bits: int) -> list[PrecisionFinding]:
    """Arithmetic nodes on one case's data path that read floats narrower than eager's
    float output."""
    if expected_bits <= 16:
        return []
    graph = model.graph
    expected = next(n for n, b in NUMPY_FLOAT_BITS.items() if b == expected_bits)
    found: list[PrecisionFinding] = []
    for i in sorted(data_path(graph, outputs)):
        node = graph.node[i]
        if node.op_type in _EXACT_OPS:
            continue
        narrow = [types[n] for n in node.input
                  if n and types.get(n) in _FLOAT_BITS and _FLOAT_BITS[types[n]] < expected_bits]
        if narrow:
            found.append(PrecisionFinding(node.op_type, node.name or f"#{i}",
                                          _FLOAT_NAMES[narrow[0]], expected))
    return found
