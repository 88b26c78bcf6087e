"""Where ONNX Runtime ran each node: read from its JSON profile or its verbose session log.

Pure parsing (no onnxruntime import): the profile is the list of trace events
`SessionOptions.enable_profiling` writes; each node's kernel event
(`cat: "Node"`, name `<node>_kernel_time`) carries `args.provider` and
`args.op_name`, and, where the arena is on, `args.mem_in_use_peak` (the arena's
peak bytes in use so far). The verbose log (`log_severity_level=0`) has ONNX
Runtime's `VerifyEachNodeIsAssignedToAnEp` lines: `All nodes placed on [EP].
Number of nodes: N`, or per provider `Node(s) placed on [EP]. Number of nodes: N`
followed by one `  OpType (node name)` line per node.

The copies: a kernel event also carries `args.output_size` (bytes written) and `dur`
(µs), so a Memcpy node's event is the size and time of one copy; which nodes a copy
serves is not in the profile, so it is read from the session's optimized graph
(`SessionOptions.optimized_model_filepath`: the graph after partitioning, with the
Memcpy nodes ONNX Runtime inserted, default domain), where the tensor's static shape
and dtype also give its size when the profile has none.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from parity_gate.model.performance import Copy, PlacedNode, Placement

MEMCPY_OPS = frozenset({"MemcpyToHost", "MemcpyFromHost"})
_KERNEL = "_kernel_time"


def _split(nodes: Iterable[PlacedNode], requested: str, source: str) -> Placement:
    nodes = list(nodes)
    counts = Counter(n.provider for n in nodes)
    return Placement(
        requested=requested,
        by_provider=dict(sorted(counts.items(), key=lambda kv: (kv[0] != requested, kv[0]))),
        fallback=[n for n in nodes if n.provider != requested and n.op not in MEMCPY_OPS],
        memcpy=[n for n in nodes if n.op in MEMCPY_OPS],
        source=source)


def from_profile(events: list[dict[str, Any]], requested: str, graph: Any = None
                 ) -> Placement:
    """The placement of every node that ran in the profiled runs (each node once), with
    each inserted copy's size and mean time; `graph`: the session's optimized model (an
    onnx ModelProto), which names the tensor each copy moves and the nodes it serves."""
    seen: dict[str, PlacedNode] = {}
    sizes: dict[str, int] = {}
    times: dict[str, list[float]] = {}
    for event in events:
        name = str(event.get("name", ""))
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not name.endswith(_KERNEL) or "provider" not in args:
            continue
        node = name[:-len(_KERNEL)]
        placed = seen.setdefault(node, PlacedNode(node, str(args.get("op_name", "")),
                                                  str(args["provider"])))
        if placed.op in MEMCPY_OPS:
            if str(args.get("output_size", "")).isdigit():
                sizes[node] = int(args["output_size"])
            if isinstance(event.get("dur"), (int, float)):
                times.setdefault(node, []).append(float(event["dur"]))
    placement = _split(seen.values(), requested, "profile")
    links = copies_in(graph) if graph is not None else {}
    copies = []
    for n in placement.memcpy:
        linked = links.get(n.name, Copy(n.name, n.op))
        took = times.get(n.name)
        copies.append(Copy(n.name, n.op, linked.tensor, linked.nodes,
                           sizes.get(n.name, linked.bytes),
                           sum(took) / len(took) if took else None))
    return Placement(placement.requested, placement.by_provider, placement.fallback,
                     placement.memcpy, "profile", copies)


def copies_in(model: Any) -> dict[str, Copy]:
    """Every Memcpy node of an optimized graph by name: the tensor it copies, the nodes it
    serves on the host side (a MemcpyToHost's readers, a MemcpyFromHost's writer, or the
    graph input it uploads) and its size where the tensor's shape and dtype are static."""
    graph = model.graph
    writer = {o: n.name for n in graph.node for o in n.output}
    readers: dict[str, list[str]] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.name)
    found = {}
    for n in graph.node:
        if n.op_type not in MEMCPY_OPS or n.domain not in ("", "ai.onnx") or not n.input:
            continue
        tensor = n.input[0]
        if n.op_type == "MemcpyToHost":
            served = readers.get(n.output[0], []) if n.output else []
        else:
            served = [writer.get(tensor, f"graph input {tensor}")]
        found[n.name] = Copy(n.name, n.op_type, tensor, served, tensor_bytes(model, tensor))
    return found


def tensor_bytes(model: Any, name: str) -> int | None:
    """Bytes of tensor `name` in `model` from its stated static shape and dtype (an
    initializer's dims, or a value_info, input or output entry); None when not static."""
    from onnx import helper

    graph = model.graph
    for t in graph.initializer:
        if t.name == name:
            elem, dims = t.data_type, [int(d) for d in t.dims]
            break
    else:
        info = next((v for v in (*graph.value_info, *graph.input, *graph.output)
                     if v.name == name), None)
        if info is None or not info.type.HasField("tensor_type"):
            return None
        shape = info.type.tensor_type.shape.dim
        if not info.type.tensor_type.HasField("shape") or \
                not all(d.HasField("dim_value") for d in shape):
            return None
        elem, dims = info.type.tensor_type.elem_type, [d.dim_value for d in shape]
    try:
        size = helper.tensor_dtype_to_np_dtype(elem).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    count = 1
    for d in dims:
        count *= d
    return count * size


def arena_peak(events: list[dict[str, Any]]) -> int | None:
    """ONNX Runtime's own figure: the arena's peak bytes in use over the profiled runs
    (None when the profile has no memory statistics, e.g. the arena is off)."""
    peaks = [int(e["args"]["mem_in_use_peak"]) for e in events
             if e.get("cat") == "Node" and "mem_in_use_peak" in (e.get("args") or {})]
    return max(peaks) if peaks else None


_ALL = re.compile(r"All nodes placed on \[(\w+)\]\. Number of nodes: (\d+)")
_SOME = re.compile(r"Node\(s\) placed on \[(\w+)\]\. Number of nodes: (\d+)")
_NODE = re.compile(r"^\s+(\w+) \((.*)\)\s*$")


def from_log(text: str, requested: str) -> Placement | None:
    """The placement in a verbose session log; None when the log has no placement lines.
    With every node on one provider the log gives only the count: the nodes are then
    counted, not named (none fell back, so there is nobody to name)."""
    lines = text.splitlines()
    nodes: list[PlacedNode] = []
    counted: Counter[str] = Counter()
    found = False
    provider = ""
    for line in lines:
        if m := _ALL.search(line):
            found = True
            counted[m.group(1)] += int(m.group(2))
            provider = ""
        elif m := _SOME.search(line):
            found = True
            provider = m.group(1)
        elif provider and (m := _NODE.match(line)):
            nodes.append(PlacedNode(m.group(2), m.group(1), provider))
        elif provider and line.strip() and "]" in line[:80]:
            provider = ""  # the next log record: the node list ended
    if not found:
        return None
    placement = _split(nodes, requested, "log")
    if counted:
        merged = Counter(placement.by_provider) + counted
        placement = Placement(requested, dict(merged), placement.fallback, placement.memcpy,
                              "log")
    return placement
