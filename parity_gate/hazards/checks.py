"""The hazard checks: each reads one `HazardContext` and returns what it found.

Every check is static (it reads the export's artifacts) except where said: the
in-place check under the legacy exporter runs one eager forward under a dispatch
mode, and precision-cast re-translates the already captured ExportedProgram
with the optimizer off when the program mixes float widths. Checks return
`Found` (message, sites, optional severity); the runner adds the rule's id, fix
and the manifest's action.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from parity_gate.hazards import branches as br
from parity_gate.hazards import graph as og
from parity_gate.hazards.context import ExporterWarning, HazardContext, in_library
from parity_gate.hazards.precision import FLOAT_BITS, audit_nodes, value_types
from parity_gate.hazards.rules import RULES, Rule
from parity_gate.hazards.runtimes import RELEASES, SOURCE, parse_target
from parity_gate.hazards.sizes import ASSUMED, size_expr
from parity_gate.model.hazards import Severity, Site


@dataclass(frozen=True)
class Found:
    message: str
    sites: list[Site] = field(default_factory=list)
    severity: Severity | None = None  # None: the rule's


def _claimed_by(rule: Rule, w: ExporterWarning) -> bool:
    return any(re.search(p, w.text) for p in rule.claims)


def _claims(rule_id: str, ctx: HazardContext) -> list[ExporterWarning]:
    rule = next(r for r in RULES if r.id == rule_id)
    return [w for w in ctx.warnings if _claimed_by(rule, w)]


def _short(text: str, n: int = 240) -> str:
    line = " ".join(text.split())
    return line if len(line) <= n else line[: n - 1] + "…"


def _sites(sites: Iterable[Site], n: int = 10) -> list[Site]:
    return list(dict.fromkeys(sites))[:n]


# --------------------------------------------------------------------------- training-mode


def training_mode(ctx: HazardContext) -> list[Found]:
    found = []
    dependent = [t for t in ctx.training if not t.startswith("<root>")]
    if dependent:
        names = ", ".join(dependent[:6]) + (" …" if len(dependent) > 6 else "")
        found.append(Found(
            f"the factory returned the module in training mode ({names}); an export of it "
            "captures dropout and batch statistics (parity-gate called .eval() before "
            "exporting)", _sites(Site(module=t.split(" (")[0]) for t in dependent)))
    elif ctx.training:
        found.append(Found("the factory returned the module in training mode; no submodule "
                           "depends on the mode, so this export is unaffected (parity-gate "
                           "called .eval())", severity=Severity.INFO))
    for w in _claims("training-mode", ctx):
        found.append(Found(f"the exporter says: {_short(w.message)}",
                           [Site(source=w.source)] if w.source and not w.in_torch else []))
    return found


# --------------------------------------------------------------------------- baked-dim

_SHAPE_OPERAND = {"Reshape": 1, "Expand": 1, "ConstantOfShape": 0, "Slice": 2}


def baked_dim(ctx: HazardContext) -> list[Found]:
    """A size operand that is a literal equal to a dynamic dim's export size, where the
    dim flows: the Reshape's input carries the symbol on that axis, or the op's result
    (static there) is combined with a tensor that carries it."""
    model = ctx.inferred
    g = model.graph
    symbols = _graph_symbols(ctx, model)
    if not symbols:
        return []
    consts = og.constants(g)
    dims = og.dims(g)
    users = og.consumers(g)
    found: list[Found] = []
    for node in g.node:
        index = _SHAPE_OPERAND.get(node.op_type)
        if index is None or len(node.input) <= index:
            continue
        literal = consts.get(node.input[index])
        if literal is None or literal.ndim != 1 or literal.dtype.kind not in "iu":
            continue
        values = [int(v) for v in literal.tolist()]
        hit = _baked_axis(node, values, dims, users, symbols)
        if hit is not None:
            _param, (symbol, size) = hit
            found.append(Found(
                f"{node.op_type} {node.name} uses the literal size {size} where dim "
                f"{symbol!r} (declared dynamic, {size} in the export example) flows: other "
                f"sizes of {symbol!r} fail or silently reshape ({values})",
                [og.node_site(node)]))
    return found


_SWEEP = range(2, 65)  # sizes a dynamic dim may take (torch.export's default range starts at 2)


def unchecked_size_assumption(ctx: HazardContext) -> list[Found]:
    """Equalities on dynamic dims that the exported program computed and then dropped:
    a decomposition that read a size as a Python number (torch 2.13's ONNX decomposition of
    `adaptive_avg_pool2d(x, 4)` at 8x8 assumes `h % 4 == 0` and `h // 4 == 2` and writes
    an AveragePool with window 2) leaves the condition as a dead node, neither a guard
    nor a runtime assert. The ONNX graph then holds only for sizes that satisfy it and
    gives silently wrong values (or another shape) for the rest. A dead condition whose
    value is the same for every size in the dims' range (`batch == 1` with batch >= 2, a
    tautology) restricts nothing and is not reported. Read from `size_facts`, the
    decomposed program's conditions as data (kept with a cached translation)."""
    facts = ctx.size_facts()
    if not facts.get("conditions"):
        return []
    dims = {name: dict(spec.dynamic) for spec, name in
            zip(ctx.inputs, facts["user_inputs"], strict=False)}
    sizes = ctx.sizes()
    found: list[str] = []
    site: list[Site] = []
    for condition in facts["conditions"]:
        tree = condition["tree"]
        expr = size_expr(tree, dims)
        if expr is None:
            continue
        text, value, symbols = expr
        if not symbols or any(s not in sizes for s in symbols):
            continue
        free = ctx.gate.free(symbols)
        try:
            held = bool(value(sizes))
            # sizes as the gate feeds them: a sum it declares (past_seq = past + seq) moves
            # with its parts, so an assumption that the sum implies holds at every size
            if all(bool(value(ctx.gate.complete({**sizes, s: v}))) == held
                   for s in free for v in _SWEEP):
                continue  # the same at every size: no restriction
        except ArithmeticError:  # a division by a size expression that can be 0
            continue
        said = text if held else text.replace(f" {ASSUMED[tree[0]][0]} ",
                                              f" {ASSUMED[tree[0]][1]} ", 1)
        if said in found:
            continue
        found.append(said)
        trace = condition.get("trace") or ""
        if not site and trace:
            site = [Site(source=og.source_of(trace))]
    if not found:
        return []
    return [Found(f"the exported program assumes {', '.join(found)} about dynamic dims "
                  f"(true at the export sizes {', '.join(f'{k}={v}' for k, v in sizes.items())})"
                  " and nothing checks it at run time: a decomposition read the size as a "
                  "number, so sizes that break it give silently wrong values or another shape",
                  site)]


def _graph_symbols(ctx: HazardContext, model: Any) -> dict[str, tuple[str, int]]:
    """Graph dim_param of each declared dynamic dim → (manifest symbol, export size >= 2)."""
    sizes = ctx.sizes()
    by_name = {v.name: v for v in model.graph.input}
    out: dict[str, tuple[str, int]] = {}
    for spec in ctx.inputs:
        gi = by_name.get(spec.name)
        if gi is None:
            continue
        gdims = gi.type.tensor_type.shape.dim
        for index, symbol in spec.dynamic.items():
            size = sizes.get(symbol, 0)
            if index < len(gdims) and gdims[index].dim_param and size >= 2:
                out[gdims[index].dim_param] = (symbol, size)
    return out


def _baked_axis(node: Any, values: list[int], dims: dict[str, list[og.Dim]],
                users: dict[str, list[Any]], symbols: dict[str, tuple[str, int]]
                ) -> tuple[str, tuple[str, int]] | None:
    out_dims = dims.get(node.output[0]) or []
    for param, (symbol, size) in symbols.items():
        if size not in values:
            continue
        if node.op_type == "Reshape":
            data = dims.get(node.input[0]) or []
            for a, d in enumerate(data):
                if (d == param and a < len(values) and values[a] == size
                        and not (a < len(out_dims) and out_dims[a] == param)):
                    return param, (symbol, size)
        for a, d in enumerate(out_dims):
            if d != size:
                continue
            back = len(out_dims) - a
            for user in users.get(node.output[0], []):
                for other in user.input:
                    od = dims.get(other) or []
                    if other != node.output[0] and len(od) >= back and od[-back] == param:
                        return param, (symbol, size)
    return None


# --------------------------------------------------------------------------- control flow

_DATA_DEPENDENT = re.compile(r"GuardOnDataDependentSymNode|Could not guard on data-dependent|"
                             r"data-dependent expression|Dynamic control flow is not supported")
_CAUSED_BY = re.compile(r"Caused by: \(?([^\s()]+?\.py):(\d+) in (\w+)\)?")


def python_control_flow(ctx: HazardContext) -> list[Found]:
    found: list[Found] = []
    for w in _claims("python-control-flow", ctx):
        if w.in_torch:
            found.append(Found(f"inside torch ({w.source}): {_short(w.message, 160)}",
                               [Site(source=w.source)], Severity.INFO))
        else:
            found.append(Found(f"the trace recorded a Python value: {_short(w.message, 160)}",
                               [Site(source=w.source)] if w.source else []))
    found += _guards(ctx)
    return found


def _guards(ctx: HazardContext) -> list[Found]:
    """Declared dims whose torch.export range excludes a batch size the gate tests: the
    program guarded on the size (a Python branch), so other sizes run the wrong branch."""
    ep = ctx.program
    if ep is None:
        return []
    found = []
    for spec, shape in _user_input_shapes(ep, ctx):
        for index, symbol in spec.dynamic.items():
            d = shape[index] if index < len(shape) else None
            expr = getattr(getattr(d, "node", None), "expr", None)
            vr = ep.range_constraints.get(expr) if expr is not None else None
            if vr is None:
                continue
            lower, upper = _bound(vr.lower) or 0, _bound(vr.upper)
            tested = ctx.batch_sizes if symbol == "batch" else ()
            outside = [b for b in tested if b < lower or (upper is not None and b > upper)]
            if outside:
                span = f"[{lower}, {upper}]" if upper is not None else f"[{lower}, ∞)"
                found.append(Found(
                    f"torch.export guarded input {spec.name!r} dim {index} ({symbol!r}) to "
                    f"{span}: forward branches on that size, so the graph is only valid "
                    f"there and {symbol} {', '.join(map(str, outside))} runs the branch the "
                    "export example took", [Site(node=spec.name)]))
    return found


def _bound(x: Any) -> int | None:
    """A range bound as an int; None for sympy's infinity."""
    return None if "oo" in str(x) else int(x)


def python_control_flow_failure(ctx: HazardContext) -> list[Found]:
    if not _DATA_DEPENDENT.search(ctx.error):
        return []
    m = _CAUSED_BY.search(ctx.error)
    source = f"{m.group(1)}:{m.group(2)}" if m else og.source_of(ctx.error)
    return [Found("torch.export cannot trace a branch on a tensor's value (.item(), bool() "
                  "or if on a tensor in forward)", [Site(source=source)] if source else [])]


# --------------------------------------------------------------------------- in-place

_MUTATION = re.compile(r"Removing mutation from node (\S+) on block input: '([^']+)'")


def in_place(ctx: HazardContext) -> list[Found]:
    found: list[Found] = []
    for w in _claims("in-place", ctx):
        m = _MUTATION.search(w.message)
        what = (f"the legacy exporter dropped the in-place {m.group(1)} on graph input "
                f"{m.group(2)!r}" if m else "the exporter warned about an in-place op")
        found.append(Found(f"{what}: {_short(w.message, 160)}"))
    if ctx.program is not None:
        found += _mutations_from_signature(ctx)
    elif ctx.module is not None and ctx.example:
        found += _mutations_from_eager(ctx)
    return found


def _mutations_from_signature(ctx: HazardContext) -> list[Found]:
    sig = ctx.program.graph_signature
    found = [Found(f"forward writes its input {name!r} in place; the exported graph returns "
                   "new tensors and leaves the caller's input unchanged", [Site(node=name)])
             for name in dict.fromkeys(sig.user_inputs_to_mutate.values())]
    found += [Found(f"forward updates {name!r} in place; the exported graph reads its "
                    "export-time value as a constant and loses the update",
                    [Site(module=name.rsplit(".", 1)[0])] if "." in name else [])
              for name in dict.fromkeys([*sig.buffers_to_mutate.values(),
                                         *getattr(sig, "parameters_to_mutate", {}).values()])]
    return found


def _mutations_from_eager(ctx: HazardContext) -> list[Found]:
    """One eager forward under a dispatch mode: in-place writes to inputs or module state."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    names = [spec.name for spec in ctx.inputs]
    args = [t.clone() if isinstance(t, torch.Tensor) else t for t in ctx.example]
    owners: dict[int, str] = {}
    for name, t in zip(names, args, strict=False):
        if isinstance(t, torch.Tensor):
            owners[t.untyped_storage().data_ptr()] = f"input {name!r}"
    for name, t in [*ctx.module.named_parameters(), *ctx.module.named_buffers()]:
        owners.setdefault(t.untyped_storage().data_ptr(), f"state {name!r}")
    writes: dict[str, str] = {}

    class _Writes(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            schema = func._schema
            if schema.is_mutable:
                for i, a in enumerate(schema.arguments):
                    if a.alias_info is None or not a.alias_info.is_write:
                        continue
                    val = args[i] if i < len(args) else kwargs.get(a.name)
                    if isinstance(val, torch.Tensor) and val.numel():
                        owner = owners.get(val.untyped_storage().data_ptr())
                        if owner:
                            writes.setdefault(owner, str(func.overloadpacket))
            return func(*args, **kwargs)

    saved = {k: v.detach().clone() for k, v in ctx.module.state_dict().items()}
    try:
        with torch.no_grad(), _Writes():
            ctx.module(*args)
    finally:
        ctx.module.load_state_dict(saved)
    return [Found(f"forward writes {owner} in place ({op}); the exported graph "
                  + ("cannot mutate the caller's tensor" if owner.startswith("input")
                     else "bakes its export-time value as a constant and loses the update"),
                  _owner_sites(owner))
            for owner, op in writes.items()]


def _owner_sites(owner: str) -> list[Site]:
    name = owner.split("'")[1]
    if owner.startswith("input"):
        return [Site(node=name)]
    return [Site(module=name.rsplit(".", 1)[0])] if "." in name else []


# --------------------------------------------------------------------------- constants

_RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Bernoulli", "Multinomial"})
# Consumers that read a constant as data (not as a shape, scale or padding operand).
_DATA_USERS = frozenset({"Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Pow", "Concat",
                         "Where", "Max", "Min", "Mod", "Conv", "Equal", "Less", "Greater"})
_LARGE_BYTES = 1024


def _large(array: Any) -> bool:
    return bool(array.nbytes >= _LARGE_BYTES or (array.dtype.kind in "fc" and array.size >= 2))


def constants_in_forward(ctx: HazardContext) -> list[Found]:
    found: list[Found] = []
    random = [n for n in og.walk(ctx.proto.graph) if n.op_type in _RANDOM_OPS]
    if random:
        ops = ", ".join(sorted({n.op_type for n in random}))
        found.append(Found(f"forward draws random numbers ({ops}, {len(random)} node(s)): the "
                           "exported model returns different values on every run",
                           _sites(og.node_site(n) for n in random), Severity.ERROR))
    lifted = _lifted_constants(ctx) if ctx.program is not None else _constant_nodes(ctx)
    for w in _claims("constants-in-forward", ctx):
        lifted.append((0, Site(source=w.source) if not w.in_torch else Site()))
    if lifted:
        total = sum(b for b, _ in lifted)
        count = sum(1 for b, _ in lifted if b)
        sized = f"{count} tensor(s), {total:,} bytes" if count else "tensors"
        found.append(Found(f"forward builds {sized} that the graph carries as constants "
                           "instead of weights (the exporter traces torch.tensor(...) in "
                           "forward as a fixed value)", _sites(s for _, s in lifted)))
    return found


def _lifted_constants(ctx: HazardContext) -> list[tuple[int, Site]]:
    """Tensors created in forward, which torch.export lifts as constants."""
    ep = ctx.program
    lifted = ep.graph_signature.inputs_to_lifted_tensor_constants
    nodes = {n.name: n for n in ep.graph.nodes}
    out = []
    for placeholder, name in lifted.items():
        tensor = ep.constants.get(name)
        if tensor is None or not _large(tensor.detach().cpu().numpy()):
            continue
        users = list(nodes[placeholder].users) if placeholder in nodes else []
        trace = next((u.meta.get("stack_trace", "") for u in users if u.meta.get("stack_trace")),
                     "")
        stack = next((u.meta.get("nn_module_stack") for u in users
                      if u.meta.get("nn_module_stack")), None) or {}
        module = list(stack.values())[-1][0] if stack else ""
        out.append((int(tensor.nbytes), Site(module=module, source=og.source_of(trace))))
    return out


def _constant_nodes(ctx: HazardContext) -> list[tuple[int, Site]]:
    g = ctx.proto.graph
    users = og.consumers(g)
    out = []
    for node in g.node:
        if node.op_type != "Constant":
            continue
        value = og.constants(_single(node)).get(node.output[0])
        if value is None or not _large(value):
            continue
        if any(u.op_type in _DATA_USERS for u in users.get(node.output[0], [])):
            out.append((int(value.nbytes), og.node_site(node)))
    return out


def _single(node: Any) -> Any:
    import onnx

    return onnx.helper.make_graph([node], "one", [], [])


# --------------------------------------------------------------------------- opset

def opset_too_new(ctx: HazardContext) -> list[Found]:
    if not ctx.target_runtime:
        return []
    target = parse_target(ctx.target_runtime)
    model = ctx.proto
    opset, ml, ir = og.opset(model), og.opset(model, "ai.onnx.ml"), int(model.ir_version)
    release = target.oldest
    if release is None:
        return [Found(f"target {target} is newer than the compatibility table ({SOURCE}, last "
                      f"row onnxruntime {RELEASES[0].version}): opset {opset} and IR version "
                      f"{ir} were not checked", severity=Severity.INFO)]
    over = []
    if opset is not None and opset > release.opset:
        over.append(f"opset {opset} > {release.opset}")
    if ml is not None and ml > release.ml_opset:
        over.append(f"ai.onnx.ml opset {ml} > {release.ml_opset}")
    if ir > release.ir_version:
        over.append(f"IR version {ir} > {release.ir_version}")
    if not over:
        return []
    return [Found(f"the model is stamped newer than {target} runs: onnxruntime "
                  f"{release.version} (the oldest it admits) implements opset "
                  f"{release.opset} and IR version {release.ir_version} ({'; '.join(over)}; "
                  f"table: {SOURCE})")]


def opset_not_honoured(ctx: HazardContext) -> list[Found]:
    """torch.onnx.export(dynamo=True, opset_version=7) returns an opset-18 model without an
    error: a gate that records only what it got would pass a model the user never asked for."""
    got = og.opset(ctx.proto)
    if ctx.opset is None or got is None or got == ctx.opset:
        return []
    return [Found(f"export.opset asked for opset {ctx.opset}, but the exporter produced "
                  f"opset {got} (the {ctx.exporter} exporter did not convert it)")]


# --------------------------------------------------------------------------- precision-cast


def precision_cast(ctx: HazardContext) -> list[Found]:
    """Nodes of the unoptimized graph that compute in a narrower float than the program node
    they were translated from. Skipped (free) when neither the program nor the exported
    graph mixes float widths: then no op can run narrower than it was asked to."""
    if ctx.program is None or (len(set(_program_dtypes(ctx.program).values())) <= 1
                               and len(_float_widths(ctx.proto)) <= 1):
        return []
    ep = ctx.decomposed()  # the unoptimized graph's node names are this program's
    dtypes = _program_dtypes(ep)
    import onnx

    raw = ctx.proto if not ctx.optimized else onnx.load_from_string(_unoptimized(ctx))
    expected = {i: dtypes[name] for i, node in enumerate(raw.graph.node)
                if (name := og.fx_name(node)) in dtypes}
    by_program: dict[str, list[Any]] = {}
    for i, finding in audit_nodes(raw, value_types(raw), expected):
        by_program.setdefault(og.fx_name(raw.graph.node[i]), []).append((i, finding))
    found = []
    for name, hits in by_program.items():
        first = hits[0][1]
        ops = ", ".join(f"{f.op_type} {f.node}" for _, f in hits[:5]) + (
            f" and {len(hits) - 5} more" if len(hits) > 5 else "")
        found.append(Found(f"the program's {name} returns {first.expected} but its "
                           f"translation computes in {first.computed_in} ({ops}; graph with "
                           "the optimizer off)",
                           _sites(og.node_site(raw.graph.node[i]) for i, _ in hits)))
    return found


def _program_dtypes(ep: Any) -> dict[str, str]:
    """Each floating node of a program: its dtype's name."""
    dtypes: dict[str, str] = {}
    for n in ep.graph.nodes:
        val = n.meta.get("val")
        if getattr(val, "is_floating_point", lambda: False)():
            dtypes[n.name] = str(val.dtype).removeprefix("torch.")
    return dtypes


def _float_widths(model: Any) -> set[int]:
    return {t for t in value_types(model).values() if t in FLOAT_BITS}


def _unoptimized(ctx: HazardContext) -> bytes:
    """The captured program translated again with the optimizer off (no second trace)."""
    import torch

    options = {k: v for k, v in ctx.export_options.items()
               if k in ("custom_translation_table", "dispatch_options")}
    if ctx.opset is not None:
        options["opset_version"] = ctx.opset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(ctx.decomposed(), (), dynamo=True, optimize=False,
                                    verbose=False, **options)
    assert program is not None  # dynamo=True always returns an ONNXProgram
    return bytes(program.model_proto.SerializeToString())


# --------------------------------------------------------------------------- unsupported-op

_DYNAMO_OP = re.compile(r"No ONNX function found for <OpOverload\(op='([\w.:]+)', "
                        r"overload='(\w+)'\)>")
_FX_NODES = re.compile(r"Unsupported FX nodes: \{'call_function': \[([^\]]+)\]")
_TS_OP = re.compile(r"Exporting the operator '([\w.:]+)' to ONNX opset version (\d+) is not "
                    r"supported")
_PY_OP = re.compile(r"Couldn't export Python operator (\w+)")


def unsupported_op(ctx: HazardContext) -> list[Found]:
    text = ctx.error
    if m := _PY_OP.search(text):
        return [Found(f"the legacy exporter cannot export the autograd Function {m.group(1)}: "
                      "give it a `symbolic(g, ...)` staticmethod that builds it from ONNX ops, "
                      "or export with the dynamo exporter, which traces through it")]
    if m := _TS_OP.search(text):
        op, opset = m.group(1), int(m.group(2))
        return [Found(f"unsupported operator {op} at opset {opset}: {_ts_advice(op, opset)}")]
    m = _DYNAMO_OP.search(text)
    ops = [f"{m.group(1)}.{m.group(2)}"] if m else []
    if not ops and (f := _FX_NODES.search(text)):
        ops = [o.strip(" '\"") for o in f.group(1).split(",") if o.strip()]
    return [Found(f"unsupported operator {op}: {_dynamo_advice(op)}") for op in ops]


@functools.lru_cache(maxsize=1)
def _ts_registry() -> Any:
    import importlib
    import pkgutil

    import torch.onnx._internal.torchscript_exporter as te
    from torch.onnx._internal.torchscript_exporter import registration

    for mod in pkgutil.iter_modules(te.__path__):
        if mod.name.startswith("symbolic_opset"):
            importlib.import_module(f"{te.__name__}.{mod.name}")
    return registration.registry


def _ts_opsets(op: str) -> list[int]:
    group = _ts_registry().get_function_group(op)
    return [] if group is None else [v for v in range(7, 27) if group.get(v) is not None]


def _dynamo_has(op: str) -> bool:
    import torch
    from torch.onnx._internal.exporter import _registration

    namespace, _, rest = op.replace("::", ".").partition(".")
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace, None), name, None)
    target = getattr(packet, overload or "default", None)
    return target is not None and bool(_registration.ONNXRegistry.from_torchlib()
                                       .is_registered(target))


def _ts_advice(op: str, opset: int) -> str:
    later = [v for v in _ts_opsets(op) if v > opset]
    if later:
        return f"the legacy exporter translates it from opset {later[0]} (export.opset: {later[0]})"
    if _dynamo_has(op):
        return "the dynamo exporter translates it (export.exporter: dynamo)"
    return ("neither exporter translates it at any opset: register a symbolic "
            "(torch.onnx.register_custom_op_symbolic) or rewrite it with supported ops")


def _dynamo_advice(op: str) -> str:
    legacy = _ts_opsets(op.split(".")[0] + "::" + op.split(".")[1]) if "." in op else []
    if legacy:
        return (f"the legacy exporter has a symbolic for it from opset {legacy[0]} "
                "(export.exporter: torchscript)")
    return (f"no translation in torchlib nor in the legacy exporter: pass one in "
            f"custom_translation_table={{torch.ops.{op}: <onnxscript function>}} "
            "(export.options) or rewrite it with supported ops")


# --------------------------------------------------------------------------- warnings


def exporter_warnings(ctx: HazardContext) -> list[Found]:
    """Every warning no other rule explains, once per text and place."""
    others = [r for r in RULES if r.id != "exporter-warnings" and ctx.exporter in r.exporters]
    found = []
    for w in dict.fromkeys(ctx.warnings):
        if any(_claimed_by(r, w) for r in others):
            continue
        site = [Site(source=w.source)] if w.source and not w.in_torch else []
        found.append(Found(_short(w.text, 400), site))
    return found


# --------------------------------------------------------------------------- by design

# The probes that return True while each exporter traces forward (measured on torch 2.13;
# tests/test_hazards.py re-measures them): a branch on any other probe takes eager's path.
PROBES: dict[str, frozenset[str]] = {
    "dynamo": frozenset({"is_in_onnx_export", "is_exporting", "is_compiling"}),
    "torchscript": frozenset({"is_in_onnx_export", "is_tracing"}),
}
# Every probe a forward may ask (all false in eager); tests/test_hazards.py measures each.
KNOWN_PROBES = frozenset({"is_in_onnx_export", "is_tracing", "is_scripting", "is_exporting",
                          "is_compiling", "is_dynamo_compiling"})


def eager_mismatch_by_design(ctx: HazardContext) -> list[Found]:
    """A probe call in a module class's code. Under the dynamo exporter the captured
    program shows which side of the probe's branch the export took (`branches`): reported
    only where the program holds operations eager does not run, or provably lacks eager's;
    a probe whose branch the program cannot settle is a note. The legacy exporter leaves
    no program: every call to a probe it sets is reported."""
    if ctx.module is None:
        return []
    paths: dict[type, str] = {}
    for path, sub in ctx.module.named_modules():
        paths.setdefault(type(sub), path)
    ran = br.program_lines(ctx.program) if ctx.program is not None else None
    found = []
    for cls, path in paths.items():
        if cls.__module__.startswith("torch."):
            continue
        for site in br.probe_sites(cls, PROBES.get(ctx.exporter, frozenset()),
                                      KNOWN_PROBES):
            head = f"{cls.__qualname__} calls {site.probe}() ({site.code})"
            where = [Site(module=path, source=site.source)]
            if ran is None:
                found.append(Found(f"{head}, which is true while the {ctx.exporter} exporter "
                                   "traces: the exported graph runs the branch eager does not",
                                   where))
                continue
            seen = br.verdict(site, ran.get(br.real(site.file), frozenset()),
                              reached=site.forward and path == "")
            if seen.message:
                found.append(Found(f"{head}: {seen.message}", where,
                                   None if seen.certain else Severity.INFO))
    return found


# --------------------------------------------------------------------------- tf32


def tf32_reference(ctx: HazardContext) -> list[Found]:
    """TF32 on while eager computes the float32 reference on CUDA: its matmuls and
    convolutions round their inputs to a 10-bit mantissa (about 1e-3 relative), while ONNX
    Runtime's CUDA provider runs with use_tf32 0, so the reference is the less accurate
    side and a mismatch (or a loose pass) measures TF32, not the export. Reads the switches
    as they stood when the reference ran (`ctx.tf32`) and the reference device."""
    if ctx.reference_device != "cuda" or ctx.dtype not in ("", "float32") or not ctx.tf32:
        return []
    return [Found(f"{' and '.join(ctx.tf32)} on while eager computes the float32 reference "
                  "on CUDA: eager rounds matmul/convolution inputs to TF32 (about 1e-3 "
                  "relative) and is the less accurate side; ONNX Runtime's CUDA provider runs "
                  "without TF32 (use_tf32: 0). The gate turns TF32 off before the factory "
                  "runs: the factory or a module it imports turned it on")]


# --------------------------------------------------------------------------- specialised

_VIOLATED = re.compile(r"Constraints violated \(([\w, ]+)\)!(.*?)(?:\n\n|$)", re.S)
_CONSTANT = re.compile(r"You marked (\w+) as dynamic but your code specialized it to be a "
                       r"constant \((\d+)\)")
_GUARD = re.compile(r"Not all values of (\w+) .*? satisfy the generated guard ([^.\n]+)")


def dynamic_dim_specialised(ctx: HazardContext) -> list[Found]:
    found = []
    if ctx.program is not None:
        for spec, shape in _user_input_shapes(ctx.program, ctx):
            for index, symbol in spec.dynamic.items():
                d = shape[index] if index < len(shape) else None
                if isinstance(d, int):
                    found.append(_specialised(spec.name, index, symbol, d,
                                              ctx.fixed_at.get(symbol)))
        found += _narrowed(ctx)
    else:
        by_name = {v.name: v for v in ctx.proto.graph.input}
        for spec in ctx.inputs:
            gi = by_name.get(spec.name)
            gdims = gi.type.tensor_type.shape.dim if gi is not None else []
            for index, symbol in spec.dynamic.items():
                if index < len(gdims) and gdims[index].HasField("dim_value"):
                    found.append(_specialised(spec.name, index, symbol,
                                              int(gdims[index].dim_value)))
    return found


def _narrowed(ctx: HazardContext) -> list[Found]:
    """Declared dims whose torch.export range stops below a size the gate's own cases reach
    (a generation's last step): the code bounded the size (a slice of a fixed table, a
    narrow), so the ONNX graph fails or computes something else beyond the bound."""
    ep = ctx.program
    found: list[Found] = []
    said: set[str] = set()
    for spec, shape in _user_input_shapes(ep, ctx):
        for index, symbol in spec.dynamic.items():
            d = shape[index] if index < len(shape) else None
            expr = getattr(getattr(d, "node", None), "expr", None)
            vr = ep.range_constraints.get(expr) if expr is not None else None
            reach = ctx.gate.reach.get(symbol)
            upper = _bound(vr.upper) if vr is not None else None
            if reach is None or upper is None or reach[0] <= upper or symbol in said:
                continue
            said.add(symbol)
            site = _bounding_site(ep, expr)
            found.append(Found(
                f"torch.export narrowed {symbol!r} (input {spec.name!r} dim {index}) to at "
                f"most {upper}{f' at {site}' if site else ''}, below {reach[0]}, "
                f"{reach[1]}: beyond {upper} the graph fails or computes something else",
                [Site(source=site)] if site else [Site(node=spec.name)]))
    return found


_BOUNDING = ("slice", "narrow", "select", "index")  # ops whose size argument has a bound


def _bounding_site(ep: Any, expr: Any) -> str:
    """The user source line of the first slicing op that reads the symbol as a size (else
    any op): where the bound most likely comes from; "" when none is the user's."""
    calls = [n for n in ep.graph.nodes
             if n.op == "call_function" and "sym_size" not in str(n.target)]
    for node in sorted(calls, key=lambda n: not any(b in str(n.target) for b in _BOUNDING)):
        trace = node.meta.get("stack_trace") or ""
        if not trace:
            continue
        for arg in node.args:
            val = getattr(arg, "meta", {}).get("val") if hasattr(arg, "meta") else None
            sym = getattr(getattr(val, "node", None), "expr", None)
            if sym is not None and expr in getattr(sym, "free_symbols", ()):
                where = og.source_of(trace)
                if where and not in_library(where.rsplit(":", 1)[0]):
                    return where
    return ""


def _specialised(name: str, index: int, symbol: str, value: int,
                 fixed_at: tuple[str, str] | None = None) -> Found:
    where, op = fixed_at or ("", "")
    by = (f" (by {op} at {where})" if op else f" (at {where})") if where else ""
    return Found(f"input {name!r} dim {index} was declared dynamic ({symbol!r}) but the export "
                 f"fixed it to {value}{by}: the graph accepts no other size",
                 [Site(node=name, source=where)])


def dynamic_dim_specialised_failure(ctx: HazardContext) -> list[Found]:
    found = [Found(f"torch.export: {m.group(1)} was declared dynamic but the code specialised "
                   f"it to the constant {m.group(2)}") for m in _CONSTANT.finditer(ctx.error)]
    found += [Found(f"torch.export: not every {m.group(1)} satisfies the guard "
                    f"{m.group(2).strip()} the code imposes") for m in _GUARD.finditer(ctx.error)]
    return found


def _user_input_shapes(ep: Any, ctx: HazardContext) -> list[tuple[Any, tuple[Any, ...]]]:
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    out = []
    for spec, name in zip(ctx.inputs, ep.graph_signature.user_inputs, strict=False):
        val = nodes[name].meta.get("val") if name in nodes else None
        if val is not None and hasattr(val, "shape"):
            out.append((spec, tuple(val.shape)))
    return out

