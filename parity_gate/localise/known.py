"""Name the op: an ATen call in the divergent layer that the op sweep already knows is wrong.

A known finding is keyed by an op-sweep variant (`scatter_reduce.mean.noself`),
whose catalogue record holds the call it makes. An FX node matches a variant
when both call the same ATen op and every literal keyword of the variant's call
that the op's schema also names has the same value in the node
(`reduce='mean', include_self=False`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from parity_gate.model.localisation import KnownOp


@dataclass(frozen=True)
class Known:
    """One known failing op-sweep case: variant, dtype, the variant's call, the reason."""

    finding: str
    variant: str
    dtype: str
    input_class: str  # the op sweep's input class: normal, specials, empty, ...
    call: str
    reason: str

    def _call(self) -> ast.Call | None:
        try:
            tree = ast.parse(self.call, mode="eval")
        except SyntaxError:
            return None
        return tree.body if isinstance(tree.body, ast.Call) else None

    @property
    def base(self) -> str:
        """The function the call names (`torch.scatter_reduce` → `scatter_reduce`): ATen
        ops carry the same name; the variant id need not (`linear.align` interpolates)."""
        call = self._call()
        if call is None:
            return ""
        func = call.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")

    def literals(self) -> dict[str, Any]:
        """The call's literal keyword arguments."""
        call = self._call()
        if call is None:
            return {}
        out: dict[str, Any] = {}
        for kw in call.keywords:
            if kw.arg is None:
                continue
            try:
                out[kw.arg] = ast.literal_eval(kw.value)
            except ValueError:
                continue
        return out


@functools.cache
def bundled() -> tuple[Known, ...]:
    """The op sweep's known findings joined with its catalogue (mismatches only); read once
    per worker (a YAML of every op-sweep case: a third of a second each time)."""
    from parity_gate.gate.baseline import load
    from parity_gate.ops.catalogue import VARIANTS
    from parity_gate.ops.gating import BUNDLED

    calls = {v.id: v.call for v in VARIANTS}
    out: list[Known] = []
    for entry in load(BUNDLED).entries:
        parts = entry.id.split("/")
        if len(parts) != 5 or parts[0] != "op" or (entry.outcome is not None
                                                   and entry.outcome.value != "mismatch"):
            continue
        variant, dtype, input_class = parts[1], parts[2], parts[3]
        if variant in calls:
            out.append(Known(entry.id, variant, dtype, input_class, calls[variant],
                             entry.reason))
    return tuple(out)


def node_arguments(node: Any) -> dict[str, Any]:
    """An FX call's arguments by the ATen schema's names (positional ones included)."""
    schema = getattr(node.target, "_schema", None)
    named: dict[str, Any] = dict(node.kwargs)
    if schema is not None:
        for arg, value in zip(schema.arguments, node.args, strict=False):
            named.setdefault(arg.name, value)
    return named


def tensor_dtype(node: Any) -> str:
    """The dtype an op computes in: its first tensor argument's (FX `val` metadata)."""
    for arg in (*node.args, node):
        val = getattr(arg, "meta", {}).get("val")
        dtype = getattr(val, "dtype", None)
        if dtype is not None:
            return str(dtype).removeprefix("torch.")
    return ""


def match(nodes: Iterable[Any], known: Sequence[Known],
          classes: tuple[str, ...] = ("normal",)) -> KnownOp | None:
    """The first node (execution order) that a known finding covers: same ATen op, same
    dtype as the node computes in, an input class the case's data belongs to (normal
    data is not evidence for a finding seen only on NaN/inf inputs), same literals."""
    rank = {c: i for i, c in enumerate(classes)}
    by_base: dict[str, list[Known]] = {}
    for k in known:
        if k.input_class in rank:
            by_base.setdefault(k.base, []).append(k)
    for node in nodes:
        target = str(getattr(node, "target", ""))
        if not target.startswith("aten."):
            continue
        args = node_arguments(node)
        dtype = tensor_dtype(node)
        hits = [k for k in by_base.get(target.split(".")[1], []) if k.dtype == dtype
                and all(args[n] == v for n, v in k.literals().items() if n in args)]
        if hits:
            k = min(hits, key=lambda k: rank[k.input_class])
            return KnownOp(aten=target, call=k.call, finding=k.finding, reason=k.reason)
    return None
