"""The float64 referee as a case meets it: a low-precision mismatch stands only where ONNX
Runtime is clearly further from a float64 run than eager is, and where float64 computes the
same function (no intermediate overflows in one run only); a discrete output (an integer, a
rounding, a comparison, an index) is never excused, unless it is a tie the manifest allows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from parity_gate.compare.reference import ACCUMULATION, OutputRules, judge_against_float64
from parity_gate.engine.discrete import discrete_outputs
from parity_gate.engine.exporting import ExportedModel
from parity_gate.engine.reductions import reduction_lengths
from parity_gate.engine.referee import range_disagreement, tie_elements
from parity_gate.engine.references import forward_calls
from parity_gate.engine.runtime import first_line
from parity_gate.engine.state import (
    JUDGED,
    EagerRef,
    JobContext,
    TypedModule,
    contract,
    output_spec,
    stack,
    tolerance_for,
)
from parity_gate.model.findings import Stage
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import CLEARLY_WORSE, Reference, Ruling
from parity_gate.model.results import CaseResult
from parity_gate.plan.cases import ModuleJob


def discrete_of(exported: ExportedModel) -> list[bool]:
    """Per output, whether the exported graph computes it as discrete values ([] when the
    graph cannot be read: every output is then judged as continuous, as before)."""
    try:
        import onnx

        proto = exported.graph if exported.graph is not None \
            else onnx.load_model_from_string(exported.model)
        return discrete_outputs(proto)
    except Exception:  # advisory: the integer outputs are still caught by their dtype
        return []


def reductions_of(exported: ExportedModel) -> list[int | None]:
    """Per output, the longest MatMul/Gemm/Conv reduction upstream of it ([] when the graph
    cannot be read: the accumulation bound is then never considered). Shapes the graph does
    not state are inferred first (ONNX's shape inference, without the weights' data)."""
    try:
        import onnx

        proto = exported.graph if exported.graph is not None \
            else onnx.load_model_from_string(exported.model)
        if not proto.graph.value_info:
            proto = onnx.shape_inference.infer_shapes(proto)
        return reduction_lengths(proto)
    except Exception:  # advisory: without lengths, the mismatch is judged as before
        return []


def against_float64(ctx: JobContext, mod: TypedModule, result: CaseResult, ref: EagerRef,
                     got: list[list[np.ndarray]], discrete: list[bool],
                     reductions: Sequence[int | None] = ()) -> CaseResult:
    """A mismatch stands only if ONNX is clearly further from float64 than eager is (and,
    in float32, outside float32's rounding of it); otherwise the case passes with the
    figures on record, unless its tolerance is the manifest's own: that contract stands,
    and the reason says no correct implementation can meet it. Never excused: a discrete
    output (unless it is a tie the manifest allows), and a case where float64 does not
    compute the same function (an intermediate overflows in one run only)."""
    if ref.truth is None:
        result.reference = Reference(Ruling.UNVERIFIED, error=ref.truth_error)
        return result
    judged = judge_float64(ctx.job, result, ref, got, discrete, reductions)
    if judged.ruling is Ruling.DISCRETE:
        judged = ties(ctx.job, mod, result, ref, got, discrete, judged)
    result.reference = judged
    if judged.ruling.defect:
        return result
    if ref.out_of_range is None:
        ctx.step(Stage.RECHECKING, result.key.id, "float64 computes the same function")
        ref.out_of_range = out_of_range(mod, ref)
    if ref.out_of_range:
        result.reference = replace(judged, ruling=Ruling.OUT_OF_RANGE, error=ref.out_of_range)
        return result
    worst = result.worst()
    name = worst.name if worst is not None else "output"
    if judged.ruling is Ruling.TIE:
        return replace(result, outcome=Outcome.PASS,
                       reason=f"{mod.dtype} eager and ONNX differ, but {judged.describe()}")
    if contract(ctx.job, mod.dtype, name):
        tol = tolerance_for(ctx.job, mod.dtype, output_spec(ctx.job, name))
        needed = worst.needed_atol if worst is not None else None
        result.reference = replace(judged, needed_atol=needed, manifest_atol=tol.atol,
                                   manifest_rtol=tol.rtol)
        return result
    plain = result.reexport
    better = (f"; exported with optimize: false, onnx needs only atol>={plain.onnx_error:.3g} "
              "against float64: the exporter's optimizer costs this accuracy"
              if plain is not None and plain.onnx_error is not None
              and judged.onnx_error is not None
              and plain.onnx_error * CLEARLY_WORSE <= judged.onnx_error else "")
    return replace(result, outcome=Outcome.PASS,
                   reason=f"{name}: {mod.dtype} eager and ONNX differ, but "
                   f"{judged.describe()}{better}")


def out_of_range(mod: TypedModule, ref: EagerRef) -> str:
    """Where the case's dtype and float64 disagree on an overflow or NaN ("" if nowhere)."""
    try:
        return range_disagreement(forward_calls(mod, ref, False), forward_calls(mod, ref, True),
                                  mod.dtype)
    except Exception as exc:  # no answer: the float64 check cannot be trusted either
        return f"the float64 range check failed ({first_line(repr(exc))}): the float64 " \
            "check cannot referee this case"


def ties(job: ModuleJob, mod: TypedModule, result: CaseResult, ref: EagerRef,
          got: list[list[np.ndarray]], discrete: list[bool], judged: Reference) -> Reference:
    """A failing discrete output: a tie when a float64 run perturbed by one rounding of
    the case's dtype lands on both sides at every element that differs; the case passes
    only where every failing discrete output is a tie its manifest entry allows."""
    failing = [i for i, n in enumerate(ref.names)
               if n in {c.name for c in result.comparisons if not c.passed}]
    steps = [i for i in failing if (ref.outputs[0][i].dtype.kind != "f"
             and ref.outputs[0][i].dtype.name != "bfloat16")
             or (i < len(discrete) and discrete[i])]
    notes, allowed = [], True
    for i in steps:
        name = ref.names[i]
        eager = [outs[i] for outs in ref.outputs]
        onnx = [outs[i] for outs in got]
        with np.errstate(all="ignore"):
            differ = [(e.astype(np.float64) != o.astype(np.float64))
                      & ~(np.isnan(e.astype(np.float64)) & np.isnan(o.astype(np.float64)))
                      for e, o in zip(eager, onnx, strict=True)]
        places = [(s, tuple(int(v) for v in ix)) for s, m in enumerate(differ)
                  for ix in np.argwhere(m)[:5]][:5]
        count = sum(int(m.sum()) for m in differ)
        where = ", ".join(f"{ix}" if len(differ) == 1 else f"sample {s} {ix}"
                          for s, ix in places) + (", ..." if count > len(places) else "")
        try:
            tie = mod.dtype in JUDGED and tie_elements(
                forward_calls(mod, ref, True), mod.dtype, i, eager, onnx, differ)
        except Exception:  # no witness: not a tie
            tie = False
        spec = output_spec(job, name)
        if tie:
            ok = bool(spec is not None and spec.ties)
            allowed &= ok
            notes.append(
                f"{name}: tie at a rounding boundary: the {count} differing element(s) "
                f"({where}) lie within one {mod.dtype} rounding of a boundary in float64 (a "
                f"float64 run rounded like {mod.dtype} lands on eager's value and on ONNX's)"
                + ("; ties: true allows it" if ok else
                   f"; {mod.dtype} cannot decide them, and the manifest does not allow ties "
                   f"on {name} (ties: true)"))
        else:
            allowed = False
            notes.append(f"{name} is discrete (an integer, a rounding, a comparison or an "
                         f"index): {count} element(s) differ ({where}) by whole steps, not "
                         f"all within one {mod.dtype} rounding of a boundary in float64; no "
                         "distance to float64 excuses it")
    if not steps:
        return judged
    return replace(judged, ruling=Ruling.TIE if allowed else Ruling.DISCRETE,
                   error="; ".join(notes))


def judge_float64(job: ModuleJob, result: CaseResult, ref: EagerRef,
                   got: list[list[np.ndarray]], discrete: Sequence[bool] = (),
                   reductions: Sequence[int | None] = ()) -> Reference:
    """`reductions` (reductions_of) count only where the case's dtype and provider may
    accumulate in the narrow type (compare.reference.ACCUMULATION)."""
    truth = ref.truth or []
    specs = {o.name: o for o in job.module.outputs or []}
    count = len(ref.names)
    stacked = [[stack([outs[i] for outs in side]) for i in range(count)]
               for side in (ref.outputs, got, truth)]
    if any(a is None for side in stacked for a in side):
        return Reference(Ruling.UNVERIFIED, error="samples differ in shape")
    eager, onnx, true = ([a for a in side if a is not None] for side in stacked)
    failing = {c.name for c in result.comparisons if not c.passed}
    rules = OutputRules(
        ref.names, [tolerance_for(job, result.key.dtype, specs.get(n)) for n in ref.names],
        [getattr(specs.get(n), "task", None) == "classification" for n in ref.names], discrete,
        list(reductions) if ACCUMULATION.applies(result.key.dtype, result.key.provider) else [])
    return judge_against_float64(eager, onnx, true, rules,
                                 [i for i, n in enumerate(ref.names) if n in failing])
