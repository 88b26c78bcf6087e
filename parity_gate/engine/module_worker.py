"""Inside a worker: build one module, compute eager references, export, run, compare.

Runs in the worker process only (it imports torch). Results stream out through
`emit` one case at a time, so when the process dies the parent still has every
case finished before the crash.
"""

from __future__ import annotations

import copy
import importlib
import importlib.machinery
import json
import random
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.compare.detection import DETECTION_KEYS, Detections, compare_detections
from parity_gate.compare.reference import judge_against_float64
from parity_gate.engine import generation, performance, stages
from parity_gate.engine.binding import Binding, bind, output_names
from parity_gate.engine.cache import hand_off
from parity_gate.engine.cached import WorkerCache
from parity_gate.engine.discrete import discrete_outputs
from parity_gate.engine.exporting import ExportedModel, ExportFailure, export_module
from parity_gate.engine.fixtures import (
    FixtureError,
    derive_seed,
    generate,
)
from parity_gate.engine.protocol import CaseStream, Emit
from parity_gate.engine.referee import range_disagreement, tie_elements
from parity_gate.engine.runtime import first_line, memory_failure
from parity_gate.engine.stages import StageFailure
from parity_gate.engine.tensors import leaves, to_numpy, to_torch
from parity_gate.hazards.context import HazardContext, training_modules
from parity_gate.hazards.run import check_failure, module_checks, run_checks
from parity_gate.hazards.run import merge as merge_hazards
from parity_gate.manifest.models import EdgeFixture
from parity_gate.model.findings import Finding, Rerun, Stage
from parity_gate.model.hazards import Hazard
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import CLEARLY_WORSE, Reexport, Reference, Ruling
from parity_gate.model.results import CaseResult, Provenance
from parity_gate.plan.cases import ModuleJob, batch_sizes_for, is_generation

# Dtypes whose eager run is not a trustworthy reference on its own: judged against float64.
LOW_PRECISION = ("float16", "bfloat16")
# Every float dtype below float64 has its mismatches judged against a float64 run.
JUDGED = ("float32", *LOW_PRECISION)


@dataclass
class _Reference:
    """Eager outputs of one (fixture, batch) across samples, or why there are none;
    `truth`: the float64 run of the same inputs, made on the first mismatch only."""

    inputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    outputs: list[list[np.ndarray]] = field(default_factory=list)
    error: CaseResult | None = None
    eager_s: float = 0.0
    names: list[str] = field(default_factory=list)
    truth: list[list[np.ndarray]] | None = None
    truth_error: str = ""
    out_of_range: str | None = None  # referee.range_disagreement's answer, once asked


@dataclass
class _Module:
    """One module in one dtype, and what follow-up checks create from it once."""

    typed: Any
    binding: Binding
    dtype: str
    device: str
    source: Any  # the module before casting (float64 copies are made from it)
    float64: Any = None
    unoptimized: dict[str, Any] = field(default_factory=dict)  # provider -> session / error
    plain: ExportedModel | None = None  # the optimize: false export, when one was made
    handed: bool = False                # its exports left for localisation (_hand_off)


class _Ctx(CaseStream):
    """Per-job state shared by the steps below."""

    job: ModuleJob
    training: tuple[str, ...] = ()    # submodules in training mode, read before .eval()
    hazards: list[Hazard] | None = None
    cache: WorkerCache | None = None  # the export cache, when the run has one

    def hazard(self, found: list[Hazard]) -> None:
        self.hazards = [*(self.hazards or []), *found]

    def emit_hazards(self) -> None:
        """One finding per hazard, folded across dtypes, once the module is done."""
        for h in merge_hazards(self.hazards or []):
            severity = "error" if h.blocks else "warning"  # an error annotation blocks
            self.finding(Finding(self.job.name, h.rule, h.describe(), severity, hazard=h))

    def fail_all(self, keys: list[CaseKey], outcome: Outcome, reason: str, detail: str = "",
                 **extra: Any) -> None:
        for key in list(keys):
            self.result(CaseResult(key, outcome, reason=reason, detail=detail, **extra))

    def note(self, kind: str, message: str, severity: str = "warning") -> None:
        self.finding(Finding(self.job.name, kind, message, severity))

    def provenance(self, device: str, exported: ExportedModel | None = None,
                   cached: bool = False) -> Provenance:
        """What ran for this job's cases: recorded on every result, failed ones included."""
        export = self.job.export
        return Provenance(
            exporter=export.exporter or "", export_options=export.model_dump(exclude_none=True),
            opset=exported.opset if exported else None,
            ir_version=exported.ir_version if exported else None,
            seed=self.job.seed, reference_device=device, export_cached=cached)


def run_job(job: ModuleJob, emit: Emit) -> None:
    """Produce a CaseResult for every planned case of `job` (never raises)."""
    ctx = _Ctx(job, emit)
    try:
        _run(ctx)
    except Exception:  # a bug in parity-gate must not lose the other cases
        ctx.fail_all(ctx.pending, Outcome.CRASH, "internal error in parity-gate worker "
                     "(please report)", traceback.format_exc()[-4000:])
    try:
        ctx.emit_hazards()
    except Exception:  # advisory: never lose the cases for a finding
        traceback.print_exc()


def _run(ctx: _Ctx) -> None:
    import torch

    job = ctx.job
    settings = job.settings
    _seed_everything(torch, derive_seed(job.seed, job.name))
    ctx.step(Stage.BUILDING, job.name)
    try:
        module = _build(job)
    except Exception as exc:
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR,
                     f"factory {job.module.factory} failed: {first_line(f'{exc!r}')}",
                     traceback.format_exc()[-4000:])
        return
    if not isinstance(module, torch.nn.Module):
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR,
                     f"factory {job.module.factory} returned {type(module).__name__}, "
                     "expected a torch.nn.Module")
        return
    ctx.training = training_modules(module)  # the training-mode rule reads it
    module.eval()
    if job.module.cache is not None:  # a KV cache: the model behind its flat-tensor step
        module = generation.prepare(ctx, module)
        if module is None:
            return
        job = ctx.job
    ctx.cache, problem = WorkerCache.open(job, module)
    if problem:
        ctx.note("cache", problem)
    ctx.hazard(module_checks(HazardContext(job.name, job.export.exporter or "dynamo",
                                           job.module.inputs, training=ctx.training),
                             settings.hazards))
    binding, problems = bind(module, job.module)
    if problems:
        for text in problems:
            ctx.note("manifest", text, "error")
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR, problems[0], "\n".join(problems))
        return
    device = settings.reference_device or "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR,
                     "reference_device: cuda, but torch sees no CUDA device on this machine")
        return
    for dtype in settings.dtypes or []:
        keys = [k for k in ctx.pending if k.dtype == dtype]
        if keys:
            _run_dtype(ctx, torch, module, binding, dtype, device, keys)


def _run_dtype(ctx: _Ctx, torch: Any, module: Any, binding: Binding, dtype: str, device: str,
               keys: list[CaseKey]) -> None:
    job = ctx.job
    settings = job.settings
    gen_keys = [k for k in keys if is_generation(k)]  # run on this dtype's export, below
    keys = [k for k in keys if not is_generation(k)]
    ctx.step(Stage.CASTING, dtype)
    target = getattr(torch, dtype)
    native = device == "cpu" and all(t.dtype == target for t in module.state_dict().values()
                                      if t.is_floating_point())
    # Already in this dtype: the module itself, not a copy (one copy of the weights fewer
    # at the peak; nothing below changes it in place on the CPU).
    typed = module if native else copy.deepcopy(module).to(target)
    mod = _Module(typed, binding, dtype, device, module)
    refs: dict[tuple[str, int | None], _Reference] = {}
    for fixture_name in dict.fromkeys(k.inputs for k in keys):
        fixture = job.fixtures[fixture_name]
        for batch in batch_sizes_for(fixture, settings.batch_sizes or []):
            if any(k.inputs == fixture_name and k.batch_size == batch for k in keys):
                ctx.step(Stage.EAGER, f"{dtype}/{fixture_name}/b{batch}")
                refs[(fixture_name, batch)] = _reference(ctx, torch, mod, fixture_name, batch)
    for (fixture_name, ref_batch), ref in refs.items():
        if ref.error is not None:
            hit = [k for k in keys if k.inputs == fixture_name and k.batch_size == ref_batch]
            for k in hit:
                ctx.result(CaseResult(k, ref.error.outcome, ref.error.reason, ref.error.detail,
                                      provenance=ctx.provenance(device)))
    live = [k for k in keys if k in ctx.pending]
    if not live:
        ctx.fail_all(gen_keys, Outcome.SKIPPED, "generation runs on the export of the "
                     "module's per-step cases, and none of this dtype ran")
        return
    names = next((r.names for r in refs.values() if r.outputs), [])
    export_batch = _export_batch(job.export.batch_size, settings.batch_sizes or [])
    ctx.step(Stage.EXPORTING, dtype)
    t0 = time.perf_counter()
    got = _export_from_good_set(ctx, mod, refs, names, export_batch)
    if got is None:
        return
    exported, example, cached = got
    export_s = time.perf_counter() - t0
    ctx.step(Stage.CHECKING, dtype)
    t0 = time.perf_counter()
    try:
        stages.check(exported.source)
    except StageFailure as failure:
        ctx.fail_all(live + gen_keys, failure.outcome, failure.reason, failure.detail,
                     provenance=ctx.provenance(device, exported, cached))
        return
    check_s = time.perf_counter() - t0
    for provider in dict.fromkeys(k.provider for k in live):
        pkeys = [k for k in live if k.provider == provider]
        shared = {"export_s": export_s, "check_s": check_s}
        _run_provider(ctx, exported, provider, pkeys, refs, export_batch, shared, mod, example,
                      cached)
    if gen_keys:
        generation.run_cases(ctx, mod, exported, gen_keys,
                             _tolerance(job, dtype, _output_spec(job, "logits")),
                             _contract(job, dtype, "logits"), cached, _open_session)


def _export_from_good_set(ctx: _Ctx, mod: _Module,
                          refs: dict[tuple[str, int | None], _Reference], names: list[str],
                          export_batch: int
                          ) -> tuple[ExportedModel, dict[str, np.ndarray], bool] | None:
    """Export with an example from a fixture set eager accepted. A set whose example
    fails the export, or makes it fix a declared-dynamic dim (a one-long sequence that
    torch.export specialises), is followed by the next good set: a bad set costs only its
    own cases, not every set's. None: every case got its failure."""
    job, dtype = ctx.job, mod.dtype
    live = [k for k in ctx.pending if k.dtype == dtype]
    examples: list[tuple[str, dict[str, np.ndarray]]] = []
    last: ExportFailure | FixtureError | None = None
    for name in dict.fromkeys(name for name, _ in refs):
        if any(r.error is None for (f, _), r in refs.items() if f == name):
            try:
                examples.append((name, generate(
                    name, job.fixtures[name], [i.name for i in job.module.inputs],
                    export_batch, dtype, 0, seed=job.seed, base_dir=job.base_dir)))
            except FixtureError as exc:
                last = exc
    examples.sort(key=lambda e: (isinstance(job.fixtures[e[0]], EdgeFixture),
                                 _tiny_dynamic_dim(job, e[1])))
    tried: list[str] = []
    kept: tuple[ExportedModel, dict[str, np.ndarray], bool, list[Hazard]] | None = None
    for name, example in examples[:2]:  # an export is costly: the best two sets at most
        try:
            exported, found, cached = _cached_export(ctx, mod, example, names, job.export,
                                                     export_batch)
        except ExportFailure as failure:
            last = failure
            tried.append(f"{name!r} failed ({failure.reason})")
            if not _SIZE_BOUND.search(f"{failure.reason}\n{failure.cause.key}"
                                      if failure.cause else failure.reason):
                break  # not about the example's sizes: another set would fail the same way
            continue
        if exported.baked_dims and kept is None and len(examples) > 1:
            kept = exported, example, cached, found  # used if the next set does no better
            tried.append(f"{name!r} fixed dynamic dims to its sizes ("
                         + ", ".join(f"{i}[{d}]={v}" for i, d, _, v in exported.baked_dims)
                         + ")")
            continue
        if kept is not None and exported.baked_dims:
            break
        ctx.hazard(found)
        if tried:
            ctx.note("fixtures", f"{dtype}: the export example of fixture set {tried[0]}; "
                     f"exported with set {name!r} instead, so only that set's cases carry "
                     "its problem")
        return exported, example, cached
    if kept is not None:
        exported, example, cached, found = kept
        ctx.hazard(found)
        return exported, example, cached
    device = mod.device
    if isinstance(last, ExportFailure):
        ctx.fail_all(live, last.outcome, last.reason, last.detail,
                     provenance=ctx.provenance(device), cause=last.cause)
        ctx.hazard(last.hazards)
    else:
        ctx.fail_all(live, Outcome.EAGER_ERROR, f"fixture: {last}" if last else
                     "no fixture set produced an export example",
                     provenance=ctx.provenance(device))
    return None


# Export failures that depend on the example's sizes (a guard on a size, a specialised
# dim): worth one more try with another fixture set's example. Others are not.
_SIZE_BOUND = re.compile(r"Constraints violated|speciali[sz]|data.dependent|GuardOnData",
                         re.I)


def _tiny_dynamic_dim(job: ModuleJob, example: dict[str, np.ndarray]) -> bool:
    """A declared-dynamic dim of size 0 or 1 in the example: torch.export specialises
    those, so such a set is the last choice for the export example."""
    return any(example[spec.name].ndim > dim and example[spec.name].shape[dim] <= 1
               for spec in job.module.inputs if spec.name in example
               for dim in spec.dynamic)


def _cached_export(ctx: _Ctx, mod: _Module, example: dict[str, np.ndarray], names: list[str],
                   settings: Any, export_batch: int, purpose: str = "gate"
                   ) -> tuple[ExportedModel, list[Hazard], bool]:
    """The export (and, for the gate's own export, the hazards found on it) from the cache,
    or made now and stored; an export failure is cached and raised the same way, with the
    hazards its error text shows on `failure.hazards`."""
    job, cache = ctx.job, ctx.cache
    key = cache.export_key(job, mod.dtype, mod.device, example, names, settings, purpose,
                           ctx.training, export_batch) if cache is not None else ""
    hit = cache.load_export(key) if cache is not None else None
    if hit is not None:
        result, stored = hit
        if isinstance(result, ExportFailure):
            result.hazards = stored
            raise result
        return result, stored, True
    hazards: list[Hazard] = []
    ctx.step(Stage.EXPORTING, mod.dtype, "" if purpose == "gate" else f"({purpose})",
             _export_evidence(job, mod, example, names, settings))
    try:
        exported = _export(job, mod, example, names, settings)
    except ExportFailure as failure:
        if purpose == "gate":
            hazards = check_failure(_hazard_context(ctx, mod, example, export_batch, None,
                                                    f"{failure.reason}\n{failure.detail}"),
                                    job.settings.hazards)
        failure.hazards = hazards
        if cache is not None:
            cache.store_export(key, failure, hazards)
        raise
    if purpose == "gate":
        hazards = run_checks(_hazard_context(ctx, mod, example, export_batch, exported),
                             job.settings.hazards)
    if cache is not None:
        cache.store_export(key, exported, hazards)
    return exported, hazards, False


def _hazard_context(ctx: _Ctx, mod: _Module, example: dict[str, np.ndarray],
                    export_batch: int, exported: ExportedModel | None,
                    error: str = "") -> HazardContext:
    """What the export-hazard rules read: this dtype's export, or its error."""
    job = ctx.job
    tensors = [to_torch(example[n], mod.device) for n in mod.binding.order]
    # The specs in the order the tensors (and the program's inputs) follow, forward()'s,
    # not the manifest's: the rules pair them up by position.
    by_name = {spec.name: spec for spec in job.module.inputs}
    specs = [by_name[n] for n in mod.binding.order if n in by_name]
    return HazardContext(
        job.name, job.export.exporter or "dynamo", specs, tensors, export_batch,
        job.settings.batch_sizes or [], mod.dtype, mod.typed, ctx.training,
        exported.model if exported else b"", job.export.optimize,
        exported.program if exported else None,
        exported.raw_warnings if exported else [], job.settings.target_runtime,
        dict(job.export.options), job.export.opset, error,
        exported.graph if exported else None)


def _export(job: ModuleJob, mod: _Module, example: dict[str, np.ndarray], names: list[str],
            settings: Any) -> ExportedModel:
    """One export of `mod` with the example bound as forward() takes it."""
    tensors = {n: to_torch(example[n], mod.device) for n in mod.binding.order}
    return export_module(mod.typed.to(mod.device), mod.binding.arguments(tensors),
                         job.module.inputs, names, settings)


def _run_provider(ctx: _Ctx, exported: ExportedModel, provider: str, keys: list[CaseKey],
                  refs: dict[tuple[str, int | None], _Reference], export_batch: int,
                  shared: dict[str, float], mod: _Module, example: dict[str, np.ndarray],
                  cached: bool) -> None:
    job = ctx.job
    dtype, device = mod.dtype, mod.device
    provenance = ctx.provenance(device, exported, cached)
    opened = _open_session(ctx, exported, dtype, provider, keys, provenance)
    if opened is None:
        return
    session, evidence, session_s = opened
    timings = {**shared, "session_s": session_s}
    feed_names = {i.name for i in session.get_inputs()}
    unoptimized: list[Any] = []  # created on the first mismatch only
    discrete: list[bool] | None = None  # per output, read from the graph on the first mismatch
    warned: set[str] = set()  # outputs already said to hold nothing finite
    measurer = performance.measurer(job, exported.source, provider, mod.typed,
                                    sum(timings.values()) / len(keys))
    for key in keys:
        ref = refs[(key.inputs, key.batch_size)]
        ctx.step(Stage.RUNNING, key.id,
                 evidence=_evidence_inputs(evidence, key, ref, feed_names))
        result, got = _run_case(job, session, key, ref, feed_names, export_batch,
                                dict(timings), provenance)
        if result.outcome is Outcome.MISMATCH:
            ctx.step(Stage.RECHECKING, key.id, "with ORT graph optimizations off")
            _fusion_check(job, exported, provider, result, ref, feed_names, export_batch,
                          unoptimized)
            if dtype in JUDGED and ref.truth is None and not ref.truth_error:
                _float64_run(ctx, mod, ref)
            if job.export.exporter == "dynamo" and job.export.optimize:
                ctx.step(Stage.RECHECKING, key.id, "exported with optimize: false")
                result.reexport = _reexport(ctx, mod, provider, result, ref, example,
                                            export_batch)
            if dtype in JUDGED:
                ctx.step(Stage.RECHECKING, key.id, "against float64")
                if discrete is None:
                    discrete = _discrete(exported)
                result = _against_float64(ctx, mod, result, ref, got, discrete)
            _hand_off(job, mod, exported, ref.names)
        if measurer is not None and result.comparisons:  # the session ran: time it
            ctx.step(Stage.RECHECKING, key.id, "timing against eager")
            result.performance = measurer.measure(
                session, performance.eager_call(mod.binding, mod.typed, ref.inputs[0], device),
                {k: v for k, v in ref.inputs[0].items() if k in feed_names})
        degenerate = _nothing_finite(ref) if result.outcome is Outcome.PASS else ""
        if degenerate and degenerate not in warned:
            warned.add(degenerate)
            ctx.note("degenerate-reference", f"{key.id}: every value of {degenerate} is NaN "
                     f"or inf in eager (a {dtype} overflow?), so its pass compares nothing but "
                     "where the NaNs and infinities are")
        ctx.result(result)


def _open_session(ctx: _Ctx, exported: ExportedModel, dtype: str, provider: str,
                  keys: list[CaseKey], provenance: Provenance
                  ) -> tuple[Any, dict[str, str], float] | None:
    """The ONNX Runtime session every case of `keys` runs on (per-step and generation
    cases alike), opened after the LOADING step records the evidence a crash while
    loading is replayed from; with the seconds the opening took. None when it fails:
    `keys` then fail with the cause."""
    job = ctx.job
    evidence = {"model": _evidence_model(job, dtype, exported), "provider": provider,
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


def _hand_off(job: ModuleJob, mod: _Module, exported: ExportedModel, names: list[str]) -> None:
    """Leave a failing (module, dtype)'s exports for localisation (engine.cache.hand_off),
    once: it then reads them instead of exporting twice more (once, optimizer off, when
    the cache served them: no live program). Advisory: never fails a case."""
    plain = exported if not job.export.optimize else mod.plain
    mod.plain = None  # held only until now: the worker's peak stays what it was
    if mod.handed or job.export.exporter != "dynamo":
        return
    mod.handed = True
    live = plain if plain is not None and plain.program is not None else None  # else cached
    try:
        hand_off(Path(tempfile.gettempdir()), job.name, mod.dtype, exported.source,
                 live.source if live else None, live.program if live else None, names)
    except Exception:  # localisation exports again instead
        traceback.print_exc()


EVIDENCE_MAX_BYTES = 64 << 20  # inputs larger than this are not kept for a crash repro


def _export_evidence(job: ModuleJob, mod: _Module, example: dict[str, np.ndarray],
                     names: list[str], settings: Any) -> dict[str, str]:
    """What an export that kills the worker is replayed from (localise.crash): the call
    as data (factory, seed, dtype, binding, dynamic dims, exporter options) and the
    example, written before the export starts. Nothing when the example is too large or
    the call's options are not plain data."""
    if sum(a.nbytes for a in example.values()) > EVIDENCE_MAX_BYTES:
        return {}
    folder = Path(tempfile.gettempdir()) / "evidence"
    stem = f"{job.name}-{mod.dtype}-export".replace("/", "_")
    call = {
        "factory": job.module.factory, "kwargs": job.module.kwargs,
        "python_path": [str(p) for p in job.python_path],
        "seed": derive_seed(job.seed, job.name) % (2**32), "dtype": mod.dtype,
        "device": mod.device, "order": list(mod.binding.order), "keyword": mod.binding.keyword,
        "dynamic": {i.name: {str(d): sym for d, sym in i.dynamic.items()}
                    for i in job.module.inputs},
        "output_names": names, "exporter": settings.exporter or "dynamo",
        "optimize": settings.optimize, "opset": settings.opset,
        "options": dict(settings.options),
    }
    try:
        folder.mkdir(exist_ok=True)
        text = json.dumps(call, indent=1)
        (folder / f"{stem}.json").write_text(text)
        np.savez(folder / f"{stem}.npz", **example)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError):
        return {}
    return {"export": str(folder / f"{stem}.json"), "inputs": str(folder / f"{stem}.npz")}


def _evidence_model(job: ModuleJob, dtype: str, exported: ExportedModel) -> str:
    """A file holding the model ONNX Runtime is about to load, for a repro should it crash
    the worker: the export's own file when it has one, else a copy in the worker's
    temporary folder (the pool's, removed with it)."""
    if isinstance(exported.source, str):
        return exported.source
    path = Path(tempfile.gettempdir()) / "evidence" / f"{job.name}-{dtype}.onnx"
    try:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(exported.source)
    except OSError:
        return ""
    return str(path)


def _evidence_inputs(evidence: dict[str, str], key: CaseKey, ref: _Reference,
                     feed_names: set[str]) -> dict[str, str]:
    """The LOADING evidence plus the first sample's feeds, saved for a crash while running
    (not when they pass EVIDENCE_MAX_BYTES: the repro then loads the model only). One file
    per reference (module, dtype, fixture, batch), written once: every provider's case of
    it reuses the file instead of writing the same feeds again."""
    feeds = {k: v for k, v in ref.inputs[0].items() if k in feed_names} if ref.inputs else {}
    if not evidence.get("model") or not feeds \
            or sum(a.nbytes for a in feeds.values()) > EVIDENCE_MAX_BYTES:
        return evidence
    name = f"{key.module}-{key.dtype}-{key.inputs}-b{key.batch_size}.npz".replace("/", "_")
    path = Path(tempfile.gettempdir()) / "evidence" / name
    try:
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            np.savez(path, **feeds)  # type: ignore[arg-type]
    except (OSError, ValueError):
        return evidence
    return {**evidence, "inputs": str(path)}


def _nothing_finite(ref: _Reference) -> str:
    """The first floating output with values, none of them finite, in every sample ("" if
    none): NaN equals NaN, so such an output passes without any number compared."""
    for i, name in enumerate(ref.names):
        arrays = [outs[i] for outs in ref.outputs if i < len(outs)]
        floating = [a for a in arrays if a.dtype.kind == "f" and a.size]
        if floating and len(floating) == len(arrays) \
                and not any(np.isfinite(a.astype(np.float32)).any() for a in floating):
            return name
    return ""


def _fusion_check(job: ModuleJob, exported: ExportedModel, provider: str, result: CaseResult,
                  ref: _Reference, feed_names: set[str], export_batch: int,
                  cache: list[Any]) -> None:
    """Re-run a mismatch with ORT's graph optimizations disabled.

    When the mismatch vanishes, a fusion or rewrite inside ONNX Runtime is the
    likely culprit (a runtime issue, not an exporter one): say so in the result.
    """
    try:
        if not cache:
            cache.append(stages.open_session(exported.source, provider,
                                             job.providers[provider].options,
                                             optimization="disabled"))
        again, _ = _run_case(job, cache[0], result.key, ref, feed_names, export_batch, {},
                             result.provenance)
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


def _failed_rerun(again: CaseResult) -> str:
    """A follow-up run that errors is that check's finding with its cause, never "the
    mismatch persists" (a runtime error compares nothing)."""
    return f"{again.outcome.value}: {first_line(again.reason)}"


def _reexport(ctx: _Ctx, mod: _Module, provider: str, result: CaseResult, ref: _Reference,
              example: dict[str, np.ndarray], export_batch: int) -> Reexport:
    """The mismatch on a graph exported with the exporter's own optimizer off.

    ORT's optimization level cannot undo what onnxscript's optimizer already
    rewrote or folded (BatchNorm into a convolution, in float16), so "persists
    with ORT optimizations off" alone would point away from that cause.
    """
    job = ctx.job
    try:
        session = mod.unoptimized.get(provider)
        if session is None:
            plain, _, _ = _cached_export(ctx, mod, example, ref.names,
                                         job.export.model_copy(update={"optimize": False}),
                                         export_batch, purpose="reexport")
            mod.plain = plain
            session = stages.open_session(plain.source, provider,
                                          job.providers[provider].options)
            mod.unoptimized[provider] = session
        feed_names = {i.name for i in session.get_inputs()}
        again, got = _run_case(job, session, result.key, ref, feed_names, export_batch, {},
                               result.provenance)
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
        judged = _judge_float64(job, result, ref, got)
        onnx_error = judged.onnx_error if judged.ruling is not Ruling.UNVERIFIED else None
    return Reexport(outcome=again.outcome,
                    max_abs=worst.max_abs if worst is not None else None,
                    onnx_error=onnx_error)


def _discrete(exported: ExportedModel) -> list[bool]:
    """Per output, whether the exported graph computes it as discrete values ([] when the
    graph cannot be read: every output is then judged as continuous, as before)."""
    try:
        import onnx

        proto = exported.graph if exported.graph is not None \
            else onnx.load_model_from_string(exported.model)
        return discrete_outputs(proto)
    except Exception:  # advisory: the integer outputs are still caught by their dtype
        return []


def _against_float64(ctx: _Ctx, mod: _Module, result: CaseResult, ref: _Reference,
                     got: list[list[np.ndarray]], discrete: list[bool]) -> CaseResult:
    """A mismatch stands only if ONNX is clearly further from float64 than eager is (and,
    in float32, outside float32's rounding of it); otherwise the case passes with the
    figures on record, unless its tolerance is the manifest's own: that contract stands,
    and the reason says no correct implementation can meet it. Never excused: a discrete
    output (unless it is a tie the manifest allows), and a case where float64 does not
    compute the same function (an intermediate overflows in one run only)."""
    if ref.truth is None:
        result.reference = Reference(Ruling.UNVERIFIED, error=ref.truth_error)
        return result
    judged = _judge_float64(ctx.job, result, ref, got, discrete)
    if judged.ruling is Ruling.DISCRETE:
        judged = _ties(ctx.job, mod, result, ref, got, discrete, judged)
    result.reference = judged
    if judged.ruling.defect:
        return result
    if ref.out_of_range is None:
        ctx.step(Stage.RECHECKING, result.key.id, "float64 computes the same function")
        ref.out_of_range = _out_of_range(mod, ref)
    if ref.out_of_range:
        result.reference = replace(judged, ruling=Ruling.OUT_OF_RANGE, error=ref.out_of_range)
        return result
    worst = result.worst()
    name = worst.name if worst is not None else "output"
    if judged.ruling is Ruling.TIE:
        return replace(result, outcome=Outcome.PASS,
                       reason=f"{mod.dtype} eager and ONNX differ, but {judged.describe()}")
    if _contract(ctx.job, mod.dtype, name):
        tol = _tolerance(ctx.job, mod.dtype, _output_spec(ctx.job, name))
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


def _output_spec(job: ModuleJob, name: str) -> Any:
    return next((o for o in job.module.outputs or [] if o.name == name), None)


def _contract(job: ModuleJob, dtype: str, output: str) -> bool:
    """The manifest set this tolerance itself (defaults, module, or the output's own)."""
    spec = _output_spec(job, output)
    own = spec is not None and dtype in {str(d) for d in (spec.tolerances or {})}
    return own or dtype in job.contract_dtypes


def _calls(mod: _Module, ref: _Reference, wide: bool) -> list[Any]:
    """One forward per sample: the case's module on its inputs, or the float64 copy on the
    same inputs widened to float64."""
    def call(module: Any, inputs: dict[str, np.ndarray]) -> Any:
        return lambda: mod.binding.call(module, {n: to_torch(inputs[n], mod.device)
                                                 for n in mod.binding.order})

    if not wide:
        return [call(mod.typed, inputs) for inputs in ref.inputs]
    return [call(mod.float64, {n: (a.astype(np.float64) if a.dtype.kind == "f"
                                   or a.dtype.name == "bfloat16" else a)
                               for n, a in inputs.items()}) for inputs in ref.inputs]


def _out_of_range(mod: _Module, ref: _Reference) -> str:
    """Where the case's dtype and float64 disagree on an overflow or NaN ("" if nowhere)."""
    try:
        return range_disagreement(_calls(mod, ref, False), _calls(mod, ref, True), mod.dtype)
    except Exception as exc:  # no answer: the float64 check cannot be trusted either
        return f"the float64 range check failed ({first_line(repr(exc))}): the float64 " \
            "check cannot referee this case"


def _ties(job: ModuleJob, mod: _Module, result: CaseResult, ref: _Reference,
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
                _calls(mod, ref, True), mod.dtype, i, eager, onnx, differ)
        except Exception:  # no witness: not a tie
            tie = False
        spec = _output_spec(job, name)
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


def _judge_float64(job: ModuleJob, result: CaseResult, ref: _Reference,
                   got: list[list[np.ndarray]], discrete: Sequence[bool] = ()) -> Reference:
    truth = ref.truth or []
    specs = {o.name: o for o in job.module.outputs or []}
    count = len(ref.names)
    stacked = [[_stack([outs[i] for outs in side]) for i in range(count)]
               for side in (ref.outputs, got, truth)]
    if any(a is None for side in stacked for a in side):
        return Reference(Ruling.UNVERIFIED, error="samples differ in shape")
    eager, onnx, true = ([a for a in side if a is not None] for side in stacked)
    failing = {c.name for c in result.comparisons if not c.passed}
    return judge_against_float64(
        eager, onnx, true, ref.names,
        [_tolerance(job, result.key.dtype, specs.get(n)) for n in ref.names],
        [getattr(specs.get(n), "task", None) == "classification" for n in ref.names],
        [i for i, n in enumerate(ref.names) if n in failing], discrete)


def _float64_run(ctx: _Ctx, mod: _Module, ref: _Reference) -> None:
    """The same weights and the very same (low-precision) inputs, computed in float64."""
    import torch

    ctx.step(Stage.RECHECKING, mod.dtype, "float64 reference")
    try:
        unstable = _nondeterministic(ctx.job, mod, ref)
        if unstable:  # a random op in forward: no second run, float64 or not, is the truth
            ref.truth_error = (f"eager is not deterministic: two runs on the same inputs "
                               f"differ in {unstable} (a random op in forward?)")
            return
        if mod.float64 is None:
            mod.float64 = copy.deepcopy(mod.source).to(torch.float64).to(mod.device)
        truth = []
        for inputs in ref.inputs:
            wide = {n: (a.astype(np.float64) if a.dtype.kind == "f"
                        or a.dtype.name == "bfloat16" else a) for n, a in inputs.items()}
            with torch.inference_mode():
                out = mod.binding.call(mod.float64, {n: to_torch(wide[n], mod.device)
                                                     for n in mod.binding.order})
            truth.append([to_numpy(t) for t in leaves(out)])
        ref.truth = truth
    except Exception as exc:  # e.g. an op with no float64 kernel: the case stays as it is
        ref.truth_error = f"float64 run failed: {first_line(repr(exc))}"


def _nondeterministic(job: ModuleJob, mod: _Module, ref: _Reference) -> str:
    """The first output a second eager run on the first sample's inputs puts out of the
    case's tolerance of the first run ("" when none): the float64 check measures both
    sides against one more run, which means nothing for a model that draws random numbers."""
    import torch

    inputs = ref.inputs[0]
    with torch.inference_mode():
        out = mod.binding.call(mod.typed, {n: to_torch(inputs[n], mod.device)
                                           for n in mod.binding.order})
    again = [to_numpy(t) for t in leaves(out)]
    for name, first, second in zip(ref.names, ref.outputs[0], again, strict=False):
        tol = _tolerance(job, mod.dtype, _output_spec(job, name))
        if first.shape != second.shape or not cmp.compare(first, second, tol).passed:
            return name
    return ""


def _run_case(job: ModuleJob, session: Any, key: CaseKey, ref: _Reference, feed_names: set[str],
              export_batch: int, timings: dict[str, float],
              provenance: Provenance) -> tuple[CaseResult, list[list[np.ndarray]]]:
    """Run every sample of one case, then compare each output over all samples at once;
    also returns the ONNX outputs (per sample) for follow-up checks."""
    common: dict[str, Any] = {"provenance": provenance, "samples": len(ref.inputs)}
    got_all: list[list[np.ndarray]] = []
    t0 = time.perf_counter()
    for inputs in ref.inputs:
        feeds = {k: v for k, v in inputs.items() if k in feed_names}
        try:
            got_all.append(stages.run(session, feeds, batch_size=key.batch_size,
                                      export_batch=export_batch, label=""))
        except StageFailure as failure:
            timings["run_s"] = time.perf_counter() - t0
            return CaseResult(key, failure.outcome, failure.reason, failure.detail,
                              timings=timings, **common), got_all
    timings["run_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = _judge(job, key, ref, got_all, common, export_batch)
    timings["compare_s"] = time.perf_counter() - t0
    timings["eager_s"] = ref.eager_s
    result.timings = timings
    return result, got_all


def _judge(job: ModuleJob, key: CaseKey, ref: _Reference, got_all: list[list[np.ndarray]],
           common: dict[str, Any], export_batch: int) -> CaseResult:
    n_ref, n_got = len(ref.outputs[0]), len(got_all[0])
    if n_ref != n_got:
        return CaseResult(key, Outcome.SHAPE_MISMATCH,
                          f"exported model returns {n_got} output(s), eager returns {n_ref}",
                          **common)
    names = ref.names
    specs = {o.name: o for o in job.module.outputs or []}
    groups = _detection_groups(names) if job.module.detections else {}
    grouped = {i for members in groups.values() for i in members}
    comparisons = [_compare_detections(job, key, prefix, members, ref, got_all)
                   for prefix, members in groups.items()]
    for i, name in enumerate(names):
        if i in grouped:
            continue
        spec = specs.get(name)
        tol = _tolerance(job, key.dtype, spec)
        reference = _stack([outs[i] for outs in ref.outputs])
        actual = _stack([outs[i] for outs in got_all])
        if reference is None or actual is None:
            per = [cmp.compare(r[i], g[i], tol, name=name)
                   for r, g in zip(ref.outputs, got_all, strict=True)]
            comparisons.append(next((c for c in per if not c.passed), per[0]))
            continue
        comparisons.append(cmp.compare(
            reference, actual, tol, name=name,
            task=spec.task if spec else None,
            min_top1_agreement=spec.min_top1_agreement if spec else 1.0,
        ))
    outcome = stages.classify(comparisons)
    reason = stages.failure_reason(comparisons)
    baked = (_baked_output(key.batch_size, export_batch, ref.outputs[0], got_all[0])
             if outcome is Outcome.SHAPE_MISMATCH else "")
    if baked:
        outcome = Outcome.BAKED_SHAPE
        reason = (f"batch {key.batch_size}: {baked} — the exported model (exported at batch "
                  f"{export_batch}) silently reshapes to the export batch size")
    return CaseResult(key, outcome, reason, comparisons=comparisons, **common)


def _detection_groups(names: list[str]) -> dict[str, tuple[int, int, int]]:
    """`prefix` → the indices of its `prefix.boxes`, `.scores`, `.labels` outputs (one
    image's detections), for every prefix that has all three."""
    found: dict[str, dict[str, int]] = {}
    for i, name in enumerate(names):
        prefix, _, leaf = name.rpartition(".")
        if leaf in DETECTION_KEYS:
            found.setdefault(prefix, {})[leaf] = i
    return {prefix or "detections": (k["boxes"], k["scores"], k["labels"])
            for prefix, k in found.items() if len(k) == len(DETECTION_KEYS)}


def _compare_detections(job: ModuleJob, key: CaseKey, prefix: str,
                        members: tuple[int, int, int], ref: _Reference,
                        got_all: list[list[np.ndarray]]) -> cmp.Comparison:
    """One image's detections over every sample: the first sample that fails decides."""
    iou = job.module.detections.iou if job.module.detections else 0.5
    tol = _tolerance(job, key.dtype, None)
    per = [compare_detections(prefix, Detections(*(r[i] for i in members)),
                              Detections(*(g[i] for i in members)), tol, iou)
           for r, g in zip(ref.outputs, got_all, strict=True)]
    return next((c for c in per if not c.passed), per[0])


def _baked_output(batch: int | None, export_batch: int, refs: list[np.ndarray],
                  gots: list[np.ndarray]) -> str:
    """An output whose eager dim is the batch size but whose ONNX dim is the export batch."""
    if batch is None or batch == export_batch:
        return ""
    for i, (r, g) in enumerate(zip(refs, gots, strict=False)):
        if r.shape != g.shape and len(r.shape) == len(g.shape):
            for axis, (rd, gd) in enumerate(zip(r.shape, g.shape, strict=True)):
                if rd == batch and gd == export_batch:
                    return (f"output {i} has shape {tuple(g.shape)} where eager gives "
                            f"{tuple(r.shape)} (axis {axis})")
    return ""


def _stack(arrays: list[np.ndarray]) -> np.ndarray | None:
    """Samples side by side on a new leading axis, so index[0] names the sample."""
    first = arrays[0]
    if all(a.shape == first.shape and a.dtype == first.dtype for a in arrays):
        return np.stack(arrays) if len(arrays) > 1 else first[None]
    return None


def _tolerance(job: ModuleJob, dtype: str, spec: Any) -> cmp.Tolerance:
    table: dict[str, Any] = {str(k): v for k, v in (job.settings.tolerances or {}).items()}
    if spec is not None and spec.tolerances:
        table.update(spec.tolerances)
    tol = table.get(dtype) or table["float32"]
    return cmp.Tolerance(atol=tol.atol, rtol=tol.rtol)


def _reference(ctx: _Ctx, torch: Any, mod: _Module, fixture_name: str,
               batch: int) -> _Reference:
    job = ctx.job
    fixture = job.fixtures[fixture_name]
    ref = _Reference()
    names = [i.name for i in job.module.inputs]
    t0 = time.perf_counter()
    samples: list[dict[str, np.ndarray]] = []
    try:
        samples = [generate(fixture_name, fixture, names, batch, mod.dtype, sample,
                            seed=job.seed, base_dir=job.base_dir)
                   for sample in range(fixture.samples)]
        key = (ctx.cache.reference_key(job, mod.dtype, mod.device, samples)
               if ctx.cache is not None else "")
        hit = ctx.cache.load_reference(key) if ctx.cache is not None else None
        if hit is not None:  # the very inputs, the same module: eager's outputs, bit for bit
            ref.names, ref.outputs = hit
            ref.inputs = samples
            return ref
        for inputs in samples:
            with torch.inference_mode():
                out = mod.binding.call(mod.typed, {n: to_torch(inputs[n], mod.device)
                                                   for n in names})
            if not ref.names:
                ref.names, problems = output_names(out, job.module)
                if problems:  # `outputs[].name` entries the module does not return
                    for text in problems:
                        ctx.note("manifest", text, "error")
                    ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.EAGER_ERROR,
                                           problems[0], "\n".join(problems))
                    return ref
            ref.inputs.append(inputs)
            ref.outputs.append([to_numpy(t) for t in leaves(out)])
        if ctx.cache is not None:
            ctx.cache.store_reference(key, ref.names, ref.outputs)
    except FixtureError as exc:
        ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.EAGER_ERROR,
                               f"fixture {fixture_name!r}: {exc}")
    except Exception as exc:
        tb = traceback.format_exc()[-4000:]
        oom = memory_failure(exc, sum(a.nbytes for sample in samples[:1]
                                      for a in sample.values()) or None)
        if oom is not None:  # over the worker's memory limit: this case, not the module
            ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.OUT_OF_MEMORY, oom, tb)
        elif batch == 0:
            ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.SKIPPED,
                                   f"eager rejects an empty batch: {first_line(repr(exc))}", tb)
        else:
            ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.EAGER_ERROR,
                                   f"eager forward failed: {first_line(repr(exc))}", tb)
    ref.eager_s = time.perf_counter() - t0
    return ref


def _export_batch(configured: int | None, batch_sizes: list[int]) -> int:
    if configured:
        return configured
    return min((b for b in batch_sizes if b >= 2), default=2)


def _build(job: ModuleJob) -> Any:
    module_name, attr = job.module.factory.split(":", 1)
    target: Any = _import_factory_module(module_name, [str(p) for p in job.python_path])
    for part in attr.split("."):
        target = getattr(target, part)
    return target(**job.module.kwargs)


def _import_factory_module(module_name: str, paths: list[str]) -> Any:
    """The factory's module as the job's own import path finds it. A warm worker (or a
    process that spawned it, whose sys.path it inherits) may already hold a module of
    that name from another manifest (two folders with a `models.py`): that one is
    dropped, never reused, and the job's folders go first on sys.path."""
    top = module_name.split(".", 1)[0]
    spec = importlib.machinery.PathFinder.find_spec(top, paths)
    loaded = sys.modules.get(top)
    if spec is not None and loaded is not None and getattr(loaded, "__file__", None) != spec.origin:
        for name in [n for n in sys.modules if n == top or n.startswith(f"{top}.")]:
            del sys.modules[name]
    for path in reversed(paths):
        while path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    return importlib.import_module(module_name)


def _seed_everything(torch: Any, seed: int) -> None:
    seed32 = seed % (2**32)
    random.seed(seed32)
    np.random.seed(seed32)
    torch.manual_seed(seed32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


# Public entry points for follow-up stages (localisation) that redo a module as the gate did.


def build_module(job: ModuleJob) -> Any:
    """The module from its factory, seeded as the gate seeds it (so the same weights),
    with the job's import path; not yet in eval mode."""
    import torch

    _seed_everything(torch, derive_seed(job.seed, job.name))
    return _build(job)


def export_batch_size(job: ModuleJob) -> int:
    """The batch size the gate exports this module at."""
    return _export_batch(job.export.batch_size, job.settings.batch_sizes or [])


def tolerance_for(job: ModuleJob, dtype: str, spec: Any) -> cmp.Tolerance:
    """The tolerance of one output (`spec`: its OutputSpec, or None) in `dtype`."""
    return _tolerance(job, dtype, spec)
