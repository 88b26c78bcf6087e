"""Reading a batch's ONNX graph per case: ownership, sub-models, blame, precision audit.

Cases in a batch share nothing but the graph container: case k's inputs are
named `c{k}_<arg>` and its outputs `c{k}_o<m>`, so the nodes of a case are
the ancestors of its outputs. That lets a failing load or run be split at
the ONNX level (no re-export), an error that names a node be pinned on its
case, and each case's dtype handling be read off the un-optimised graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import onnx

from parity_gate.hazards.precision import ancestors  # one graph walk, shared with hazards

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
