"""Failing op cases → defect signatures: what one upstream report is about.

A signature is the op as users call it, the keyword arguments that matter, the
symptom a maintainer would see and the owner whose code does it. Cases share a
report only when all of these agree, so one overload failing two ways is two
reports and one cause seen on many dtypes and input classes is one, with those
as its scope. Pure: a RunResult in, records out.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable

from parity_gate.engine.runtime import failing_node
from parity_gate.model.findings import FindingClass, Stage
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.upstream import OpRef, Owner, Signature, Symptom
from parity_gate.ops.findings import finding_class

# The lead case is the most ordinary one: ordinary values before edge cases, float32 first.
CLASS_ORDER = ("normal", "range", "specials", "empty")
DTYPE_ORDER = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16",
               "int8", "uint8", "bool")
REPORTED = frozenset({FindingClass.EXPORTER, FindingClass.RUNTIME, FindingClass.UNSUPPORTED})
# What fails before any value is compared: the outcome alone names the symptom.
_BY_OUTCOME = {
    Outcome.UNSUPPORTED_OP: Symptom.UNSUPPORTED, Outcome.EXPORT_ERROR: Symptom.EXPORT_FAILS,
    Outcome.INVALID_MODEL: Symptom.INVALID_MODEL, Outcome.RUNTIME_ERROR: Symptom.RUN_FAILS,
    Outcome.NO_KERNEL: Symptom.MISSING_KERNEL, Outcome.CRASH: Symptom.CRASH,
    Outcome.TIMEOUT: Symptom.CRASH, Outcome.DTYPE_MISMATCH: Symptom.WRONG_DTYPE,
    Outcome.SHAPE_MISMATCH: Symptom.WRONG_SHAPE, Outcome.BAKED_SHAPE: Symptom.WRONG_SHAPE,
}
_KERNEL = re.compile(r"implementation for (\w+\(\d+\))")
# onnx.checker on a node whose type constraint (at the exported opset) excludes its input's
# element type: the ONNX op, and the type by ONNX's name.
_EXCLUDED = re.compile(r"op_type:(\w+), node name: [^)]*\): \w+ typestr: \w+, has unsupported "
                       r"type: tensor\((\w+)\)")
_ONNX_TYPE = {"float": "float32", "double": "float64"}  # ONNX's names that torch spells apart
# The ONNX op an ATen op's translation runs its work in: how ONNX Runtime's maintainers name
# a kernel defect (a NaN `amax` is ReduceMax's; `max_pool1d..3d` are one MaxPool kernel).
ONNX_OPS = {
    "amax": "ReduceMax", "amin": "ReduceMin", "max": "ReduceMax", "min": "ReduceMin",
    "sum": "ReduceSum", "mean": "ReduceMean", "prod": "ReduceProd",
    "logsumexp": "ReduceLogSumExp", "max_pool1d": "MaxPool", "max_pool2d": "MaxPool",
    "max_pool3d": "MaxPool", "max_pool2d_with_indices": "MaxPool",
    "max_pool3d_with_indices": "MaxPool", "avg_pool1d": "AveragePool",
    "avg_pool2d": "AveragePool", "avg_pool3d": "AveragePool", "upsample_nearest1d": "Resize",
    "upsample_nearest2d": "Resize", "upsample_nearest3d": "Resize",
    "upsample_bilinear2d": "Resize", "upsample_bicubic2d": "Resize",
    "upsample_trilinear3d": "Resize", "upsample_linear1d": "Resize", "interpolate": "Resize",
    "pow": "Pow", "scatter_reduce": "ScatterElements", "scatter_add": "ScatterElements",
    "scatter": "ScatterElements", "index_put": "ScatterND", "gather": "GatherElements",
    "cumsum": "CumSum", "softmax": "Softmax", "_softmax": "Softmax",
    "log_softmax": "LogSoftmax", "_log_softmax": "LogSoftmax",
    "layer_norm": "LayerNormalization", "native_layer_norm": "LayerNormalization",
    "group_norm": "GroupNormalization", "native_group_norm": "GroupNormalization",
    "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
    "rsqrt": "Sqrt", "erf": "Erf", "div": "Div", "floor_divide": "Div", "mul": "Mul",
    "add": "Add", "sub": "Sub", "remainder": "Mod", "fmod": "Mod", "clamp": "Clip",
    "clip": "Clip", "relu": "Relu", "gelu": "Gelu", "topk": "TopK", "sort": "TopK",
    "argmax": "ArgMax", "argmin": "ArgMin", "matmul": "MatMul", "mm": "MatMul",
    "bmm": "MatMul", "addmm": "Gemm", "convolution": "Conv", "conv2d": "Conv",
    "isnan": "IsNaN", "isinf": "IsInf", "where": "Where", "round": "Round",
    "floor": "Floor", "ceil": "Ceil", "abs": "Abs", "neg": "Neg", "sign": "Sign",
    "reciprocal": "Reciprocal", "maximum": "Max", "minimum": "Min", "einsum": "Einsum",
    "pad": "Pad", "constant_pad_nd": "Pad", "linalg_vector_norm": "ReduceL2",
    "cos": "Cos", "sin": "Sin", "tan": "Tan", "atan": "Atan", "acos": "Acos",
    "asin": "Asin", "cosh": "Cosh", "sinh": "Sinh", "softplus": "Softplus",
    "elu": "Elu", "celu": "Celu", "selu": "Selu", "hardsigmoid": "HardSigmoid",
    "leaky_relu": "LeakyRelu", "prelu": "PRelu", "trunc": "Trunc"}
# "the definition of MaxPool": the op a value defect was judged against (compare.spec).
_DEFINED = re.compile(r"definition of (\w+)")


def lead_order(case: CaseResult) -> tuple[int, int, str]:
    """Sort key: normal inputs before ranges, specials and empties; float32 first."""
    cls, dtype = case.key.inputs, case.key.dtype
    return (CLASS_ORDER.index(cls) if cls in CLASS_ORDER else len(CLASS_ORDER),
            DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER), case.id)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def value_symptom(eager: float | None, got: float | None) -> Symptom | None:
    """The symptom one element shows (eager's value vs ONNX Runtime's), if a special one."""
    if eager is None or got is None:
        return None
    if math.isnan(eager) != math.isnan(got):
        return Symptom.NAN_DROPPED if math.isnan(eager) else Symptom.NAN_INTRODUCED
    if eager == got == 0 and math.copysign(1, eager) != math.copysign(1, got):
        return Symptom.SIGNED_ZERO_LOST
    if math.isinf(got) and math.isfinite(eager):
        return Symptom.OVERFLOW_TO_INF
    if math.isinf(eager) and math.isfinite(got):
        return Symptom.INF_LOST
    return None


def symptom_of(case: CaseResult) -> Symptom:
    """The symptom a maintainer would see on this case: its outcome, or for wrong values
    the pattern of the element that differs (eager vs ONNX Runtime)."""
    low = case.op.low_precision if case.op is not None else None
    if case.outcome is Outcome.DTYPE_MISMATCH and low is not None:
        return Symptom.LOW_PRECISION  # a graph that computes narrower than eager returns
    if case.outcome in _BY_OUTCOME:
        return _BY_OUTCOME[case.outcome]
    example = case.op.example if case.op is not None else None
    eager = _number(example.eager) if example is not None else None
    got = _number(example.onnx) if example is not None else None
    special = value_symptom(eager, got)
    if special is not None:
        return special
    if low is not None:
        return Symptom.LOW_PRECISION
    return Symptom.WRONG_VALUES


def owner_of(case: CaseResult, symptom: Symptom) -> Owner:
    """Whose code it is: a missing kernel, an ONNX Runtime crash or a difference that
    vanishes with ORT's graph optimizations off is the runtime's; where the graph run by
    ONNX's definition gives eager's answer, the kernel's, and ONNX Runtime's, the
    translation's (compare.owner); an ONNX Runtime error at run time, the kernel's where
    the graph runs by definition to eager's answer, the translation's where the reference
    raises too; a failure while
    capturing (or the legacy tracer, which lives in torch) is torch's; the rest is the
    translation's."""
    rc = case.recheck
    if symptom is Symptom.MISSING_KERNEL:
        return Owner.KERNEL
    if symptom is Symptom.CRASH and case.lost is not None \
            and case.lost.step.stage is Stage.RUNNING:
        return Owner.KERNEL
    if rc is not None and rc.unoptimized is not None and rc.unoptimized.vanishes:
        return Owner.KERNEL
    if rc is not None and rc.definition is not None and rc.definition.owner is not None:
        return rc.definition.owner  # the graph by ONNX's definition sides with one side
    raised = case.op.raised if case.op is not None else None
    if symptom is Symptom.RUN_FAILS and raised is not None and raised.owner is not None:
        return raised.owner  # ONNX Runtime raised: the graph run by definition says whose
    if case.reason.startswith("torch.export") or case.provenance.exporter == "torchscript":
        return Owner.CAPTURE
    return Owner.TRANSLATION


def args_that_matter(call: str) -> list[str]:
    """The call's keyword arguments: a string value is part of what the op does
    (`reduce='mean'`), any other value only by its name (`include_self`, `dtype`), so
    variants that differ in a flag's value share a report when they fail alike."""
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return []
    while isinstance(node, ast.BinOp):  # `(x - y) ** 2`: the outermost call names it
        node = node.left
    if not isinstance(node, ast.Call):
        return []
    out = []
    for kw in node.keywords:
        if kw.arg is None:
            continue
        value = kw.value
        text = (f"{kw.arg}={value.value!r}" if isinstance(value, ast.Constant)
                and isinstance(value.value, str) else kw.arg)
        out.append(text)
    return sorted(out)


def reported(case: CaseResult) -> bool:
    """A failing op case that is an exporter or runtime defect (not eager's own, not a
    tolerance artefact the re-check explained away)."""
    if case.op is None or not case.failed or case.outcome is Outcome.EAGER_ERROR \
            or finding_class(case) not in REPORTED:
        return False
    rc = case.recheck
    return rc is None or not rc.verdict.dismisses


def dtype_gap(case: CaseResult, symptom: Symptom) -> str:
    """The ONNX node that does not take the case's own dtype, where that is the failure:
    ONNX Runtime has no kernel for it ("Acos(7)"), or its type constraints at the exported
    opset exclude it (onnx.checker: "Acos"); "" for any other failure. A gap is one defect
    per dtype: its report lists the nodes a dtype lacks (`ops.causes`)."""
    if symptom is Symptom.MISSING_KERNEL:
        kernel = _KERNEL.search(case.reason)
        return kernel.group(1) if kernel else ""
    excluded = _EXCLUDED.search(case.reason) if symptom is Symptom.INVALID_MODEL else None
    if excluded is None or _ONNX_TYPE.get(excluded.group(2), excluded.group(2)) != case.key.dtype:
        return ""  # another input's type (a float `labels`): a wrong lowering, not a gap
    return excluded.group(1)


# Errors: what shows on any input unless `error_triggers` finds where it alone shows.
ERRORS = frozenset({Symptom.EXPORT_FAILS, Symptom.UNSUPPORTED, Symptom.INVALID_MODEL,
                    Symptom.RUN_FAILS, Symptom.CRASH})
_VARIABLE = re.compile(r"\d+|'[^']*'|\"[^\"]*\"")


def _said_as(case: CaseResult) -> str:
    """An error as one defect says it: its first line, numbers and quoted names left out (a
    shape or a node name differs from input to input, the error does not)."""
    return _VARIABLE.sub("#", (case.reason or "").split("\n", 1)[0])[:120]


def error_triggers(run: RunResult) -> dict[str, str]:
    """Case id → the trigger of an error that shows only on part of what its call was swept
    on: `empty` where the call's non-empty inputs of that dtype run or fail otherwise (a
    zero-size reshape); the dtypes it shows on (`bfloat16`), comma-joined, where the same
    inputs of other dtypes run or fail otherwise. An error on every input has none (""),
    so one defect stays one report, and a defect that needs a trigger is one report per
    trigger, not one mixed with another error of the same call."""
    seen: dict[str, dict[tuple[str, str], tuple[Symptom, str] | None]] = {}
    ids: dict[tuple[str, str, str], str] = {}
    for case in run.cases:
        shown = reported(case)
        if case.op is None or not (shown or case.outcome is Outcome.PASS):
            continue  # eager rejects it or dies on it, or it was skipped: not swept there
        symptom = symptom_of(case) if shown else None
        seen.setdefault(case.op.variant, {})[(case.key.dtype, case.key.inputs)] = \
            (symptom, _said_as(case)) if symptom in ERRORS else None
        ids[(case.op.variant, case.key.dtype, case.key.inputs)] = case.id
    out: dict[str, str] = {}
    for variant, cells in seen.items():
        for (dtype, cls), me in cells.items():
            if me is None:
                continue
            if cls == "empty":
                others = [v for (d, k), v in cells.items() if d == dtype and k != "empty"]
                if others and me not in others:
                    out[ids[(variant, dtype, cls)]] = "empty"
                continue
            alike = [d for d, k in cells if k == cls]
            same = [d for d in alike if cells[(d, cls)] == me]
            if len(same) < len(alike):
                out[ids[(variant, dtype, cls)]] = ",".join(sorted(same, key=_rank(DTYPE_ORDER)))
    return out


def onnx_op(case: CaseResult) -> str:
    """The ONNX op whose kernel computes a value defect: the one its definition was judged
    by, else the op the call's ATen op translates to (`ONNX_OPS`); "" when unknown."""
    definition = case.recheck.definition if case.recheck is not None else None
    judged = _DEFINED.search(definition.oracle) if definition is not None else None
    if judged is not None:
        return judged.group(1)
    ops = [case.op.op, *case.op.aten_ops] if case.op is not None else []
    return next((ONNX_OPS[n] for n in (OpRef(o).name for o in ops) if n in ONNX_OPS), "")


def signature_of(case: CaseResult, trigger: str = "") -> Signature:
    """The one-case signature (scope filled in by `group`); a dtype gap is one per dtype;
    an error of ONNX Runtime's kernel names the node type it raised in (`Pad`); an error
    that shows only on part of its call's inputs carries that part (`error_triggers`)."""
    assert case.op is not None
    symptom = symptom_of(case)
    node = dtype_gap(case, symptom)
    owner = owner_of(case, symptom)
    raised = failing_node(f"{case.reason}\n{case.detail}") \
        if symptom is Symptom.RUN_FAILS and owner is Owner.KERNEL else None
    # a kernel's wrong value is named by its ONNX op, as its maintainers file it
    computes = onnx_op(case) if owner is Owner.KERNEL and not node and not raised \
        and (symptom not in ERRORS or symptom is Symptom.CRASH) else ""
    return Signature(
        user_op=case.op.user_op, overload=case.op.op, symptom=symptom,
        owner=owner, args=args_that_matter(case.op.call),
        kernel=node or (raised[0] if raised else computes), dtypes=[case.key.dtype] if node else [],
        trigger="" if node or owner is Owner.KERNEL or symptom not in ERRORS else trigger)


def group(run: RunResult) -> list[tuple[Signature, list[CaseResult]]]:
    """One signature per defect, its cases lead first; signatures in the order of their
    lead cases' ids. A kernel gap is one report per ONNX op whatever torch op reached it."""
    groups: dict[str, tuple[Signature, list[CaseResult]]] = {}
    triggers = error_triggers(run)
    for case in run.cases:
        if reported(case):
            sig = signature_of(case, triggers.get(case.id, ""))
            groups.setdefault(sig.key, (sig, []))[1].append(case)
    out = []
    for sig, cases in groups.values():
        cases.sort(key=lead_order)
        lead = cases[0]
        ops = [c.op for c in cases if c.op is not None]
        out.append((Signature.from_dict({
            **sig.to_dict(),
            "user_op": lead.op.user_op if lead.op else sig.user_op,
            "overload": lead.op.op if lead.op else sig.overload,
            "variants": list(dict.fromkeys(o.variant for o in ops)),
            "calls": list(dict.fromkeys(o.call for o in ops)),
            "dtypes": sorted({c.key.dtype for c in cases}, key=_rank(DTYPE_ORDER)),
            "input_classes": sorted({c.key.inputs for c in cases}, key=_rank(CLASS_ORDER)),
            "lead": lead.id}), cases))
    return sorted(out, key=lambda pair: pair[1][0].key.sort_key)


def _rank(order: tuple[str, ...]) -> Callable[[str], tuple[int, str]]:
    return lambda x: (order.index(x) if x in order else len(order), x)
