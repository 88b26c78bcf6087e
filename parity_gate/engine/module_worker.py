"""Inside a worker: build one module, compute eager references, export, check, open a
session, run and compare each case, then run the follow-up checks' table on it.

Read top to bottom, each stage is one call: `_build` → `_eager` → `export_from_good_set` →
`stages.check` → `open_session` → `run_case` (run and compare) → `run_follow_ups`. Runs in
the worker process only (it imports torch). Results stream out through `emit` one case at a
time, so when the process dies the parent still has every case finished before the crash.
"""

from __future__ import annotations

import copy
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity_gate.engine import generation, performance, quantize, runtime, stages, taskrun
from parity_gate.engine.binding import Binding, bind
from parity_gate.engine.cached import WorkerCache
from parity_gate.engine.evidence import evidence_inputs, evidence_model
from parity_gate.engine.exporting import ExportedModel
from parity_gate.engine.exports import export_from_good_set
from parity_gate.engine.factory import build, build_module, seed_everything
from parity_gate.engine.fixtures import derive_seed
from parity_gate.engine.followups import CaseState, ProviderRun, run_follow_ups
from parity_gate.engine.judging import Session, run_case
from parity_gate.engine.probing import plan_probes, run_probes
from parity_gate.engine.protocol import Emit
from parity_gate.engine.references import eager_reference
from parity_gate.engine.runtime import first_line
from parity_gate.engine.stages import StageFailure
from parity_gate.engine.state import (
    EagerRef,
    JobContext,
    TypedModule,
    choose_export_batch,
    tolerance_for,
)
from parity_gate.hazards.context import HazardContext, training_modules
from parity_gate.hazards.run import module_checks
from parity_gate.model.findings import Stage
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, Provenance
from parity_gate.plan.cases import (
    ModuleJob,
    batch_sizes_for,
    is_generation,
    is_quantized,
    is_task,
)
from parity_gate.plan.probes import Probe

__all__ = ["build_module", "export_batch_size", "run_job", "tolerance_for"]

Refs = dict[tuple[str, int | None], EagerRef]


@dataclass(frozen=True)
class DtypeExport:
    """One dtype's export and what every case of it shares."""

    mod: TypedModule
    exported: ExportedModel
    example: dict[str, np.ndarray]   # the fixture example it was exported with
    cached: bool                     # served by the export cache
    export_batch: int
    timings: dict[str, float]        # build_s, export_s (capture_s, translate_s), check_s


def run_job(job: ModuleJob, emit: Emit) -> None:
    """Produce a CaseResult for every planned case of `job` (never raises)."""
    ctx = JobContext(job, emit)
    runtime.set_engine_cache(job.cache_dir / "tensorrt" if job.cache_dir is not None else None)
    try:
        _run(ctx)
    except Exception:  # a bug in parity-gate must not lose the other cases
        ctx.fail_all(ctx.pending, Outcome.CRASH, "internal error in parity-gate worker "
                     "(please report)", traceback.format_exc()[-4000:])
    try:
        ctx.emit_hazards()
    except Exception:  # advisory: never lose the cases for a finding
        traceback.print_exc()


def _run(ctx: JobContext) -> None:
    import torch

    module = _build(ctx, torch)
    if module is None:
        return
    job = ctx.job
    ctx.cache, problem = WorkerCache.open(job)
    if problem:
        ctx.note("cache", problem)
    ctx.hazard(module_checks(HazardContext(job.name, job.export.exporter or "dynamo",
                                           job.module.inputs, training=ctx.training),
                             job.settings.hazards))
    binding, problems = bind(module, job.module)
    if problems:
        for text in problems:
            ctx.note("manifest", text, "error")
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR, problems[0], "\n".join(problems))
        return
    device = job.settings.reference_device or "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR,
                     "reference_device: cuda, but torch sees no CUDA device on this machine")
        return
    for dtype in job.settings.dtypes or []:
        keys = [k for k in ctx.pending if k.dtype == dtype]
        if keys:
            ctx.step(Stage.CASTING, dtype)
            _run_dtype(ctx, _typed(torch, module, binding, dtype, device), keys)


def _build(ctx: JobContext, torch: Any) -> Any:
    """The module from its factory, seeded, in eval mode (behind its flat-tensor step when
    it declares a KV cache); None when it cannot be had (every case then says why)."""
    job = ctx.job
    seed_everything(torch, derive_seed(job.seed, job.name))
    ctx.step(Stage.BUILDING, job.name)
    t0 = time.perf_counter()
    try:
        module = build(job)
    except Exception as exc:
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR,
                     f"factory {job.module.factory} failed: {first_line(f'{exc!r}')}",
                     traceback.format_exc()[-4000:])
        return None
    ctx.build_s = time.perf_counter() - t0
    if not isinstance(module, torch.nn.Module):
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR,
                     f"factory {job.module.factory} returned {type(module).__name__}, "
                     "expected a torch.nn.Module")
        return None
    ctx.training = training_modules(module)  # the training-mode rule reads it
    module.eval()
    if job.module.cache is not None:  # a KV cache: the model behind its flat-tensor step
        module = generation.prepare(ctx, module)
    return module


def _typed(torch: Any, module: Any, binding: Binding, dtype: str, device: str) -> TypedModule:
    """The module in `dtype`: itself when it already is (one copy of the weights fewer at
    the peak; nothing below changes it in place on the CPU), else a cast copy."""
    target = getattr(torch, dtype)
    native = device == "cpu" and all(t.dtype == target for t in module.state_dict().values()
                                      if t.is_floating_point())
    typed = module if native else copy.deepcopy(module).to(target)
    return TypedModule(typed, binding, dtype, device, module)


def _run_dtype(ctx: JobContext, mod: TypedModule, keys: list[CaseKey]) -> None:
    # generation and task-metric cases run on this dtype's export, below
    gen_keys = [k for k in keys if is_generation(k) or is_task(k) or is_quantized(k)]
    keys = [k for k in keys if k not in gen_keys]
    refs = _eager(ctx, mod, keys)
    live = [k for k in keys if k in ctx.pending]
    if not live:
        ctx.fail_all(gen_keys, Outcome.SKIPPED, "generation runs on the export of the "
                     "module's per-step cases, and none of this dtype ran")
        return
    hazards = ctx.hazards
    reused = _export_and_run(ctx, mod, refs, live, gen_keys)
    if not ctx.suspects or ctx.cache is None:
        return
    # A case failed on a reused translation: the failure must not rest on it. Translate
    # the program afresh (replacing the entry) and run the failing cases again on that.
    suspects, ctx.suspects, ctx.hazards = ctx.suspects, (), hazards
    ctx.cache.refresh = True
    try:
        fresh = _export_and_run(ctx, mod, refs, [k for k in live if k in ctx.pending],
                                [k for k in gen_keys if k in ctx.pending],
                                providers=list(dict.fromkeys(k.provider for k in live)))
    finally:
        ctx.cache.refresh = False
    if reused is not None and fresh is not None and reused != fresh:
        ctx.note("cache", f"{mod.dtype}: {len(suspects)} case(s) failed on the ONNX "
                 "translation kept in the export cache, and a fresh translation of the same "
                 "program differs from it; the cases were run again on the fresh one, which "
                 "replaced the cache's")


def _export_and_run(ctx: JobContext, mod: TypedModule, refs: Refs, live: list[CaseKey],
                    gen_keys: list[CaseKey], providers: list[str] | None = None
                    ) -> bytes | None:
    """Export this dtype, run its cases on each provider (and its generation cases);
    failures on a reused translation are held back (JobContext.holds). Returns the model
    the cases ran on (None: the export or its check failed)."""
    try:
        done = _export_and_check(ctx, mod, refs, live + gen_keys)
        if done is None:
            return None
        probes = plan_probes(ctx, done.exported, done.example, done.export_batch)
        for provider in providers or list(dict.fromkeys(k.provider for k in live)):
            _run_provider(ctx, done, provider, [k for k in live if k.provider == provider],
                          refs, probes)
        tasks = [k for k in gen_keys if is_task(k)]
        if tasks:
            taskrun.run_cases(ctx, mod, done.exported, done.cached, tasks, open_session)
        quantized = [k for k in gen_keys if is_quantized(k)]
        if quantized:
            quantize.run_cases(ctx, mod, done.exported, done.cached, quantized, open_session)
        gen_keys = [k for k in gen_keys if k not in tasks and k not in quantized]
        if gen_keys:
            generation.run_cases(ctx, mod, done.exported, done.cached, gen_keys,
                                 open_session)
    finally:
        ctx.on_reused = False
    return done.exported.model


def _eager(ctx: JobContext, mod: TypedModule, keys: list[CaseKey]) -> Refs:
    """Eager's outputs for every (fixture set, batch) the cases need; a reference that
    cannot be had fails its cases here, with its cause."""
    import torch

    job = ctx.job
    refs: Refs = {}
    for fixture_name in dict.fromkeys(k.inputs for k in keys):
        fixture = job.fixtures[fixture_name]
        for batch in batch_sizes_for(fixture, job.settings.batch_sizes or []):
            if any(k.inputs == fixture_name and k.batch_size == batch for k in keys):
                ctx.step(Stage.EAGER, f"{mod.dtype}/{fixture_name}/b{batch}")
                refs[(fixture_name, batch)] = eager_reference(ctx, torch, mod, fixture_name,
                                                              batch)
    for (fixture_name, ref_batch), ref in refs.items():
        if ref.error is not None:
            for k in keys:
                if k.inputs == fixture_name and k.batch_size == ref_batch:
                    ctx.result(CaseResult(k, ref.error.outcome, ref.error.reason,
                                          ref.error.detail,
                                          provenance=ctx.provenance(mod.device)))
    return refs


def _export_and_check(ctx: JobContext, mod: TypedModule, refs: Refs,
                      keys: list[CaseKey]) -> DtypeExport | None:
    """The dtype's export (see `exports`) and ONNX's own check of it; None when either
    fails (`keys` then fail with the cause)."""
    job = ctx.job
    names = next((r.names for r in refs.values() if r.outputs), [])
    export_batch = choose_export_batch(job.export.batch_size, job.settings.batch_sizes or [])
    ctx.step(Stage.EXPORTING, mod.dtype)
    t0 = time.perf_counter()
    if ctx.cache is not None:
        ctx.cache.begin(mod.dtype)
    try:
        got = export_from_good_set(ctx, mod, refs, names, export_batch)
    finally:
        missed = ctx.cache.end() if ctx.cache is not None else ""
        if missed:  # what changed since this module's last export (engine.changes)
            ctx.note("cache", f"{mod.dtype}: {missed}")
    if got is None:
        return None
    exported, example, cached = got
    ctx.on_reused = cached  # from here, a failure on a reused translation is held back
    export_s = time.perf_counter() - t0
    ctx.step(Stage.CHECKING, mod.dtype)
    t0 = time.perf_counter()
    try:
        disagreement = stages.check(exported.source)
    except StageFailure as failure:
        ctx.fail_all(keys, failure.outcome, failure.reason, failure.detail,
                     provenance=ctx.provenance(mod.device, exported, cached))
        return None
    check_s = time.perf_counter() - t0
    if disagreement is not None:  # ONNX Runtime decides: a model it rejects fails loading
        ctx.note("shape-inference", f"{mod.dtype}: {disagreement.describe()}")
    return DtypeExport(mod, exported, example, cached, export_batch,
                       {"build_s": ctx.build_s, "export_s": export_s, **exported.timings,
                        "check_s": check_s})


def _run_provider(ctx: JobContext, done: DtypeExport, provider: str, keys: list[CaseKey],
                  refs: Refs, probes: tuple[str, list[Probe]] | None = None) -> None:
    """Every case of one provider on one session: run and compare, then the follow-ups;
    then the `shapes: auto` probes on the same session."""
    mod = done.mod
    provenance = ctx.provenance(mod.device, done.exported, done.cached)
    engines = performance.cache_files(provider)
    opened = open_session(ctx, done.exported, mod.dtype, provider, keys, provenance)
    if opened is None:
        return
    session, evidence, session_s = opened
    timings = {**done.timings, "session_s": session_s}
    run = Session.of(session, done.export_batch, provenance)
    shared = ProviderRun(ctx, mod, done.exported, provider, run, done.example,
                         performance.measurer(ctx.job, done.exported.source, provider,
                                              mod.typed, _case_cost(timings, len(keys))))
    if shared.measurer is not None and provider != "cpu":  # a GPU session's set-up cost
        shared.measurer.startup = performance.first_run(
            session, {k: v for k, v in done.example.items() if k in run.feed_names},
            session_s, provider, engines)
    for key in keys:
        ref = refs[(key.inputs, key.batch_size)]
        ctx.step(Stage.RUNNING, key.id,
                 evidence=evidence_inputs(evidence, key, ref, set(run.feed_names)))
        result, got = run_case(ctx.job, run, key, ref, dict(timings))
        if ctx.holds(result):  # re-checked on a fresh translation first: no follow-ups yet
            ctx.result(result)
            continue
        ctx.result(run_follow_ups(CaseState(shared, ref, result, got, result.outcome)))
    if probes is not None:
        run_probes(ctx, shared, probes, done.export_batch)


def _case_cost(timings: dict[str, float], cases: int) -> float:
    """The export, check and session time per case (capture and translation are parts of
    the export's; the build is the module's, not the provider's)."""
    return sum(timings.get(k, 0.0) for k in ("export_s", "check_s", "session_s")) / max(1, cases)


def open_session(ctx: JobContext, exported: ExportedModel, dtype: str, provider: str,
                 keys: list[CaseKey], provenance: Provenance
                 ) -> tuple[Any, dict[str, str], float] | None:
    """The ONNX Runtime session every case of `keys` runs on (per-step and generation
    cases alike), opened after the LOADING step records the evidence a crash while
    loading is replayed from; with the seconds the opening took. None when it fails:
    `keys` then fail with the cause."""
    job = ctx.job
    evidence = {"model": evidence_model(job, dtype, exported), "provider": provider,
                "optimization": "all"}
    ctx.step(Stage.LOADING, f"{dtype}", f"on {provider}", evidence)
    t0 = time.perf_counter()
    try:
        session = stages.open_session(exported.source, provider,
                                      job.providers[provider].options)
    except StageFailure as failure:
        ctx.fail_all(keys, failure.outcome, failure.reason, failure.detail,
                     provenance=provenance)
        return None
    return session, evidence, time.perf_counter() - t0


# Public entry points for follow-up stages (localisation) that redo a module as the gate did.


def export_batch_size(job: ModuleJob) -> int:
    """The batch size the gate exports this module at."""
    return choose_export_batch(job.export.batch_size, job.settings.batch_sizes or [])
