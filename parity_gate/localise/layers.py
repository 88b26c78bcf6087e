"""Who owns a divergence: the module call, then the node, by one blame rule.

A scope (one call of one module; the root is a scope) owns a divergence when
the values it reads agree between the two sides and a value it makes and hands
on does not. The search starts at the root and descends only into a child call
that satisfies that rule; where none does, the scope's own nodes are compared in
execution order and the first whose inputs agree and whose output does not is
the culprit. A consumer whose input already differed is never blamed.

The scopes come from the `torch.export` program (`nn_module_stack`), whose keys
tell two calls of one module object apart (`fc`, `fc@1`); the ONNX exporter's
own name scopes do not. With the exporter's optimizer off each FX node's value
keeps its name in the ONNX graph, so one name addresses both sides. Values are
asked for one level at a time (the boundary values of that level's calls), so
memory stays bounded by a level, not the whole graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from parity_gate import compare as cmp
from parity_gate.model.localisation import LayerError

Scope = tuple[str, ...]  # nn_module_stack keys from the root's child down; () is the root


@dataclass(frozen=True)
class Node:
    """One call of the exported program: its FX name is the ONNX value it became."""

    name: str
    scope: Scope
    inputs: tuple[str, ...]  # activations it reads (FX names); weights and literals excluded
    aten: str


@dataclass(frozen=True)
class Call:
    """One call of one module object."""

    path: str    # module path, "" for the root
    kind: str    # its class
    order: int   # 1-based: which call of this module object
    calls: int   # how many calls of it the program makes

    @property
    def label(self) -> str:
        name = self.path or "(root)"
        return f"{name} (call {self.order} of {self.calls})" if self.calls > 1 else name


ROOT = Call("", "", 1, 1)


@dataclass
class Graph:
    """The exported program read as module calls (built once per program)."""

    nodes: list[Node] = field(default_factory=list)   # execution order
    outputs: list[str] = field(default_factory=list)  # the program's outputs
    calls: dict[Scope, Call] = field(default_factory=dict)

    def call(self, scope: Scope) -> Call:
        return self.calls.get(scope, ROOT)

    def children(self, scope: Scope) -> list[Scope]:
        """The calls directly inside `scope`, in execution order."""
        depth = len(scope)
        seen = dict.fromkeys(n.scope[: depth + 1] for n in self.nodes
                             if len(n.scope) > depth and n.scope[:depth] == scope)
        return list(seen)

    def inside(self, scope: Scope) -> list[Node]:
        depth = len(scope)
        return [n for n in self.nodes if n.scope[:depth] == scope]

    def own(self, scope: Scope) -> list[Node]:
        """The scope's own code: nodes directly in it, not in a child call."""
        return [n for n in self.nodes if n.scope == scope]

    def inputs_of(self, scope: Scope) -> list[str]:
        """Activations read inside `scope` and made outside it."""
        inner = self.inside(scope)
        made = {n.name for n in inner}
        return list(dict.fromkeys(i for n in inner for i in n.inputs if i not in made))

    def outputs_of(self, scope: Scope) -> list[str]:
        """Values made inside `scope` and read outside it (or returned by the program)."""
        depth = len(scope)
        made = {n.name for n in self.inside(scope)}
        used_outside = {i for n in self.nodes if n.scope[:depth] != scope for i in n.inputs}
        used_outside.update(self.outputs)
        return [n.name for n in self.nodes if n.name in made and n.name in used_outside]


@dataclass(frozen=True)
class Agreement:
    """One value on both sides: within tolerance (non-finite values compared by kind)?"""

    passed: bool
    max_abs: float | None = None
    needed_atol: float | None = None


def agreement(expected: np.ndarray, actual: np.ndarray, tolerance: cmp.Tolerance
              ) -> Agreement:
    c = cmp.compare(np.asarray(expected), np.asarray(actual), tolerance)
    need = None if c.passed else (np.inf if c.needed_atol is None else c.needed_atol)
    return Agreement(c.passed, c.max_abs, need)


Evaluate = Callable[[list[str]], dict[str, Agreement]]
"""names → how each value compares; a name it cannot compare (not a tensor, not in the
ONNX graph) is left out and counts as agreeing."""


@dataclass
class Blame:
    path: list[Scope]         # the calls descended into, outermost first ([]: the root)
    curve: list[LayerError]   # the root's child calls, in execution order
    node: Node | None         # the culprit node; None: no single node of the scope
    diverges: bool            # the program's outputs differ at all on this sample
    evaluated: int = 0        # values compared in all

    @property
    def scope(self) -> Scope:
        return self.path[-1] if self.path else ()


def search(graph: Graph, evaluate: Evaluate, max_depth: int = 32) -> Blame:
    """Apply the blame rule from the root down (see the module docstring)."""
    first = evaluate(list(graph.outputs))
    evaluated = len(graph.outputs)
    diverges = not _agree(graph.outputs, first)
    scope: Scope = ()
    path: list[Scope] = []
    curve: list[LayerError] = []
    for depth in range(max_depth):
        kids = graph.children(scope)
        if not kids or not diverges:
            break
        bounds = {k: (graph.inputs_of(k), graph.outputs_of(k)) for k in kids}
        names = list(dict.fromkeys(v for ins, outs in bounds.values() for v in (*ins, *outs)))
        got = evaluate(names)
        evaluated += len(names)
        if depth == 0:
            curve = [_point(graph.call(k), outs, got) for k, (_, outs) in bounds.items()]
        owner = next((k for k, (ins, outs) in bounds.items()
                      if _agree(ins, got) and not _agree(outs, got)), None)
        if owner is None:
            break
        path.append(owner)
        scope = owner
    node = None
    if diverges:
        own = graph.own(scope)
        names = list(dict.fromkeys(v for n in own for v in (*n.inputs, n.name)))
        got = evaluate(names)
        evaluated += len(names)
        node = next((n for n in own if n.name in got and _agree(n.inputs, got)
                     and not got[n.name].passed), None)
    return Blame(path, curve, node, diverges, evaluated)


def _agree(names: Iterable[str], got: dict[str, Agreement]) -> bool:
    return all(got[n].passed for n in names if n in got)


def _point(call: Call, outputs: list[str], got: dict[str, Agreement]) -> LayerError:
    """One point of the error curve: the call's worst output."""
    seen = [got[n] for n in outputs if n in got]
    worst = max((a.max_abs for a in seen if a.max_abs is not None), default=None)
    need = max((a.needed_atol for a in seen if a.needed_atol is not None), default=None)
    return LayerError(call.label, call.kind, worst, need, all(a.passed for a in seen))
