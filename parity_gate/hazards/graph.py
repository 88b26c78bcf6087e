"""Reading an exported ONNX graph for the checks: where a node came from, its constants,
its values' dims and consumers."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from parity_gate.hazards.context import in_library
from parity_gate.model.hazards import Site

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_FX_NAME = re.compile(r"^%(\S+) :")
_NO_SCOPE = "_empty_nn_module_stack_from_metadata_hook"

Dim = int | str | None  # a literal size, a symbol, or unknown


def props(node: onnx.NodeProto) -> dict[str, str]:
    return {p.key: p.value for p in node.metadata_props}


def source_of(stack_trace: str) -> str:
    """The innermost frame of a stack trace in user code (else the innermost), `file:line`."""
    frames = _FRAME.findall(stack_trace or "")
    if not frames:
        return ""
    user = [f for f in frames if not in_library(f[0])]
    path, line = (user or frames)[-1]
    return f"{path}:{line}"


def fx_name(node: onnx.NodeProto) -> str:
    """The torch.export node an ONNX node was translated from (dynamo exporter), or ""."""
    m = _FX_NAME.match(props(node).get("pkg.torch.onnx.fx_node", ""))
    return m.group(1) if m else ""


def node_site(node: onnx.NodeProto) -> Site:
    """Module path, node name and source line of an ONNX node, from what each exporter keeps:
    dynamo's metadata (name scopes, stack trace) or torchscript's scoped node names."""
    meta = props(node)
    module = ""
    scopes = meta.get("pkg.torch.onnx.name_scopes")
    if scopes:
        try:
            names = [s for s in ast.literal_eval(scopes) if s and s != _NO_SCOPE]
        except (ValueError, SyntaxError):
            names = []
        module = names[-2] if len(names) >= 2 else ""
    elif node.name.startswith("/"):
        parts = node.name.strip("/").split("/")
        module = parts[-2] if len(parts) >= 2 else ""
    return Site(module=module, node=node.name,
                source=source_of(meta.get("pkg.torch.onnx.stack_trace", "")))


def constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Every constant value of the graph: initializers and Constant nodes' tensors."""
    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer
           if _has_data(t)}  # a skeleton's large weights have none (and are no literal)
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    out[node.output[0]] = numpy_helper.to_array(attr.t)
                elif attr.name in ("value_ints", "value_int"):
                    out[node.output[0]] = np.array(onnx.helper.get_attribute_value(attr))
    return out


def _has_data(t: onnx.TensorProto) -> bool:
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return False  # in a file beside the model: a weight, never a literal
    return not t.dims or any(
        t.HasField(f) if f == "raw_data" else len(getattr(t, f)) > 0
        for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                  "uint64_data", "string_data"))


def dims(graph: onnx.GraphProto) -> dict[str, list[Dim]]:
    """Dims of every value whose shape is known (after shape inference)."""
    out: dict[str, list[Dim]] = {}
    for v in [*graph.input, *graph.value_info, *graph.output]:
        t = v.type.tensor_type
        if v.type.HasField("tensor_type") and t.HasField("shape"):
            out[v.name] = [d.dim_value if d.HasField("dim_value")
                           else (d.dim_param or None) for d in t.shape.dim]
    return out


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    out: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            if name:
                out.setdefault(name, []).append(node)
    return out


def opset(model: Any, domain: str = "") -> int | None:
    domains = {domain, "ai.onnx"} if domain == "" else {domain}
    return next((o.version for o in model.opset_import if o.domain in domains), None)


def walk(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Nodes of the graph and of every subgraph (If/Loop bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for g in [*attr.graphs, *([attr.g] if attr.HasField("g") else [])]:
                yield from walk(g)
