"""Where ONNX Runtime ran each node: read from its JSON profile or its verbose session log.

Pure parsing (no onnxruntime import): the profile is the list of trace events
`SessionOptions.enable_profiling` writes; each node's kernel event
(`cat: "Node"`, name `<node>_kernel_time`) carries `args.provider` and
`args.op_name`, and, where the arena is on, `args.mem_in_use_peak` (the arena's
peak bytes in use so far). The verbose log (`log_severity_level=0`) has ONNX
Runtime's `VerifyEachNodeIsAssignedToAnEp` lines: `All nodes placed on [EP].
Number of nodes: N`, or per provider `Node(s) placed on [EP]. Number of nodes: N`
followed by one `  OpType (node name)` line per node.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from parity_gate.model.performance import PlacedNode, Placement

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


def from_profile(events: list[dict[str, Any]], requested: str) -> Placement:
    """The placement of every node that ran in the profiled runs (each node once)."""
    seen: dict[str, PlacedNode] = {}
    for event in events:
        name = str(event.get("name", ""))
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not name.endswith(_KERNEL) or "provider" not in args:
            continue
        node = name[:-len(_KERNEL)]
        seen.setdefault(node, PlacedNode(node, str(args.get("op_name", "")),
                                         str(args["provider"])))
    return _split(seen.values(), requested, "profile")


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
