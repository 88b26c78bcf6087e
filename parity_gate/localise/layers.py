"""First divergent layer: the exported program against its ONNX translation, scope by scope.

The dynamo exporter names each ONNX value after the FX node that produced it and
records the module scopes in the node's metadata (`pkg.torch.onnx.name_scopes`),
so a module's outputs are the FX-named values made inside its scope and used
outside it. One level of the module tree is checked at a time (its boundary
values only: memory stays bounded), and the search descends into the first
child, in execution order, whose outputs leave tolerance while every earlier
one stayed within it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.model.localisation import DivergentLayer, LayerError

SCOPES = "pkg.torch.onnx.name_scopes"
CLASSES = "pkg.torch.onnx.class_hierarchy"
Scope = tuple[str, ...]


@dataclass(frozen=True)
class _Made:
    """An FX-named ONNX value and where it was made."""

    value: str
    scopes: Scope    # module paths from the outermost down, e.g. ("blocks.6", "blocks.6.fc")
    classes: Scope   # their classes
    aten: str


@dataclass
class ScopeMap:
    """The ONNX graph read as module scopes (built once per exported model)."""

    made: list[_Made] = field(default_factory=list)             # topological order
    users: dict[str, list[Scope | None]] = field(default_factory=dict)  # None: graph output
    nodes: list[tuple[Scope, str]] = field(default_factory=list)  # (scopes, ONNX op type)

    @classmethod
    def of(cls, model: Any) -> ScopeMap:
        out = cls()
        graph = model.graph
        for node in graph.node:
            meta = {p.key: p.value for p in node.metadata_props}
            names = _parse_list(meta.get(SCOPES, ""))
            kinds = _parse_list(meta.get(CLASSES, ""))
            scopes = tuple(n for n in names[1:-1] if n)
            out.nodes.append((scopes, node.op_type))
            for name in node.input:
                if name:
                    out.users.setdefault(name, []).append(scopes)
            fx_name = names[-1] if names else ""
            if fx_name and fx_name in node.output:
                out.made.append(_Made(fx_name, scopes, tuple(kinds[1:-1]),
                                      kinds[-1] if kinds else ""))
        for o in graph.output:
            out.users.setdefault(o.name, []).append(None)
        return out

    def children(self, parent: Scope) -> list[tuple[str, str]]:
        """(path, class) of the scopes directly inside `parent`, in execution order."""
        seen: dict[str, str] = {}
        depth = len(parent)
        for m in self.made:
            if len(m.scopes) > depth and m.scopes[:depth] == parent:
                seen.setdefault(m.scopes[depth], m.classes[depth] if depth < len(m.classes)
                                else "")
        return list(seen.items())

    def outputs_of(self, scope: Scope) -> list[str]:
        """Values made inside `scope` and used outside it (or returned by the graph)."""
        depth = len(scope)
        out = []
        for m in self.made:
            if m.scopes[:depth] != scope:
                continue
            users = self.users.get(m.value, [])
            if any(u is None or u[:depth] != scope for u in users):
                out.append(m.value)
        return out

    def inside(self, scope: Scope) -> tuple[list[str], list[str]]:
        """The ONNX op types and the ATen overloads of the nodes inside `scope`."""
        depth = len(scope)
        onnx_ops = list(dict.fromkeys(op for s, op in self.nodes if s[:depth] == scope
                                      and op != "Constant"))
        aten = list(dict.fromkeys(m.aten for m in self.made
                                  if m.scopes[:depth] == scope and m.aten))
        return onnx_ops, aten


Evaluate = Callable[[list[str]], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]
"""names → (expected values from the exported program, values from ONNX Runtime)."""


@dataclass
class LayerSearch:
    layer: DivergentLayer | None
    curve: list[LayerError]  # the top level, in execution order
    evaluated: int = 0       # values compared in all


def search(scopes: ScopeMap, evaluate: Evaluate, tolerance: cmp.Tolerance,
           max_depth: int = 8) -> LayerSearch:
    """Descend the module tree to the first divergent scope (see the module docstring)."""
    parent: Scope = ()
    path: list[tuple[str, str]] = []
    curve: list[LayerError] = []
    evaluated = 0
    for _ in range(max_depth):
        kids = scopes.children(parent)
        if not kids:
            break
        wanted = {name: scopes.outputs_of((*parent, name)) for name, _ in kids}
        names = list(dict.fromkeys(v for vs in wanted.values() for v in vs))
        expected, actual = evaluate(names)
        evaluated += len(names)
        errors = [_error(name, kind, wanted[name], expected, actual, tolerance)
                  for name, kind in kids]
        if not parent:
            curve = errors
        first = next((e for e in errors if not e.passed), None)
        if first is None:
            break  # every child stays within tolerance: the parent's own ops diverge
        path.append((first.module, first.kind))
        parent = (*parent, first.module)
    if not path:
        return LayerSearch(None, curve, evaluated)
    onnx_ops, aten = scopes.inside(parent)
    name, kind = path[-1]
    return LayerSearch(DivergentLayer(name, kind, [p for p, _ in path], onnx_ops, aten),
                       curve, evaluated)


def _error(name: str, kind: str, values: Sequence[str], expected: dict[str, np.ndarray],
           actual: dict[str, np.ndarray], tolerance: cmp.Tolerance) -> LayerError:
    worst_abs: float | None = None
    worst_need: float | None = None
    passed = True
    for value in values:
        if value not in expected or value not in actual:
            continue
        c = cmp.compare(expected[value], actual[value], tolerance, name=value)
        passed &= c.passed
        if c.max_abs is not None:
            worst_abs = c.max_abs if worst_abs is None else max(worst_abs, c.max_abs)
        if not c.passed:
            need = np.inf if c.needed_atol is None else c.needed_atol
            worst_need = need if worst_need is None else max(worst_need, need)
    return LayerError(name, kind.rsplit(".", 1)[-1], worst_abs, worst_need, passed)


def _parse_list(text: str) -> list[str]:
    """The exporter writes these lists as Python reprs (`['', 'blocks.6', 'add']`)."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return []
    import ast

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
