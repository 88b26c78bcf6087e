"""Per-case follow-up checks, as one table the worker runs in order after each comparison.

A record says when its check applies (read from the case as compared), what it needs and
produces (a field `CaseResult` holds), its cost class and the progress label; the worker
records each check's status and time on the result (`CaseResult.checks`). Adding a check is
one record and its function here: nothing in `module_worker`'s control flow changes.
"""

from __future__ import annotations

import enum
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity_gate.compare.reference import ACCUMULATION
from parity_gate.engine import performance, stages
from parity_gate.engine.exporting import ExportedModel, ExportFailure
from parity_gate.engine.exports import cached_export, hand_off_exports
from parity_gate.engine.float64 import against_float64, discrete_of, judge_float64, reductions_of
from parity_gate.engine.judging import Session, run_case
from parity_gate.engine.references import float64_run, nothing_finite
from parity_gate.engine.runtime import first_line
from parity_gate.engine.stages import StageFailure
from parity_gate.engine.state import JUDGED, EagerRef, JobContext, TypedModule
from parity_gate.model.findings import Rerun, Stage
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import Reexport, Ruling
from parity_gate.model.results import CaseResult, CheckRun


@dataclass
class ProviderRun:
    """What every case of one (module, dtype, provider) shares, and what checks create once
    for all of them (the optimizer-off session, the graph's discrete outputs)."""

    ctx: JobContext
    mod: TypedModule
    exported: ExportedModel
    provider: str
    run: Session
    example: dict[str, np.ndarray]
    measurer: Any = None                            # performance.measurer's, when timed
    unoptimized: list[Any] = field(default_factory=list)  # ORT optimizations off, on demand
    discrete: list[bool] | None = None              # per output, read on the first mismatch
    reductions: list[int | None] | None = None      # per output, likewise (reductions_of)
    warned: set[str] = field(default_factory=set)   # outputs said to hold nothing finite


@dataclass
class CaseState:
    """One case between the checks: its result (which a check may replace), the ONNX
    outputs it was compared on, and the outcome as first compared (what checks key on)."""

    shared: ProviderRun
    ref: EagerRef
    result: CaseResult
    got: list[list[np.ndarray]]
    compared: Outcome = Outcome.PASS

    @property
    def mismatch(self) -> bool:
        return self.compared is Outcome.MISMATCH


class Cost(str, enum.Enum):
    NOTE = "note"        # reads what the case already has
    RUN = "run"          # runs the case again (a session exists or is opened once)
    EAGER = "eager"      # runs the module again in eager (float64, timing)
    EXPORT = "export"    # exports the module again (once per dtype, cached)


@dataclass(frozen=True)
class FollowUp:
    """One follow-up check: `applies` reads the case, `run` does the check and sets
    `produces` on the result (or replaces the result, for the float64 ruling)."""

    name: str
    label: str                                   # the progress line while it runs
    applies: Callable[[CaseState], bool]
    run: Callable[[CaseState], None]
    needs: tuple[str, ...]
    produces: str
    cost: Cost
    per_dtype: bool = False  # its progress line names the dtype (made once for it), not the case


def _failed_rerun(again: CaseResult) -> str:
    """A follow-up run that errors is that check's finding with its cause, never "the
    mismatch persists" (a runtime error compares nothing)."""
    return f"{again.outcome.value}: {first_line(again.reason)}"


def fusion(state: CaseState) -> None:
    """Re-run a mismatch with ORT's graph optimizations disabled: when it vanishes, a fusion
    or rewrite inside ONNX Runtime is the likely culprit, not the exporter."""
    s, result = state.shared, state.result
    job = s.ctx.job
    try:
        if not s.unoptimized:
            s.unoptimized.append(stages.open_session(
                s.exported.source, s.provider, job.providers[s.provider].options,
                optimization="disabled"))
        again, _ = run_case(job, Session.of(s.unoptimized[0], s.run.export_batch,
                                            result.provenance), result.key, state.ref, {})
    except StageFailure as failure:
        result.rerun = Rerun(error=failure.reason)
        return
    except Exception as exc:  # the check is advisory; never lose the real result
        result.rerun = Rerun(error=first_line(repr(exc)))
        return
    if again.outcome.info.junit == "error":  # the re-run failed: no verdict on the fusion
        result.rerun = Rerun(error=_failed_rerun(again))
        return
    worst = again.worst()
    result.rerun = Rerun(outcome=again.outcome,
                         max_abs=worst.max_abs if worst is not None else None)


def reexport(state: CaseState) -> None:
    """The mismatch on a graph exported with the exporter's own optimizer off: ORT's
    optimization level cannot undo what onnxscript's optimizer already rewrote or folded
    (BatchNorm into a convolution, in float16)."""
    state.result.reexport = _reexport(state)


def _reexport(state: CaseState) -> Reexport:
    s, result, ref = state.shared, state.result, state.ref
    ctx, mod, job = s.ctx, s.mod, s.ctx.job
    try:
        session = mod.unoptimized.get(s.provider)
        if session is None:
            plain, _, _ = cached_export(ctx, mod, s.example, ref.names,
                                        job.export.model_copy(update={"optimize": False}),
                                        s.run.export_batch, purpose="reexport")
            mod.plain = plain
            session = stages.open_session(plain.source, s.provider,
                                          job.providers[s.provider].options)
            mod.unoptimized[s.provider] = session
        again, got = run_case(job, Session.of(session, s.run.export_batch, result.provenance),
                              result.key, ref, {})
    except (ExportFailure, StageFailure) as failure:
        return Reexport(error=failure.reason)
    except Exception as exc:  # advisory: never lose the real result
        return Reexport(error=first_line(repr(exc)))
    if again.outcome.info.junit == "error":
        return Reexport(error="an exporter defect that the optimizer's rewrites hide "
                        "(ONNX Runtime fails on that graph where it runs the optimized one; "
                        f"worth its own report): {_failed_rerun(again)}")
    worst = again.worst()
    onnx_error = None
    if ref.truth is not None and again.outcome is not Outcome.SHAPE_MISMATCH:
        judged = judge_float64(job, result, ref, got)
        onnx_error = judged.onnx_error if judged.ruling is not Ruling.UNVERIFIED else None
    return Reexport(outcome=again.outcome,
                    max_abs=worst.max_abs if worst is not None else None,
                    onnx_error=onnx_error)


def float64_reference(state: CaseState) -> None:
    float64_run(state.shared.ctx, state.shared.mod, state.ref)


def float64_ruling(state: CaseState) -> None:
    s = state.shared
    if s.discrete is None:
        s.discrete = discrete_of(s.exported)
    if s.reductions is None:
        s.reductions = reductions_of(s.exported) if ACCUMULATION.applies(
            s.mod.dtype, s.provider) else []
    state.result = against_float64(s.ctx, s.mod, state.result, state.ref, state.got,
                                   s.discrete, s.reductions)


def hand_off(state: CaseState) -> None:
    s = state.shared
    hand_off_exports(s.ctx.job, s.mod, s.exported, state.ref.names)


def timing(state: CaseState) -> None:
    s = state.shared
    first = state.ref.inputs[0]
    state.result.performance = s.measurer.measure(
        s.run.session, performance.eager_call(s.mod.binding, s.mod.typed, first, s.mod.device),
        {k: v for k, v in first.items() if k in s.run.feed_names}, state.result.key.id)


def degenerate(state: CaseState) -> None:
    """A pass that compared nothing but where the NaNs are is said once per output."""
    s = state.shared
    name = nothing_finite(state.ref)
    if name and name not in s.warned:
        s.warned.add(name)
        s.ctx.note("degenerate-reference", f"{state.result.key.id}: every value of {name} is "
                   f"NaN or inf in eager (a {s.mod.dtype} overflow?), so its pass compares "
                   "nothing but where the NaNs and infinities are")


def _judged(state: CaseState) -> bool:
    return state.mismatch and state.shared.mod.dtype in JUDGED


FOLLOW_UPS: list[FollowUp] = [
    FollowUp("fusion", "with ORT graph optimizations off", lambda s: s.mismatch, fusion,
             ("session",), "rerun", Cost.RUN),
    FollowUp("float64-reference", "float64 reference",
             lambda s: _judged(s) and s.ref.truth is None and not s.ref.truth_error,
             float64_reference, ("float64 module", "references"), "(the reference's truth)",
             Cost.EAGER, per_dtype=True),
    FollowUp("reexport", "exported with optimize: false",
             lambda s: s.mismatch and s.shared.ctx.job.export.exporter == "dynamo"
             and bool(s.shared.ctx.job.export.optimize),
             reexport, ("unoptimized export", "references"), "reexport", Cost.EXPORT),
    FollowUp("float64", "against float64", _judged, float64_ruling,
             ("float64 run", "exported graph"), "reference", Cost.EAGER),
    FollowUp("hand-off", "exports left for localisation", lambda s: s.mismatch, hand_off,
             ("exports",), "(localisation's exports)", Cost.NOTE),
    FollowUp("timing", "timing against eager",
             lambda s: s.shared.measurer is not None and bool(s.result.comparisons), timing,
             ("session", "live module"), "performance", Cost.EAGER),
    FollowUp("degenerate-reference", "", lambda s: s.result.outcome is Outcome.PASS,
             degenerate, ("references",), "(a finding)", Cost.NOTE),
]


def run_follow_ups(state: CaseState, table: list[FollowUp] | None = None) -> CaseResult:
    """Every check of the table that applies, in order, each recorded on the result with its
    status and time. A check that raises fails alone (its note says how): the case keeps
    what it has, and the checks after it still run."""
    runs: list[CheckRun] = []
    for check in FOLLOW_UPS if table is None else table:
        if not check.applies(state):
            continue
        if check.label:
            subject = state.shared.mod.dtype if check.per_dtype else state.result.key.id
            state.shared.ctx.step(Stage.RECHECKING, subject, check.label)
        t0 = time.perf_counter()
        try:
            check.run(state)
            runs.append(CheckRun(check.name, "ran", round(time.perf_counter() - t0, 4)))
        except Exception as exc:  # advisory: never lose the case for a follow-up
            traceback.print_exc()
            runs.append(CheckRun(check.name, "failed", round(time.perf_counter() - t0, 4),
                                 first_line(repr(exc))))
    state.result.checks = [*state.result.checks, *runs]
    return state.result
