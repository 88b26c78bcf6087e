"""Size conditions of a decomposed program as data: what the unchecked-size-assumption rule
reads, computed once from the live program and kept with a cached translation (so a reused
translation needs no decomposition to be checked). Pure: FX nodes in, JSON-able data out."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

ASSUMED = {"eq": ("==", "!="), "ne": ("!=", "==")}
_ARITH: dict[str, tuple[str, Callable[[int, int], int]]] = {
    "mod": ("%", operator.mod), "floordiv": ("//", operator.floordiv),
    "mul": ("*", operator.mul), "add": ("+", operator.add), "sub": ("-", operator.sub)}

# A size expression as data: an int, ["size", placeholder, dim], or [op, left, right].
_Tree = Any
_Expr = tuple[str, Callable[[dict[str, int]], int], frozenset[str]]


def size_facts(program: Any) -> dict[str, Any]:
    """What unchecked-size-assumption reads of a decomposed program, as JSON-able data: its
    user inputs' placeholder names, and each size comparison nothing uses (the tree of its
    expression over input sizes and integers, and the source line it came from). A cached
    translation keeps these beside its model, so the rule needs no decomposition then."""
    if program is None:
        return {"user_inputs": [], "conditions": []}
    conditions = []
    for node in program.graph.nodes:
        name = getattr(node.target, "__name__", "")
        if node.op != "call_function" or name not in ASSUMED or node.users:
            continue
        tree = _tree(node)
        if tree is not None:
            conditions.append({"tree": tree, "trace": node.meta.get("stack_trace") or ""})
    return {"user_inputs": list(program.graph_signature.user_inputs), "conditions": conditions}


def _tree(node: Any, depth: int = 0) -> _Tree | None:
    """An FX size expression as data (None when it is not plain integer arithmetic on
    sizes)."""
    if isinstance(node, int):
        return int(node)
    if depth > 8 or not hasattr(node, "target"):
        return None
    if str(node.target) == "aten.sym_size.int":
        return ["size", getattr(node.args[0], "name", ""), int(node.args[1])]
    name = getattr(node.target, "__name__", "")
    if (name not in ASSUMED and name not in _ARITH) or len(node.args) != 2:
        return None
    parts = [_tree(arg, depth + 1) for arg in node.args]
    return None if any(p is None for p in parts) else [name, *parts]


def size_expr(tree: _Tree, dims: dict[str, dict[int, str]]) -> _Expr | None:
    """A size expression over the manifest's dim symbols: its text (`h % 4 == 0`), a
    function of the sizes, and the symbols it reads; None when it reads a size that is not
    a declared-dynamic dim."""
    if isinstance(tree, int):
        return str(tree), lambda _s, n=tree: n, frozenset()
    if tree[0] == "size":
        symbol = dims.get(tree[1], {}).get(int(tree[2]))
        if symbol is None:
            return None
        return symbol, lambda s, k=symbol: s[k], frozenset([symbol])
    name = tree[0]
    fn: Callable[[int, int], int]
    if name in ASSUMED:
        text_op = ASSUMED[name][0]
        fn = (lambda a, b: int(a == b)) if name == "eq" else (lambda a, b: int(a != b))
    else:
        text_op, fn = _ARITH[name]
    parts: list[_Expr] = []
    for arg in tree[1:]:
        sub = size_expr(arg, dims)
        if sub is None:
            return None
        nested = name in _ARITH and isinstance(arg, list) and arg[0] in _ARITH
        parts.append((f"({sub[0]})", sub[1], sub[2]) if nested else sub)
    (lt, lf, ls), (rt, rf, rs) = parts
    return (f"{lt} {text_op} {rt}", lambda s: fn(lf(s), rf(s)), ls | rs)
