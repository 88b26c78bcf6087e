"""Inside a worker: one batch of op cases from eager references to verdicts.

eager (per case) → export (whole batch, isolated on failure) → checker, ORT
load and run (whole batch, split at the ONNX level on failure) → compare →
re-check mismatches against float64 → audit dtype handling on the
un-optimised graph. Results stream out one case at a time, so a crash loses
only the cases not yet reported, which the parent re-splits.
"""

from __future__ import annotations

import math
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from parity_gate.engine import stages
from parity_gate.engine.protocol import CaseStream, Emit
from parity_gate.engine.runtime import first_line
from parity_gate.engine.stages import StageFailure
from parity_gate.engine.tensors import leaves, to_numpy, to_torch
from parity_gate.hazards import precision
from parity_gate.model.findings import (
    ByDefinition,
    EagerQuirk,
    LowPrecision,
    OpCase,
    Recheck,
    RecheckReference,
    RecheckVerdict,
    Rerun,
    Stage,
)
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, Provenance
from parity_gate.model.upstream import Owner
from parity_gate.ops import exact
from parity_gate.ops import onnxgraph as og
from parity_gate.ops.export import CASE_FILE, EXPORT_OPTIONS, Exported, export_batch
from parity_gate.ops.inputs import make_inputs
from parity_gate.ops.isolate import isolate
from parity_gate.ops.jobs import OpBatchJob, Unit
from parity_gate.ops.judge import (
    example,
    fmt_value,
    judge,
    same_elements,
    same_values,
    tolerance_for_output,
)
from parity_gate.ops.recheck import recheck
from parity_gate.ops.records import OpVariant, user_op
from parity_gate.ops.registry import load_variants

# Ops that only move or convert data: the case's `op` is the first op not in here.
_PLUMBING = ("aten._to_copy", "aten.view", "aten.expand", "aten.clone", "aten.detach",
             "aten.lift_fresh", "aten.alias", "aten.t.", "aten.unsqueeze", "aten.squeeze",
             "aten.permute", "aten.transpose", "aten._unsafe_view", "aten.empty",
             "aten.copy", "aten.zeros", "aten.ones", "aten.full", "aten.scalar_tensor",
             "aten.reshape", "aten.slice", "aten.select", "aten.as_strided", "aten.contiguous",
             "aten.fill_", "aten.resize_", "aten.new_", "aten._local_scalar_dense",
             "aten.unbind", "aten.item", "aten.is_nonzero")


@dataclass
class _Case:
    """One unit prepared in this worker: its inputs, its call and eager's answer."""

    pos: int
    unit: Unit
    variant: OpVariant
    keys: list[CaseKey]
    inputs: dict[str, np.ndarray]
    tensors: list[Any]
    fn: Callable[..., Any]
    eager: list[np.ndarray] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    eager_s: float = 0.0
    strided: list[np.ndarray] | None = None  # eager on strided views, where it differs
    graph_ops: list[str] = field(default_factory=list)  # the exported graph's, for this case

    @property
    def input_names(self) -> list[str]:
        return [og.case_input(self.pos, a) for a in self.variant.arg_names]

    @property
    def output_names(self) -> list[str]:
        return [og.case_output(self.pos, m) for m in range(len(self.eager))]

    @property
    def feeds(self) -> dict[str, np.ndarray]:
        return dict(zip(self.input_names, self.inputs.values(), strict=True))

    @property
    def grad(self) -> bool:
        return any(a.requires_grad for a in self.variant.args)

    def op_case(self, not_applicable: bool = False) -> OpCase:
        """The case's op fields: the user-level op, and its ATen overload beside it (the
        exported graph's, which keeps ops eager decomposes, else eager's dispatch)."""
        ops = self.graph_ops or self.ops
        name = user_op(self.variant.call)
        return OpCase(variant=self.variant.id, family=self.variant.family,
                      call=self.variant.call, op=main_op(ops, name or self.variant.id),
                      aten_ops=list(ops), not_applicable=not_applicable, user_op=name)


class _Ctx(CaseStream):
    job: OpBatchJob


EXPORTER = "dynamo"


def unit_subject(unit: Unit) -> str:
    """How a step names a unit; the parent's re-split reads it back (sweep.culprit)."""
    return f"{unit.variant}/{unit.dtype}/{unit.input_class}"


def provenance(job: OpBatchJob, model: onnx.ModelProto | None = None) -> Provenance:
    """What ran: the exporter, the graph's opset and IR version when there is one, the seed."""
    if model is None:
        return Provenance(exporter=EXPORTER, export_options=dict(EXPORT_OPTIONS), seed=job.seed)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return Provenance(exporter=EXPORTER, opset=opset, ir_version=model.ir_version,
                      export_options=dict(EXPORT_OPTIONS), seed=job.seed)


def run_batch(job: OpBatchJob, emit: Emit) -> None:
    """A result for every case of `job` (never raises)."""
    ctx = _Ctx(job, emit)
    try:
        _run(ctx)
    except Exception:
        tb = traceback.format_exc()[-4000:]
        for key in list(ctx.pending):
            ctx.result(CaseResult(key, Outcome.CRASH, "internal error in the parity-gate ops "
                                  "worker (please report)", tb, provenance=provenance(job)))


def _run(ctx: _Ctx) -> None:
    job = ctx.job
    variants = load_variants(job.sources)
    live: list[_Case] = []
    for pos, unit in enumerate(job.units):
        ctx.step(Stage.EAGER, subject=unit_subject(unit))
        try:
            case, rejected = _prepare(job, pos, unit, variants[unit.variant])
        except Exception:  # a bug in preparing this case: it alone fails, loudly
            case, rejected = None, CaseResult(
                unit_keys(job, unit)[0], Outcome.CRASH, "internal error in the parity-gate "
                "ops worker while preparing the case (please report)",
                traceback.format_exc()[-4000:], provenance=provenance(job))
        if case is not None:
            live.append(case)
        else:
            for key in unit_keys(job, unit):
                ctx.result(replace(rejected, key=key))
    if not live:
        return
    ctx.step(Stage.EXPORTING, subject=f"{len(live)} cases")
    known = _SUSPECTS | job.suspects
    suspects = [c for c in live if c.variant.id in known]
    others = [c for c in live if c.variant.id not in known]
    passed: list[tuple[list[_Case], Exported]] = []
    for part in (others, suspects):
        exports = isolate(part, _export, _with_siblings)
        for case, failure in exports.failed:
            _SUSPECTS.add(case.variant.id)
            _fail(ctx, case, case.keys, failure)
        passed += exports.passed
    for group, exported in passed:
        for provider in job.providers:
            ctx.step(Stage.RUNNING, subject=f"{len(group)} cases", detail=f"on {provider}")
            _run_group(ctx, group, exported, provider)


# Variants whose export failed earlier in this worker. Their other cases (other
# dtypes, input classes) are still exported, but as a batch of their own, so a
# failure that is likely again does not cost the big batch a retry.
_SUSPECTS: set[str] = set()


def unit_keys(job: OpBatchJob, unit: Unit) -> list[CaseKey]:
    return [unit.key(p) for p in job.providers]


# --------------------------------------------------------------------------
# eager


class _OpRecorder(TorchDispatchMode):
    """The ATen ops a call reaches, in order (for the case's `op` and blame)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func)
        if name not in self.ops:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def main_op(ops: list[str], name: str) -> str:
    """The ATen op a case is about: one named like the user op (or variant id), else the
    first real op."""
    base = name.rsplit(".", 1)[-1].lower() if name.startswith(("torch", "F.", "Tensor")) \
        else name.split(".")[0].lower()
    real = [o for o in ops if not o.startswith(_PLUMBING)]
    named = [o for o in real if base in o.lower()]
    return (named or real or ops or [""])[0]


def compile_call(variant: OpVariant, number: int) -> Callable[..., Any]:
    """The variant's expression as a function, compiled under a file name that names the case."""
    source = f"lambda {', '.join(variant.arg_names)}: {variant.call}"
    code = compile(source, CASE_FILE.format(number), "eval")
    return eval(code, {"torch": torch, "F": F, "math": math})  # the catalogue's own text


def _run_eager(fn: Callable[..., Any], tensors: list[Any],
               grad: bool) -> tuple[list[np.ndarray], list[str]]:
    recorder = _OpRecorder()
    with torch.enable_grad() if grad else torch.no_grad(), recorder:
        out = fn(*tensors)
    return [to_numpy(t) for t in leaves(out)], recorder.ops


def _prepare(job: OpBatchJob, pos: int, unit: Unit,
             variant: OpVariant) -> tuple[_Case | None, CaseResult]:
    inputs = make_inputs(variant, unit.dtype, unit.input_class, job.seed)
    tensors = [to_torch(inputs[a.name], requires_grad=a.requires_grad) for a in variant.args]
    fn = compile_call(variant, pos)
    case = _Case(pos, unit, variant, unit_keys(job, unit), inputs, tensors, fn)
    t0 = time.perf_counter()
    try:
        _poison(7250.5)
        case.eager, case.ops = _run_eager(fn, tensors, case.grad)
    except Exception as exc:
        reason = f"not applicable: eager rejects this input: {first_line(repr(exc), 240)}"
        return None, CaseResult(case.keys[0], Outcome.SKIPPED, reason,
                                provenance=provenance(job), op=case.op_case(True))
    case.eager_s = time.perf_counter() - t0
    case.strided = _strided_eager(case)
    unstable = _unstable(case)
    if unstable is not None:
        return None, CaseResult(case.keys[0], Outcome.SKIPPED,
                                f"not applicable: eager is nondeterministic on this input "
                                f"(two runs differ in output o{unstable})",
                                provenance=provenance(job), op=case.op_case(True))
    if not case.eager:
        return None, CaseResult(case.keys[0], Outcome.SKIPPED,
                                "not applicable: the call returns no tensor",
                                provenance=provenance(job), op=case.op_case(True))
    return case, CaseResult(case.keys[0], Outcome.PASS)


def _unstable(case: _Case) -> int | None:
    """The first output a second eager run changes (uninitialised memory, e.g. a loss
    over an empty batch): no parity can be defined against such a reference."""
    try:
        _poison(-0.03125)
        again, _ = _run_eager(case.fn, case.tensors, case.grad)
    except Exception:
        return None
    for m, (a, b) in enumerate(zip(case.eager, again, strict=False)):
        if m in case.variant.shape_only:
            continue
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            return m
    return None


def _strided(t: Any) -> Any:
    """The same values as a view with inner stride 2: CPU kernels then take their
    scalar path instead of the vectorised one (the layout a vector width shows in)."""
    if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.numel() == 0:
        return t
    base = torch.empty((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype)
    view = base[..., ::2]
    with torch.no_grad():
        view.copy_(t)
    return view.requires_grad_(True) if t.requires_grad else view


def _strided_eager(case: _Case) -> list[np.ndarray] | None:
    """Eager's outputs for strided inputs, when they differ from the contiguous run.

    Vectorised kernels can disagree with their scalar path on special values
    (gelu(inf) is inf for one element and nan in AVX-512 lanes): then eager's
    answer depends on the machine and the tensor size, and the exported model
    matching the other answer is an eager quirk, not an exporter finding.
    """
    try:
        out, _ = _run_eager(case.fn, [_strided(t) for t in case.tensors], case.grad)
    except Exception:
        return None
    if len(out) != len(case.eager):
        return None
    differ = any(m not in case.variant.shape_only and not same_values(a, b)
                 for m, (a, b) in enumerate(zip(case.eager, out, strict=True)))
    return out if differ else None


def _poison(value: float) -> None:
    """Leave `value` in freed small blocks, so an output built from uninitialised memory
    differs between two runs instead of repeating the same leftover bytes."""
    for n in (1, 2, 4, 8, 16, 64, 256, 1024):
        for dtype in (torch.float32, torch.float64, torch.float16):
            torch.full((n,), value, dtype=dtype)


def _reference(case: _Case) -> tuple[list[np.ndarray] | None, RecheckReference]:
    """The truth: exact (integers exactly, floats in mpmath) for elementwise calls,
    else the float64 re-run, else none."""
    f64 = _truth(case)
    fallback = f64
    if fallback is None and case.unit.dtype == "float64":
        fallback = case.eager  # IEEE float64 already: only zeros and x/0 are taken from it
    try:
        found = exact.reference(case.variant.call, list(case.variant.arg_names), case.inputs,
                                case.eager, fallback)
    except Exception:
        found = None
    if found is not None:
        return found[0], RecheckReference.EXACT
    return f64, RecheckReference.FLOAT64 if f64 is not None else RecheckReference.NONE


def _truth(case: _Case) -> list[np.ndarray] | None:
    """The same call on float64 inputs: the reference both sides are judged against.

    Integer data is upcast too when the op promotes it to a float result
    (atan2 of int32): float64 holds those values exactly.
    """
    if case.unit.dtype == "float64":
        return None
    promotes = all(np.dtype(e.dtype).kind == "f" or e.dtype.name == "bfloat16"
                   for e in case.eager)
    upcast, changed = [], False
    for arg, t in zip(case.variant.args, case.tensors, strict=True):
        if (arg.follows or arg.kind in ("prob", "choice")) and (t.is_floating_point() or promotes):
            upcast.append(t.detach().double().requires_grad_(t.requires_grad
                                                             and t.is_floating_point()))
            changed = True
        else:
            upcast.append(t)
    if not changed:
        return None
    try:
        out, _ = _run_eager(case.fn, upcast, case.grad)
    except Exception:
        return None
    return out


# --------------------------------------------------------------------------
# export and run


def _with_siblings(failure: StageFailure, group: list[_Case]) -> set[int]:
    """Split the blamed case off together with the other cases of its variant.

    An export error is usually a property of the variant (all its dtypes
    and input classes hit it), so they leave the big batch together: one
    retry of the rest instead of one per sibling. Not conclusive: the
    small group is then tried on its own and split further if need be.
    """
    if failure.conclusive:
        return set()
    named = {group[i].variant.id for i in failure.culprits if i < len(group)}
    return {i for i, c in enumerate(group) if c.variant.id in named}


def _export(group: list[_Case]) -> Exported:
    exported = export_batch([c.fn for c in group], [c.tensors for c in group],
                            [n for c in group for n in c.input_names],
                            [n for c in group for n in c.output_names],
                            [c.pos for c in group], grad=any(c.grad for c in group))
    for k, case in enumerate(group):
        case.graph_ops = exported.graph_ops.get(k, case.graph_ops)
    return exported


@dataclass
class _Graphs:
    """The exported batch as ONNX protos, plus what the per-case steps read from them."""

    model: onnx.ModelProto
    raw: onnx.ModelProto
    raw_types: dict[str, int]
    owners: og.Ownership
    export_s: float
    inputs: dict[str, str]  # the name we asked for → the graph input's actual name
    provenance: Provenance  # what ran: opset, IR version, export options, seed


def _run_group(ctx: _Ctx, group: list[_Case], exported: Exported, provider: str) -> None:
    model = onnx.load_from_string(exported.optimized)
    raw = onnx.load_from_string(exported.raw)
    asked = [n for c in group for n in c.input_names]
    graphs = _Graphs(model, raw, precision.value_types(raw),
                     og.Ownership.of(model, {c.pos: c.output_names for c in group}),
                     exported.seconds, og.input_names(model, asked),
                     provenance(ctx.job, model))
    index = {c.pos: c for c in group}

    def attempt(sub: list[_Case]) -> dict[str, np.ndarray]:
        return _load_and_run(graphs.model, sub, provider, whole=len(sub) == len(group),
                             inputs=graphs.inputs)

    def blame(failure: StageFailure, sub: list[_Case]) -> set[int]:
        named = graphs.owners.blame(f"{failure.reason}\n{failure.detail}")
        return {i for i, c in enumerate(sub) if c.pos in named}

    runs = isolate(group, attempt, blame)
    for case, failure in runs.failed:
        _fail(ctx, case, [case.keys[case_provider_index(ctx, provider)]], failure,
              graphs.provenance, raised=_raised(case, failure, graphs))
    for sub, outputs in runs.passed:
        for case in sub:
            key = case.keys[case_provider_index(ctx, provider)]
            try:
                ctx.result(_finish(index[case.pos], key, outputs, graphs, provider))
            except Exception:
                ctx.result(CaseResult(key, Outcome.CRASH, "internal error in the parity-gate "
                                      "ops worker (please report)",
                                      traceback.format_exc()[-4000:],
                                      provenance=graphs.provenance, op=case.op_case()))


def case_provider_index(ctx: _Ctx, provider: str) -> int:
    return ctx.job.providers.index(provider)


def _load_and_run(model: onnx.ModelProto, sub: list[_Case], provider: str, whole: bool,
                  optimization: str = "all",
                  inputs: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    names = [n for c in sub for n in c.output_names]
    part = model if whole else og.extract(model, names)
    if (disagreement := stages.check(part)) is not None:
        raise disagreement.failure()  # the bundled known findings were recorded so
    session = stages.open_session(part, provider, {}, optimization=optimization)
    feeds: dict[str, np.ndarray] = {}
    wanted = {i.name for i in session.get_inputs()}
    alias = inputs or {}
    for c in sub:
        feeds.update({alias.get(k, k): v for k, v in c.feeds.items()
                      if alias.get(k, k) in wanted})
    return dict(zip(names, stages.run(session, feeds, names), strict=True))


def _fail(ctx: _Ctx, case: _Case, keys: list[CaseKey], failure: StageFailure,
          ran: Provenance | None = None, raised: ByDefinition | None = None) -> None:
    for key in keys:
        op = case.op_case()
        op.raised = raised
        ctx.result(CaseResult(key, failure.outcome, failure.reason, failure.detail,
                              timings={"eager_s": case.eager_s},
                              provenance=ran or provenance(ctx.job), op=op))


# --------------------------------------------------------------------------
# judging one case


def _finish(case: _Case, key: CaseKey, outputs: dict[str, np.ndarray], graphs: _Graphs,
            provider: str) -> CaseResult:
    t0 = time.perf_counter()
    got = [outputs[n] for n in case.output_names]
    verdict = judge(case.variant, case.unit.dtype, case.eager, got)
    outcome, reason = verdict.outcome, verdict.reason
    op = case.op_case()
    checked: Recheck | None = None
    failing = [m for m, c in enumerate(verdict.comparisons) if not c.passed]
    if outcome is Outcome.MISMATCH and case.strided is not None:
        either = [_either(e, s, g) for e, s, g in zip(case.eager, case.strided, got,
                                                       strict=True)]
        again = judge(case.variant, case.unit.dtype, either, got)
        if again.outcome is Outcome.PASS:  # onnx matches one of eager's two answers
            op.eager_quirk = _quirk(case, got)
            outcome = Outcome.PASS
            reason = f"mismatch dismissed: {op.eager_quirk.describe()}"
    if outcome is Outcome.MISMATCH:
        checked = _recheck(case, got, failing, graphs, provider)
        if checked.verdict.dismisses:  # a tolerance artefact or eager's own error
            outcome = Outcome.PASS
            reason = f"mismatch dismissed by the re-check: {checked.describe()}"
    audit = _audit(case, graphs)
    if audit:
        hidden = outcome is Outcome.PASS
        op.low_precision = LowPrecision([a.describe() for a in audit[:5]],
                                        hidden_by_provider=provider if hidden else None)
        if hidden:
            outcome = Outcome.DTYPE_MISMATCH
            reason = (f"the graph computes in lower precision than eager returns; values "
                      f"match on {provider}, which hides the wrong graph")
    if failing and outcome is not Outcome.PASS:
        worst = verdict.comparisons[failing[0]]
        op.example = example(worst, case.eager[failing[0]], got[failing[0]], case.inputs)
    timings = {"eager_s": case.eager_s, "export_s": graphs.export_s,
               "compare_s": time.perf_counter() - t0}
    return CaseResult(key, outcome, reason, comparisons=verdict.comparisons, timings=timings,
                      provenance=graphs.provenance, recheck=checked, op=op)


def _recheck(case: _Case, got: list[np.ndarray], failing: list[int], graphs: _Graphs,
             provider: str) -> Recheck:
    tolerances = [tolerance_for_output(case.variant, case.unit.dtype, e) for e in case.eager]
    truth, reference = _reference(case)
    checked = recheck(case.eager, got, truth, tolerances, failing,
                      signed_zeros=case.variant.signed_zeros, reference=reference)
    if checked.verdict is RecheckVerdict.UNVERIFIED:
        checked = replace(checked, note="no exact reference for this call, and float64 is "
                          "already the reference precision" if case.unit.dtype == "float64"
                          else "no exact or float64 reference for this call")
    try:
        plain = _load_and_run(graphs.model, [case], provider, whole=False,
                              optimization="disabled", inputs=graphs.inputs)
        again = judge(case.variant, case.unit.dtype, case.eager,
                      [plain[n] for n in case.output_names])
        worst = max((c.max_abs for c in again.comparisons if c.max_abs is not None),
                    default=None, key=lambda x: math.inf if math.isnan(x) else x)
        rerun = Rerun("disabled", again.outcome, max_abs=worst)
    except StageFailure as failure:
        rerun = Rerun("disabled", None, error=failure.reason)
    definition = None if rerun.vanishes else _by_definition(case, got, failing, graphs)
    return replace(checked, unoptimized=rerun, definition=definition)


def _by_definition(case: _Case, got: list[np.ndarray] | None, failing: list[int],
                   graphs: _Graphs) -> ByDefinition:
    """The case's graph (the one ONNX Runtime ran) evaluated as ONNX defines it, on the
    same inputs, and judged against eager and against ONNX Runtime on the failing
    outputs: the owner rule says whether the graph or the kernel computes otherwise.
    `got` None: ONNX Runtime raised. The reference raising too (not for want of its own
    support) says the graph is invalid there; computing eager's answer, the kernel."""
    from onnx.reference import ReferenceEvaluator

    from parity_gate.compare import spec
    from parity_gate.compare.owner import owner_rule, reference_lacks

    names = case.output_names
    part = og.extract(graphs.model, names)
    wanted = {i.name for i in part.graph.input}
    feeds = {graphs.inputs.get(k, k): v for k, v in case.feeds.items()
             if graphs.inputs.get(k, k) in wanted}
    oracle = "ONNX's reference evaluator"
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            every = ReferenceEvaluator(part).run(None, feeds, intermediate=True)
    except Exception as exc:  # an op or dtype the reference does not implement
        said = first_line(f"{type(exc).__name__}: {exc}", 200)
        invalid = got is None and not reference_lacks(exc)
        return ByDefinition(oracle, error=said, owner=Owner.TRANSLATION if invalid else None)
    assert isinstance(every, dict)
    undefined = spec.undefined_at(part, {**feeds, **every})
    if undefined is not None:  # no value is wrong by the definition: the graph is
        return ByDefinition(oracle, owner=Owner.TRANSLATION, undefined=undefined)
    values = [np.asarray(every[n]) for n in names]
    for m, name in enumerate(names):
        defined = spec.evaluate(part, feeds, name, like=case.eager[m].dtype, computed=every)
        if defined is not None:
            values[m] = defined[0]
            oracle = f"the definition of {defined[1].op}"
    dtype = case.unit.dtype

    def agrees(side: list[np.ndarray]) -> bool:
        return judge(case.variant, dtype, [side[m] for m in failing],
                     [values[m] for m in failing]).outcome is Outcome.PASS

    with_eager, with_ort = agrees(case.eager), None if got is None else agrees(got)
    return ByDefinition(oracle, with_eager, with_ort, owner_rule(with_eager, with_ort).owner)


def _raised(case: _Case, failure: StageFailure, graphs: _Graphs) -> ByDefinition | None:
    """Whose code an ONNX Runtime error at run time is: the graph run as ONNX defines it."""
    if failure.outcome is not Outcome.RUNTIME_ERROR:
        return None
    try:
        return _by_definition(case, None, list(range(len(case.output_names))), graphs)
    except Exception as exc:  # the oracle's own failure owns nothing
        return ByDefinition("ONNX's reference evaluator",
                            error=first_line(f"{type(exc).__name__}: {exc}", 200))


def _either(eager: np.ndarray, strided: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Eager's answer, with the strided run's where that is the one ONNX gave."""
    if eager.shape != strided.shape or eager.shape != got.shape or eager.dtype != got.dtype:
        return eager
    out = eager.copy()
    pick = ~same_elements(eager, strided) & same_elements(strided, got)
    out[pick] = strided[pick]
    return out


def _quirk(case: _Case, got: list[np.ndarray]) -> EagerQuirk:
    """The first element where eager's two layouts disagree, with the inputs there."""
    assert case.strided is not None
    for m, (e, s) in enumerate(zip(case.eager, case.strided, strict=True)):
        if e.shape != s.shape:
            return EagerQuirk(f"o{m}", 1, [], f"shape {e.shape}", f"shape {s.shape}")
        differ = ~same_elements(e, s)
        if differ.any():
            index = tuple(int(i) for i in np.argwhere(differ)[0])
            inputs = {k: fmt_value(v[index]) for k, v in case.inputs.items()
                      if v.shape == e.shape}
            onnx = fmt_value(got[m][index]) if got[m].shape == e.shape else ""
            return EagerQuirk(f"o{m}", int(differ.sum()), list(index), fmt_value(e[index]),
                              fmt_value(s[index]), inputs, onnx)
    return EagerQuirk("o0", 0, [], "", "")


def _audit(case: _Case, graphs: _Graphs) -> list[precision.PrecisionFinding]:
    bits = max((precision.NUMPY_FLOAT_BITS.get(e.dtype.name, 0) for e in case.eager),
               default=0)
    return precision.audit(graphs.raw, graphs.raw_types, case.output_names, bits)

