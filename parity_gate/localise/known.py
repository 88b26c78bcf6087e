"""Name the op: an ATen call in the divergent layer that the op sweep already knows is wrong.

A known finding is keyed by an op-sweep variant (`scatter_reduce.mean.noself`),
whose catalogue record holds the call it makes. An FX node matches a variant
when all three agree:

- the op: the same ATen op, computing in the same dtype, every literal keyword of the
  variant's call that the op's schema also names with the same value in the node
  (`reduce='mean', include_self=False`);
- the trigger: each tensor the call passes by keyword is a tensor of the same kind in the
  node (`attn_mask` bool or float), and the node passes no tensor the call leaves out;
- the symptom: NaN/inf on one side, or finite values that differ (the comparison
  verdict of the finding and of the case).

One op fails in several ways (a fully masked row: NaN with a float mask, the mean of V
with a bool one); citing the wrong way is worse than citing none.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from parity_gate.model.comparison import Verdict
from parity_gate.model.localisation import KnownOp

NON_FINITE = "non-finite"  # NaN or inf on one side only
VALUES = "values"          # finite values that differ


def symptom(verdict: Verdict) -> str | None:
    """The symptom class of a failing comparison (None: not a value mismatch)."""
    if verdict is Verdict.NON_FINITE:
        return NON_FINITE
    return None if verdict in (Verdict.PASS, Verdict.SHAPE, Verdict.DTYPE) else VALUES


# The sweep writes a mismatch's reason as `<output>: <verdict>: ...` (ops.judge).
_VERDICT = re.compile(r"^[^:\s]+: ([a-z_]+):")


def reason_symptom(reason: str) -> str | None:
    """The symptom of a finding recorded by the op sweep, from its reason's verdict."""
    m = _VERDICT.match(reason)
    if m is None or m.group(1) not in Verdict._value2member_map_:
        return None
    return symptom(Verdict(m.group(1)))


def tensor_kind(dtype: str) -> str:
    """What a mask or index argument's role depends on: bool, integer or floating."""
    if dtype == "bool":
        return "bool"
    return "int" if dtype.startswith(("int", "uint")) else "float"


_NAMESPACES = frozenset({"torch", "F", "math", "nn", "np", "operator"})


@dataclass(frozen=True)
class Known:
    """One known failing op-sweep case: variant, dtype, the variant's call, the reason, and
    what triggers and shows it (its tensor keywords' kinds, its symptom)."""

    finding: str
    variant: str
    dtype: str
    input_class: str  # the op sweep's input class: normal, specials, empty, ...
    call: str
    reason: str
    tensors: tuple[tuple[str, str], ...] = ()  # keyword → tensor kind, e.g. attn_mask bool
    symptom: str | None = None  # NON_FINITE or VALUES; None: unknown, never cited

    @property
    def positional(self) -> int:
        """How many schema arguments the call passes by position (a tensor method's
        receiver, `x.scatter_reduce(...)`, is the first)."""
        call = self._call()
        if call is None:
            return 0
        func = call.func
        method = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id not in _NAMESPACES
        return len(call.args) + method

    def names(self) -> list[str]:
        """The names the call binds by keyword (the tensors among them in `tensors`)."""
        call = self._call()
        return [kw.arg for kw in call.keywords if kw.arg] if call is not None else []

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

    by_id = {v.id: v for v in VARIANTS}
    out: list[Known] = []
    for entry in load(BUNDLED).entries:
        parts = entry.id.split("/")
        if len(parts) != 5 or parts[0] != "op" or (entry.outcome is not None
                                                   and entry.outcome.value != "mismatch"):
            continue
        variant, dtype, input_class = parts[1], parts[2], parts[3]
        if variant in by_id:
            v = by_id[variant]
            out.append(Known(entry.id, variant, dtype, input_class, v.call, entry.reason,
                             _tensor_keywords(v, dtype), reason_symptom(entry.reason)))
    return tuple(out)


def _tensor_keywords(variant: Any, dtype: str) -> tuple[tuple[str, str], ...]:
    """The call's keywords that pass one of the variant's tensors, with that tensor's kind
    in a case of `dtype` (a mask is bool; data follows the case dtype)."""
    try:
        tree = ast.parse(variant.call, mode="eval").body
    except SyntaxError:
        return ()
    if not isinstance(tree, ast.Call):
        return ()
    args = {a.name: a for a in variant.args}
    out = []
    for kw in tree.keywords:
        if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in args:
            a = args[kw.value.id]
            kind = "bool" if a.kind == "mask" else tensor_kind(
                a.stored or a.dtype or ("int64" if a.kind == "index" else dtype))
            out.append((kw.arg, kind))
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


def _tensor_of(value: Any) -> str | None:
    """The tensor kind of an FX argument, or None if it is no tensor."""
    val = getattr(value, "meta", {}).get("val") if value is not None else None
    dtype = getattr(val, "dtype", None)
    return tensor_kind(str(dtype).removeprefix("torch.")) if dtype is not None else None


def triggered(node: Any, args: dict[str, Any], k: Known) -> bool:
    """The node passes the tensors the finding's call passes, of the same kinds, and no
    tensor the call leaves out (a mask where the finding had none)."""
    if any(_tensor_of(args.get(name)) != kind for name, kind in k.tensors):
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return True
    named = set(k.names())
    extra = [a.name for a in schema.arguments[k.positional:] if a.name not in named]
    return all(_tensor_of(args.get(name)) is None for name in extra)


def match(nodes: Iterable[Any], known: Sequence[Known],
          classes: tuple[str, ...] = ("normal",),
          symptoms: Iterable[str] = (NON_FINITE, VALUES)) -> KnownOp | None:
    """The first node (execution order) that a known finding covers: same ATen op, same
    dtype as the node computes in, an input class the case's data belongs to (normal
    data is not evidence for a finding seen only on NaN/inf inputs), same literals, same
    trigger (`triggered`) and one of the case's `symptoms`."""
    rank = {c: i for i, c in enumerate(classes)}
    shown = set(symptoms)
    by_base: dict[str, list[Known]] = {}
    for k in known:
        if k.input_class in rank and k.symptom in shown:
            by_base.setdefault(k.base, []).append(k)
    for node in nodes:
        target = str(getattr(node, "target", ""))
        if not target.startswith("aten."):
            continue
        args = node_arguments(node)
        dtype = tensor_dtype(node)
        hits = [k for k in by_base.get(target.split(".")[1], []) if k.dtype == dtype
                and all(args[n] == v for n, v in k.literals().items() if n in args)
                and triggered(node, args, k)]
        if hits:
            k = min(hits, key=lambda k: rank[k.input_class])
            return KnownOp(aten=target, call=k.call, finding=k.finding, reason=k.reason)
    return None
