"""The digest of a captured `torch.export` program: what its ONNX translation is a pure
function of, computed from the live program of this very run.

The translation (decomposition, torchlib, the onnxscript optimizer) reads nothing but the
program and the export call: the graph of every (sub)module (nodes, targets, arguments),
each node's metadata (values' shapes, dtypes and symbols, the source lines and module paths
the translation writes into `metadata_props`), the signature (which input is a weight, a
buffer, a constant, a user input), the weights, buffers and constants byte for byte, the
symbols' ranges and the call's input/output trees. All of it is digested here; anything
this module cannot describe as data falls back to `repr`, and a `repr` that carries an
object's address differs in every run: a miss, never a stale hit.

The model's own code never enters the key: it ran (capture traced it) in this run, and
whatever it read (files, the environment, the clock) is already in the program it produced.
"""

from __future__ import annotations

import hashlib
from typing import Any

# Node metadata the translation reads or copies into the ONNX graph. Others (`from_node`,
# provenance bookkeeping) describe how the graph was built, not what it computes.
_META = ("val", "tensor_meta", "stack_trace", "nn_module_stack", "source_fn_stack",
         "torch_fn", "custom", "unbacked_bindings", "example_value")
# Of those, where a node was traced from (for explaining a miss: code that moved).
_WHERE = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn")


class ProgramDigest(str):
    """The program's digest, the very string the key is made of, carrying what explains a
    miss (engine.changes): `parts`, a short digest of each part by name (`graph`,
    `weight:<name>`, `buffer:<name>`, `constant:<name>`, `signature`, `ranges`, `calls`),
    and `nodes`, each node's [name, op, call, values' metadata, where it was traced from]
    (those three as short digests). They are never part of a key."""

    parts: dict[str, str]
    nodes: list[list[str]]


def program_digest(program: Any) -> ProgramDigest:
    """SHA-256 of an ExportedProgram (see the module docstring), with its parts' digests."""
    h = hashlib.sha256()
    sections: dict[str, Any] = {}
    node_parts: list[tuple[str, str, dict[str, Any]]] = []

    def put(section: str, *parts: Any, into: Any = None) -> None:
        mine = sections.setdefault(section, hashlib.sha256())
        for part in parts:
            data = part if isinstance(part, bytes) else _text(part).encode()
            for sink in (h, mine, into):
                if sink is not None:
                    sink.update(data)
                    sink.update(b"\x1f")

    root = program.graph_module
    for name, module in sorted(root.named_modules(), key=lambda nm: nm[0]):
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        put("graph", "module", name)
        for node in graph.nodes:
            mine = {"call": hashlib.sha256(), "meta": hashlib.sha256(),
                    "trace": hashlib.sha256()}
            op = str(node.target) if node.op.startswith("call") else node.op
            node_parts.append((f"{name}.{node.name}" if name else node.name, op, mine))
            put("graph", "node", node.op, node.name, _target(node.target), node.args,
                node.kwargs, into=mine["call"])
            for key in _META:
                if key in node.meta:
                    put("graph", key, node.meta[key],
                        into=mine["trace" if key in _WHERE else "meta"])
        for attr, value in sorted(vars(module).items()):  # get_attr tensors of a subgraph
            if _is_tensor(value):
                put("graph", "attr", attr, value)
    signature = program.graph_signature
    put("signature", "signature",
        [(s.kind.name, _text(s.arg), s.target, getattr(s, "persistent", None))
         for s in signature.input_specs],
        [(s.kind.name, _text(s.arg), s.target) for s in signature.output_specs])
    weights = set(signature.parameters)
    for name, tensor in sorted(program.state_dict.items()):
        put(f"{'weight' if name in weights else 'buffer'}:{name}", "state", name, tensor)
    for name, value in sorted(program.constants.items()):
        put(f"constant:{name}", "constant", name, value)
    put("ranges", "ranges",
        sorted((str(sym), str(rng)) for sym, rng in program.range_constraints.items()))
    put("calls", "calls", [(entry.fqn, _text(entry.signature))
                           for entry in program.module_call_graph])
    digest = ProgramDigest(h.hexdigest())
    digest.parts = {name: _short(mine) for name, mine in sections.items()}
    digest.nodes = [[name, op, *(_short(mine[k]) for k in ("call", "meta", "trace"))]
                    for name, op, mine in node_parts]
    return digest


def _short(h: Any) -> str:
    return str(h.hexdigest()[:16])


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "detach") and hasattr(value, "numel")


def _target(target: Any) -> str:
    """An op by its qualified name (`aten.add.Tensor`), a function by module and name."""
    if isinstance(target, str):
        return target
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    module = getattr(target, "__module__", "")
    return f"{module}.{name}" if name else repr(target)


def _text(value: Any, depth: int = 0) -> str:
    """A stable text of a node argument or metadata value: tensors by dtype, shape, stride
    and bytes (fake ones by their symbolic shape), containers item by item."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, bytes):
        return hashlib.sha256(value).hexdigest()
    if depth > 12:
        return repr(value)
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__}[{','.join(_text(v, depth + 1) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_text(k, depth + 1)}:{_text(v, depth + 1)}"
                              for k, v in sorted(value.items(), key=lambda kv: repr(kv[0])))+"}"
    if _is_tensor(value):
        return _tensor_text(value)
    if type(value).__name__ == "Node":  # an FX node argument: by name
        return f"%{value.name}"
    if callable(value) and getattr(value, "__qualname__", None):  # not by its address
        return f"fn|{_target(value)}"
    return repr(value)


def _tensor_text(tensor: Any) -> str:
    import torch

    head = f"tensor|{tensor.dtype}|{tuple(tensor.shape)}|{tuple(tensor.stride())}|{tensor.device}"
    if isinstance(tensor, torch._subclasses.fake_tensor.FakeTensor) or any(
            not isinstance(d, int) for d in tensor.shape):
        return f"fake|{head}"  # symbolic: its shape (symbols by name) is all there is
    try:
        t = tensor.detach().cpu().contiguous()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    except (RuntimeError, TypeError):  # a tensor with no plain bytes (quantized, sparse)
        return f"{head}|unreadable|{id(tensor)}"  # differs in every run: never a stale hit
    return f"{head}|{hashlib.sha256(data).hexdigest()}"
