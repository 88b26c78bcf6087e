"""Export many op cases as one module, and say which case an export error belongs to.

Export cost is mostly fixed per call, so a batch of independent cases (own
inputs, own outputs) is one `torch.export.export` + one `torch.onnx.export`.
Capture and translation run as two calls so a failure says which stage it
was, and the translated graph is taken before and after the optimizer: the
un-optimised one for the dtype-handling audit, the optimised one (what users
ship) for running.

Blame: each case's call is compiled with its own file name, so a capture
error's traceback names the case; a translation error names an FX node whose
`nn_module_stack` names the case's submodule (`c.<k>`).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch

from parity_gate.engine.exporting import classify_export_error
from parity_gate.engine.runtime import first_line
from parity_gate.engine.stages import StageFailure
from parity_gate.engine.tensors import leaves
from parity_gate.model.outcomes import Outcome

CASE_FILE = "<parity-gate case {}>"
# How the graph that runs was made (recorded per case): torch.onnx.export with the dynamo
# exporter, then its optimizer (run as a separate step so the raw graph can be audited).
EXPORT_OPTIONS: dict[str, Any] = {"dynamo": True, "optimize": True}
_CASE_FILE = re.compile(r"<parity-gate case (\d+)>")
_SUBMODULE = re.compile(r"(?:^|\.)c\.(\d+)(?:$|\.)")
# How the exporter names the node it failed on: while translating it, or while decomposing
# (the FX interpreter's note, or aot_autograd's functional-graph assertion).
_NODE = re.compile(r"(?:Error when translating node|While executing|entirely functional "
                   r"graph, but found) %(\w+)")
# A node's references to graph inputs: the exported program's `flat_<i>`, or aot_autograd's
# `arg<i>_1` (the same inputs in the same order: the batch module has no parameters).
_ARG_INPUT = re.compile(r"%(?:flat_(\d+)\b|arg(\d+)_1\b)")


class _Case(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> tuple[Any, ...]:
        return tuple(leaves(self.fn(*args)))


class BatchModule(torch.nn.Module):
    """Independent cases side by side: case k reads its own slice of the flat inputs."""

    def __init__(self, fns: list[Callable[..., Any]], arities: list[int]) -> None:
        super().__init__()
        self.c = torch.nn.ModuleList(_Case(fn) for fn in fns)
        self.arities = arities

    def forward(self, *flat: Any) -> tuple[Any, ...]:
        outs: list[Any] = []
        start = 0
        for case, n in zip(self.c, self.arities, strict=True):
            outs.extend(case(*flat[start:start + n]))
            start += n
        return tuple(outs)


@dataclass
class Exported:
    raw: bytes        # translation as emitted, optimizer off (for the dtype audit)
    optimized: bytes  # what `torch.onnx.export(..., optimize=True)` ships (what runs)
    seconds: float
    # per batch position: the ATen ops the exporter translated for that case (it keeps
    # ops eager decomposes, e.g. cross_entropy_loss, and lowers them with torchlib's own)
    graph_ops: dict[int, list[str]] = field(default_factory=dict)


@contextlib.contextmanager
def cached_registry() -> Iterator[None]:
    """Build torchlib's registry once per process instead of once per export.

    `ONNXRegistry.from_torchlib()` is ~70 % of a small export's fixed cost and
    is a pure function of the opset. Guarded: on torch versions without this
    internal, exports simply pay the full cost.
    """
    try:
        from torch.onnx._internal.exporter import _registration
    except ImportError:
        yield
        return
    cls = _registration.ONNXRegistry
    original = cls.__dict__.get("from_torchlib")
    if not isinstance(original, classmethod):
        yield
        return
    cache = _REGISTRIES

    def cached(klass: type, *args: Any, **kwargs: Any) -> Any:
        key = (klass, args, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = original.__func__(klass, *args, **kwargs)
        return cache[key]

    # Patching torch's own class for the duration of a sweep: typed as what it is.
    cls.from_torchlib = classmethod(cached)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        cls.from_torchlib = original  # type: ignore[method-assign,assignment]


_REGISTRIES: dict[Any, Any] = {}


def export_batch(fns: list[Callable[..., Any]], tensors: list[list[Any]],
                 input_names: list[str], output_names: list[str], ids: list[int],
                 grad: bool = False) -> Exported:
    """Capture, translate, optimise; raise StageFailure with culprits (batch positions).

    `ids[i]` is the number the i-th call was compiled under (CASE_FILE).
    """
    import time

    t0 = time.perf_counter()
    module = BatchModule(fns, [len(t) for t in tensors]).eval()
    args = tuple(t for ts in tensors for t in ts)
    mode = torch.enable_grad() if grad else torch.no_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with mode:
                program = torch.export.export(module, args, strict=False)
        except Exception as exc:
            position = {k: i for i, k in enumerate(ids)}
            blamed = {position[k] for k in _frames_blame(exc) if k in position}
            raise _failure(exc, "torch.export", blamed) from None
        seen: dict[str, Any] = {}
        try:
            with cached_registry(), _watch_decomposition(seen, len(fns)):
                onnx_program: Any = torch.onnx.export(
                    program, dynamo=True, optimize=False, verbose=False,
                    input_names=input_names, output_names=output_names)
        except Exception as exc:
            missing = _find(exc, Unsupported)
            if missing is not None:
                raise missing.failure() from None
            blamed = _translation_blame(exc, [seen.get("program"), program],
                                        [len(t) for t in tensors])
            raise _failure(exc, "translation", blamed, conclusive_unsupported=True) from None
        raw = onnx_program.model_proto.SerializeToString()
        try:
            onnx_program.optimize()
        except Exception as exc:
            raise _failure(exc, "optimizer", set()) from None
        optimized = onnx_program.model_proto.SerializeToString()
    return Exported(raw, optimized, time.perf_counter() - t0,
                    graph_ops(seen.get("program"), len(fns)))


def graph_ops(program: Any, n: int) -> dict[int, list[str]]:
    """The ATen ops of the translated program, by the case (submodule) that owns them."""
    out: dict[int, list[str]] = {}
    if program is None:
        return out
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        owner = _owner(node)
        if owner is not None and owner < n:
            names = out.setdefault(owner, [])
            if str(node.target) not in names:
                names.append(str(node.target))
    return out


class Unsupported(Exception):
    """Every op of the decomposed batch that has no translation, by case position."""

    def __init__(self, ops: dict[int, str]) -> None:
        super().__init__(", ".join(sorted(set(ops.values()))))
        self.ops = ops

    def failure(self) -> StageFailure:
        reasons = {k: f"translation: unsupported operator {name}" for k, name in
                   self.ops.items()}
        first = next(iter(reasons.values()))
        return StageFailure(Outcome.UNSUPPORTED_OP, first, f"no ONNX function for: {self}",
                            frozenset(self.ops), conclusive=True, reasons=reasons)


@contextlib.contextmanager
def _watch_decomposition(seen: dict[str, Any], n: int) -> Iterator[None]:
    """Keep the decomposed program the exporter translates, and fail fast on missing ops.

    Translation stops at the first op without an ONNX function; checking
    every node against the same registry right after decomposition names all
    of them at once, so one retry removes every unsupported case of a batch.
    Guarded like `cached_registry`: without these internals nothing changes.
    """
    try:
        from torch.onnx._internal.exporter import _core, _dispatching
    except ImportError:
        yield
        return
    original = _core._prepare_exported_program_for_export

    def watched(program: Any, *, registry: Any) -> Any:
        out = original(program, registry=registry)
        seen["program"] = out
        missing: dict[int, str] = {}
        for node in out.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            if node.target.namespace == "onnx":
                continue
            function, _ = _dispatching.dispatch(node, registry)
            owner = _owner(node)
            if function is None and owner is not None and owner < n:
                missing.setdefault(owner, str(node.target).rsplit(".", 1)[0]
                                   if str(node.target).endswith(".default") else str(node.target))
        if missing:
            raise Unsupported(missing)
        return out

    _core._prepare_exported_program_for_export = watched  # type: ignore[assignment]
    try:
        yield
    finally:
        _core._prepare_exported_program_for_export = original


def _find(exc: BaseException, kind: type) -> Any:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, kind):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _failure(exc: BaseException, stage: str, culprits: set[int],
             conclusive_unsupported: bool = False) -> StageFailure:
    import traceback

    text = _chain_text(exc)
    outcome, reason = classify_export_error(text)
    if outcome is not Outcome.UNSUPPORTED_OP:  # the root cause says more than the wrapper
        root = _root(exc)
        reason = first_line(f"{type(root).__name__}: {root}", 300)
    conclusive = conclusive_unsupported and outcome is Outcome.UNSUPPORTED_OP and bool(culprits)
    detail = "".join(traceback.format_exception(exc))[-4000:]
    return StageFailure(outcome, f"{stage}: {reason}", detail, frozenset(culprits), conclusive)


def _root(exc: BaseException) -> BaseException:
    """The innermost cause: the assertion or lookup that actually failed."""
    seen: set[int] = set()
    cur = exc
    while id(cur) not in seen:
        seen.add(id(cur))
        nxt = cur.__cause__ or cur.__context__
        if nxt is None:
            break
        cur = nxt
    return cur


def _chain_text(exc: BaseException) -> str:
    parts: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    return "\n".join(parts)


def _frames_blame(exc: BaseException) -> set[int]:
    """Cases whose compiled call is on the stack of the exception (or its causes)."""
    found: set[int] = set()
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        tb: TracebackType | None = cur.__traceback__
        while tb is not None:
            m = _CASE_FILE.fullmatch(tb.tb_frame.f_code.co_filename)
            if m:
                found.add(int(m.group(1)))
            tb = tb.tb_next
        cur = cur.__cause__ or cur.__context__
    return found


def _owner(node: Any) -> int | None:
    for path, _ in (node.meta.get("nn_module_stack") or {}).values():
        m = _SUBMODULE.search(path)
        if m:
            return int(m.group(1))
    return None


def _translation_blame(exc: BaseException, programs: list[Any], arities: list[int]) -> set[int]:
    """Pin a translation error on its case via the node it names: looked up in the
    decomposed graph that was translated, else in the captured graph being decomposed,
    else through the node's own references to graph inputs.

    Without this, an error raised while decomposing (a data-dependent guard, a
    non-functional decomposition) costs the batch log2(n) halvings."""
    text = _chain_text(exc)
    found = _NODE.search(text)
    if found is None:
        return set()
    cases: set[int] = set()
    for program in programs:
        if cases:
            break
        for node in program.graph.nodes if program is not None else ():
            if node.name == found.group(1):
                owner = _owner(node)
                if owner is not None:
                    cases.add(owner)
    if not cases:
        owners = [k for k, n in enumerate(arities) for _ in range(n)]
        line = text[found.start():].splitlines()[0]
        refs = [int(a or b) for a, b in _ARG_INPUT.findall(line)]
        cases = {owners[i] for i in refs if i < len(owners)}
    return {c for c in cases if c < len(arities)}
