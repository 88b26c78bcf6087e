"""How long a reduction each output of an exported graph depends on: the K that an
accumulator sums over (compare.reference.ACCUMULATION's bound grows with sqrt(K)).

Read from the ONNX graph, walking forward in topological order: an output's length is the
longest one among the MatMul, Gemm and Conv nodes upstream of it. The lengths come from
the shapes the graph states (inputs, value_info, initializers); a reduction whose length
is symbolic or unstated counts as none, so the bound is never widened on a guess.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["reduction_lengths"]


def _attr(node: Any, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _length(node: Any, dims: dict[str, list[int | None]]) -> int | None:
    """The number of products one output element of `node` sums (None: not a reduction,
    or its length is not stated)."""
    def known(name: str) -> list[int] | None:
        d = dims.get(name)
        sizes = [x for x in d or [] if isinstance(x, int) and x > 0]
        return sizes if d and len(sizes) == len(d) else None

    op = node.op_type if node.domain in ("", "ai.onnx") else ""
    if op == "MatMul" and len(node.input) > 1:
        a = known(node.input[0])
        return a[-1] if a else None
    if op == "Gemm" and len(node.input) > 1:
        a = known(node.input[0])
        return (a[0] if _attr(node, "transA", 0) else a[-1]) if a and len(a) == 2 else None
    if op in ("Conv", "ConvTranspose") and len(node.input) > 1:
        w = known(node.input[1])  # Conv: [M, C/group, k...]; ConvTranspose: [C, M/group, k...]
        if not w or len(w) < 3:
            return None
        per_group = w[1] if op == "Conv" else w[0] // max(1, _attr(node, "group", 1))
        return per_group * math.prod(w[2:])
    return None


def reduction_lengths(proto: Any) -> list[int | None]:
    """Per graph output (in order), the longest reduction upstream of it; None where none
    of a stated length is."""
    graph = proto.graph
    dims: dict[str, list[int | None]] = {}
    for v in (*graph.input, *graph.value_info, *graph.output):
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            dims[v.name] = [d.dim_value if d.HasField("dim_value") else None
                            for d in v.type.tensor_type.shape.dim]
    for t in graph.initializer:
        dims[t.name] = [int(x) for x in t.dims]
    longest: dict[str, int] = {}
    for node in graph.node:
        found = [longest[i] for i in node.input if i in longest]
        here = _length(node, dims)
        if here is not None:
            found.append(here)
        if found:
            for o in node.output:
                longest[o] = max(found)
    return [longest.get(o.name) for o in graph.output]
