"""The program and its ONNX translation read node by node (inside a worker; imports torch).

What the blame rule needs from the exporter's output: the module calls of the
`torch.export` program (`layers.Graph`), each node's ATen overload with its
literal arguments and the `file:line` its stack trace names, the ONNX nodes it
became (`pkg.torch.onnx.name_scopes` ends with the FX node's name), and those
nodes cut out as a model of their own, run in ONNX's reference evaluator and in
ONNX Runtime on the same recorded inputs to say whose defect it is.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.compare.owner import owner_rule
from parity_gate.compare.tolerance import close
from parity_gate.engine.runtime import first_line
from parity_gate.localise import layers
from parity_gate.model.files import source_from
from parity_gate.model.upstream import Owner

SCOPES = "pkg.torch.onnx.name_scopes"
NO_STACK = "_empty_nn_module_stack"  # torch.export's stand-in for a node made at the root
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')


def graph_of(program: Any) -> layers.Graph:
    """The exported program's module calls: `nn_module_stack` keys (`fc`, `fc@1`) are calls."""
    user = set(program.graph_signature.user_inputs)
    out = layers.Graph()
    orders: dict[str, int] = {}
    for n in program.graph.nodes:
        if n.op == "output":
            out.outputs = [a.name for a in n.all_input_nodes]
        if n.op != "call_function":
            continue
        stack = [(key, path, kind) for key, (path, kind) in
                 (n.meta.get("nn_module_stack") or {}).items()]
        root = next((k for _, p, k in stack if p == ""), None)
        if root is not None and () not in out.calls:
            out.calls[()] = layers.Call("", _class(root), 1, 1)
        entries = [(key, path, kind) for key, path, kind in stack
                   if path and not key.startswith(NO_STACK)]
        scope = tuple(key for key, _, _ in entries)
        for i, (key, path, kind) in enumerate(entries):
            order = int(key.rsplit("@", 1)[1]) + 1 if "@" in key else 1
            orders[path] = max(orders.get(path, 1), order)
            out.calls.setdefault(scope[: i + 1], layers.Call(path, _class(kind), order, 1))
        inputs = tuple(a.name for a in n.all_input_nodes
                       if a.op == "call_function" or a.name in user)
        out.nodes.append(layers.Node(n.name, scope, inputs, _target(n)))
    for scope, call in out.calls.items():
        out.calls[scope] = layers.Call(call.path, call.kind, call.order,
                                       orders.get(call.path, 1))
    return out


def _class(kind: Any) -> str:
    name = getattr(kind, "__name__", None)
    return str(name) if name else str(kind).rsplit(".", 1)[-1].strip("'>")


def _target(node: Any) -> str:
    """An op overload by its qualified name (`aten.mean.dim`, `prims.var.default`: the
    namespace says whose op it is), any other callable by its name (`getitem`)."""
    if getattr(node.target, "namespace", None) and str(node.target).count(".") >= 2:
        return str(node.target)
    return getattr(node.target, "__name__", str(node.target))


def aten_node(node: Any) -> tuple[Any, str]:
    """The node that names the op (a tuple's `getitem` names its producer) and the index."""
    if node.target is operator.getitem and node.args and hasattr(node.args[0], "target"):
        return node.args[0], f"[{node.args[1]!r}]"
    return node, ""


def call_text(node: Any) -> str:
    """`aten.x.overload(%input, 1, reduce='mean')`: tensors by name, literals as written."""
    op, index = aten_node(node)

    def show(value: Any) -> str:
        if hasattr(value, "op") and hasattr(value, "name"):
            return f"%{value.name}"
        if isinstance(value, (list, tuple)):
            inner = ", ".join(show(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        return repr(value)

    args = [show(a) for a in op.args] + [f"{k}={show(v)}" for k, v in op.kwargs.items()]
    return f"{_target(op)}({', '.join(args)}){index}"[:400]


def options(node: Any) -> dict[str, str]:
    """The schema's optional arguments the call sets away from their default, by name:
    what triggers a defect beyond the op itself (`attn_mask`: "float32 tensor",
    `reduce`: "'mean'", `is_causal`: "True"). A tensor reads as its dtype, a literal as
    written; the required arguments (the data) are not options, but a required string
    names a mode of the op (`reduce='mean'`) and is one."""
    op, _ = aten_node(node)
    schema = getattr(op.target, "_schema", None)
    if schema is None:
        return {}
    given = dict(zip((a.name for a in schema.arguments), op.args, strict=False))
    given.update(op.kwargs)
    out: dict[str, str] = {}
    for arg in schema.arguments:
        value = given.get(arg.name)
        if arg.name not in given or not (arg.has_default_value() or isinstance(value, str)):
            continue
        if hasattr(value, "op"):  # an FX node: a tensor (its dtype from the metadata)
            dtype = getattr(getattr(value, "meta", {}).get("val"), "dtype", None)
            out[arg.name] = f"{str(dtype).removeprefix('torch.')} tensor" if dtype else "tensor"
        elif value is not None and (not arg.has_default_value()
                                    or value != arg.default_value):
            out[arg.name] = repr(value)
    return out


def source_of(node: Any, base: Path | None) -> tuple[str, str]:
    """(`file:line`, the code) of the innermost frame of the node's stack trace."""
    trace = aten_node(node)[0].meta.get("stack_trace") or ""
    lines = trace.strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        found = _FRAME.search(lines[i])
        if found is None:
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        return source_from(f"{found['file']}:{found['line']}", base), code
    return "", ""


def onnx_nodes(proto: Any, fx_name: str) -> list[Any]:
    """The ONNX nodes an FX node became (the exporter's name scope ends with its name)."""
    out = []
    for node in proto.graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        names = _parse_list(meta.get(SCOPES, ""))
        if names and names[-1] == fx_name:
            out.append(node)
    return out


def _parse_list(text: str) -> list[str]:
    """The exporter writes these lists as Python reprs (`['', 'blocks.6', 'add_51']`)."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


@dataclass
class Cut:
    """Some ONNX nodes as a model of their own: what to feed it and what it returns."""

    model: bytes
    feeds: list[str]      # its inputs (values of the full graph)
    output: str           # the culprit's value
    ops: list[str]        # op types, Constants left out
    outputs: list[str]    # every value it returns (the culprit's first)


def cut(proto: Any, group: list[Any], output: str) -> Cut | None:
    """`group` (graph order) with the Constants it reads, its weights as initializers."""
    import onnx
    from onnx import helper

    graph = proto.graph
    constants = {o: n for n in graph.node if n.op_type == "Constant" for o in n.output}
    nodes = list(group)
    produced = {o for n in nodes for o in n.output}
    for name in [i for n in group for i in n.input]:
        if name and name not in produced and name in constants:
            nodes.insert(0, constants[name])
            produced.update(constants[name].output)
    if output not in produced:
        return None
    weights = {t.name: t for t in graph.initializer}
    outside = list(dict.fromkeys(i for n in nodes for i in n.input
                                 if i and i not in produced))
    typed = {v.name: v for v in (*graph.value_info, *graph.output, *graph.input)}
    feeds = [i for i in outside if i not in weights]
    inputs = [typed[i] if i in typed else helper.make_value_info(i, onnx.TypeProto())
              for i in feeds]
    returned = [output] + [o for n in nodes if n.op_type != "Constant" for o in n.output
                           if o != output and o in typed]
    if output not in typed:
        return None
    sub = helper.make_graph(nodes, "culprit", inputs, [typed[o] for o in returned],
                            initializer=[weights[i] for i in outside if i in weights])
    model = helper.make_model(sub, opset_imports=list(proto.opset_import),
                              ir_version=proto.ir_version)
    model.functions.extend(proto.functions)
    return Cut(model.SerializeToString(), feeds, output,
               [n.op_type for n in group if n.op_type != "Constant"], returned)


@dataclass
class Verdict:
    """The culprit's nodes alone, in ONNX Runtime and against an oracle of what the ONNX
    graph computes: the op's definition (compare.spec) where it has a record, else ONNX's
    reference evaluator."""

    reproduces: bool         # the nodes alone differ from eager in ONNX Runtime
    owner: Owner | None      # None: unknown (`owned_by` says why)
    owned_by: str
    reference: str           # what the oracle was and what the reference evaluator did
    onnx: np.ndarray
    ref: np.ndarray | None   # ONNX's reference evaluator's answer (the repro prints it)


def judge(part: Cut, feeds: dict[str, np.ndarray], eager: np.ndarray, tol: cmp.Tolerance,
          provider: str, fx_node: Any) -> Verdict:
    """Run the cut in ONNX Runtime (the case's provider), in `onnx.reference` and, where the
    op has a record, by its definition (compare.spec); the definition is the oracle
    where it exists, since the reference evaluator is not one on every value (MaxPool
    over NaN)."""
    import onnx
    import onnxruntime as ort

    from parity_gate.compare import spec

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(part.model, options, providers=[provider])
    got = dict(zip(part.outputs, session.run(part.outputs, feeds), strict=True))
    ref, every, said = _reference(part, feeds, eager.dtype)
    out = part.output
    model = onnx.load_from_string(part.model)
    ort_ok = layers.agreement(eager, got[out], tol).passed
    undefined = spec.undefined_at(model, {**feeds, **every}) if every else None
    if undefined is not None and not ort_ok:
        # no value is wrong by the standard there: the graph relies on what it leaves open
        return Verdict(True, Owner.TRANSLATION, translation_of(fx_node),
                       f"the standard leaves the result undefined: {undefined}", got[out],
                       None if ref is None else ref[out])
    defined = spec.evaluate(model, feeds, out, like=eager.dtype, computed=every)
    oracle: np.ndarray | None = None if ref is None else ref[out]
    if defined is not None:
        by_spec = defined[0]
        said = f"judged by the op's definition ({defined[1].basis})" + (
            "" if ref is None else _reference_against(ref[out], by_spec, tol))
        oracle = by_spec
    with_eager = None if oracle is None else layers.agreement(eager, oracle, tol).passed
    with_ort = None if oracle is None else layers.agreement(got[out], oracle, tol).passed
    rule = owner_rule(with_eager, with_ort)
    if ort_ok:
        by = "the culprit's nodes alone match eager in ONNX Runtime"
    elif rule.owner is Owner.KERNEL:
        names = {**(ref or {}), out: oracle} if oracle is not None else (ref or {})
        by = f"{_kernel(part, got, names, tol)} on {provider}"
    elif rule.owner is Owner.TRANSLATION:
        by = translation_of(fx_node)
    elif rule.why == "split":
        assert oracle is not None
        by = _split(eager, got[out], oracle, tol,
                    "the op's definition" if defined is not None else
                    "ONNX's reference evaluator")
    else:
        by = said if oracle is None else rule.why
    return Verdict(not ort_ok, None if ort_ok else rule.owner, by, said, got[out],
                   None if ref is None else ref[out])


def _reference(part: Cut, feeds: dict[str, np.ndarray], dtype: np.dtype[Any]
               ) -> tuple[dict[str, np.ndarray] | None, dict[str, Any], str]:
    """ONNX's reference evaluator on the cut: its outputs, every intermediate value (for
    the standard's undefined cases) and what it did ("ran", or why it could not)."""
    try:
        from onnx.reference import ReferenceEvaluator

        with np.errstate(all="ignore"):
            every = ReferenceEvaluator(part.model).run(None, feeds, intermediate=True)
        assert isinstance(every, dict)
        return {n: np.asarray(every[n]) for n in part.outputs}, every, "ran"
    except Exception as exc:
        return None, {}, (f"ONNX's reference evaluator cannot run {', '.join(part.ops)} in "
                          f"{dtype}: {first_line(f'{type(exc).__name__}: {exc}')}")


def _reference_against(ref: np.ndarray, defined: np.ndarray, tol: cmp.Tolerance) -> str:
    """What the reference evaluator did beside the definition: agreed, or where not."""
    off = ~_close(defined, ref, tol)
    if not off.any():
        return "; ONNX's reference evaluator agrees with it"
    nan = int((off & np.isnan(defined.astype(np.float64))).sum())
    return (f"; ONNX's reference evaluator departs from it on {int(off.sum())} element(s)"
            + (f", {nan} of them where the definition gives NaN" if nan else ""))


def _split(eager: np.ndarray, got: np.ndarray, ref: np.ndarray, tol: cmp.Tolerance,
           oracle: str) -> str:
    """Where the oracle agrees with neither side as a whole: whom it sides with on the
    elements ONNX Runtime gets wrong."""
    wrong = ~_close(eager, got, tol)
    with_eager = int((wrong & _close(eager, ref, tol)).sum())
    with_ort = int((wrong & _close(got, ref, tol)).sum())
    return (f"{oracle} agrees with neither eager nor ONNX Runtime: of the "
            f"{int(wrong.sum())} elements ONNX Runtime gets wrong it sides with eager on "
            f"{with_eager}, with ONNX Runtime on {with_ort}")


def _close(a: np.ndarray, b: np.ndarray, tol: cmp.Tolerance) -> np.ndarray:
    """Elementwise, the comparison's pass rule (NaN equals NaN, infinities only themselves)."""
    if a.shape != b.shape:
        return np.zeros(a.shape, bool)
    return close(a, b, tol.atol, tol.rtol)


def _kernel(part: Cut, got: dict[str, np.ndarray], ref: dict[str, np.ndarray],
            tol: cmp.Tolerance) -> str:
    """The first op whose output ONNX Runtime and the reference disagree on."""
    import onnx

    model = onnx.load_from_string(part.model)
    for node in model.graph.node:
        if node.op_type == "Constant":
            continue
        if any(o in got and o in ref and not layers.agreement(ref[o], got[o], tol).passed
               for o in node.output):
            return node.op_type
    return part.ops[-1] if part.ops else "?"


def translation_of(fx_node: Any) -> str:
    """The torchlib function the exporter translates this node with (onnxscript's registry)."""
    op, _ = aten_node(fx_node)
    try:
        from onnxscript.function_libs.torch_lib.registration import default_registry

        name = op.target.name()  # "aten::max.dim", "aten::amax"
        keys = [k for k in (name, name.split(".")[0]) if k in default_registry]
        if keys:
            found = default_registry[keys[0]]
            fn = next((f for f in found.overloads), None) or next(iter(found.complex), None)
            if fn is not None:
                module = getattr(fn, "__module__", "") or ""
                module = module.removeprefix("onnxscript.function_libs.")
                return f"onnxscript {module}.{fn.name}" if module else f"onnxscript {fn.name}"
    except Exception:  # the registry's layout is onnxscript's, not ours
        pass
    return f"the exporter's translation of {_target(op)}"


def literal(value: Any) -> str | None:
    """`value` as Python source for the repro's eager call (None: not a literal)."""
    import torch

    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if np.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (list, tuple)):
        parts = [literal(v) for v in value]
        if any(p is None for p in parts):
            return None
        inner = ", ".join(p for p in parts if p is not None)
        return f"[{inner}]" if isinstance(value, list) else f"({inner},)"
    return None


def eager_call(node: Any, tensors: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The node as one eager call in source (`torch.ops.aten.amax.default(A["x"], [-1])`)
    and the tensors it reads, by name; None when an argument is no literal."""
    import torch

    op, index = aten_node(node)
    if not isinstance(op.target, torch._ops.OpOverload):
        return None
    used: dict[str, Any] = {}

    def show(value: Any) -> str | None:
        if hasattr(value, "op") and hasattr(value, "name"):
            got = tensors.get(value.name)
            if isinstance(got, torch.Tensor):
                used[value.name] = got
                return f"A[{value.name!r}]"
            return literal(got)
        if isinstance(value, (list, tuple)):
            parts = [show(v) for v in value]
            if any(p is None for p in parts):
                return None
            inner = ", ".join(p for p in parts if p is not None)
            return f"[{inner}]" if isinstance(value, list) else f"({inner},)"
        return literal(value)

    args = [show(a) for a in op.args]
    kwargs = {k: show(v) for k, v in op.kwargs.items()}
    if any(a is None for a in args) or any(v is None for v in kwargs.values()):
        return None
    name = f"torch.ops.{op.target.namespace}.{op.target._opname}.{op.target._overloadname}"
    text = ", ".join([*(a for a in args if a is not None),
                      *(f"{k}={v}" for k, v in kwargs.items())])
    return f"{name}({text}){index}", used
