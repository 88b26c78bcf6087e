"""Inside a worker: build one module, compute eager references, export, run, compare.

Runs in the worker process only (it imports torch). Results stream out through
`emit` one case at a time, so when the process dies the parent still has every
case finished before the crash.
"""

from __future__ import annotations

import copy
import importlib
import random
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.engine import stages
from parity_gate.engine.exporting import ExportedModel, ExportFailure, export_module
from parity_gate.engine.fixtures import (
    FixtureError,
    derive_seed,
    generate,
)
from parity_gate.engine.protocol import CaseStream, Emit
from parity_gate.engine.runtime import first_line
from parity_gate.engine.stages import StageFailure
from parity_gate.engine.tensors import leaves, to_numpy, to_torch
from parity_gate.manifest.models import EdgeFixture, output_names
from parity_gate.model.findings import Finding, Rerun, Stage
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, Provenance
from parity_gate.plan.cases import ModuleJob, batch_sizes_for


@dataclass
class _Reference:
    """Eager outputs of one (fixture, batch) across samples, or why there are none."""

    inputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    outputs: list[list[np.ndarray]] = field(default_factory=list)
    error: CaseResult | None = None
    eager_s: float = 0.0


class _Ctx(CaseStream):
    """Per-job state shared by the steps below."""

    job: ModuleJob

    def fail_all(self, keys: list[CaseKey], outcome: Outcome, reason: str, detail: str = "",
                 **extra: Any) -> None:
        for key in list(keys):
            self.result(CaseResult(key, outcome, reason=reason, detail=detail, **extra))

    def note(self, kind: str, message: str, severity: str = "warning") -> None:
        self.finding(Finding(self.job.name, kind, message, severity))

    def provenance(self, device: str, exported: ExportedModel | None = None) -> Provenance:
        """What ran for this job's cases: recorded on every result, failed ones included."""
        export = self.job.export
        return Provenance(
            exporter=export.exporter or "", export_options=export.model_dump(exclude_none=True),
            opset=exported.opset if exported else None,
            ir_version=exported.ir_version if exported else None,
            seed=self.job.seed, reference_device=device)


def run_job(job: ModuleJob, emit: Emit) -> None:
    """Produce a CaseResult for every planned case of `job` (never raises)."""
    ctx = _Ctx(job, emit)
    try:
        _run(ctx)
    except Exception:  # a bug in parity-gate must not lose the other cases
        ctx.fail_all(ctx.pending, Outcome.CRASH, "internal error in parity-gate worker "
                     "(please report)", traceback.format_exc()[-4000:])


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
    if module.training:
        ctx.note("training_mode", f"factory {job.module.factory} returned the module in "
                    "training mode (dropout/batch-norm statistics would be exported); "
                    "parity-gate called .eval()")
    module.eval()
    device = settings.reference_device or "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR,
                     "reference_device: cuda, but torch sees no CUDA device on this machine")
        return
    for dtype in settings.dtypes or []:
        keys = [k for k in ctx.pending if k.dtype == dtype]
        if keys:
            _run_dtype(ctx, torch, module, dtype, device, keys)


def _run_dtype(ctx: _Ctx, torch: Any, module: Any, dtype: str, device: str,
               keys: list[CaseKey]) -> None:
    job = ctx.job
    settings = job.settings
    ctx.step(Stage.CASTING, dtype)
    typed = copy.deepcopy(module).to(getattr(torch, dtype))
    refs: dict[tuple[str, int | None], _Reference] = {}
    for fixture_name in dict.fromkeys(k.inputs for k in keys):
        fixture = job.fixtures[fixture_name]
        for batch in batch_sizes_for(fixture, settings.batch_sizes or []):
            if any(k.inputs == fixture_name and k.batch_size == batch for k in keys):
                ctx.step(Stage.EAGER, f"{dtype}/{fixture_name}/b{batch}")
                refs[(fixture_name, batch)] = _reference(ctx, torch, typed, dtype, device,
                                                         fixture_name, batch)
    for (fixture_name, ref_batch), ref in refs.items():
        if ref.error is not None:
            hit = [k for k in keys if k.inputs == fixture_name and k.batch_size == ref_batch]
            for k in hit:
                ctx.result(CaseResult(k, ref.error.outcome, ref.error.reason, ref.error.detail,
                                      provenance=ctx.provenance(device)))
    live = [k for k in keys if k in ctx.pending]
    if not live:
        return
    export_batch = _export_batch(job.export.batch_size, settings.batch_sizes or [])
    example = _example(ctx, dtype, export_batch)
    ctx.step(Stage.EXPORTING, dtype)
    t0 = time.perf_counter()
    names = output_names(job.module, len(next(iter(r.outputs[0] for r in refs.values()
                                                   if r.outputs), [])))
    try:
        example_t = [to_torch(example[i.name], device) for i in job.module.inputs]
        exported = export_module(typed.to(device), example_t, job.module.inputs, names,
                                 job.export)
    except ExportFailure as failure:
        ctx.fail_all(live, failure.outcome, failure.reason, failure.detail,
                     provenance=ctx.provenance(device))
        return
    except FixtureError as exc:
        ctx.fail_all(live, Outcome.EAGER_ERROR, f"fixture: {exc}",
                     provenance=ctx.provenance(device))
        return
    export_s = time.perf_counter() - t0
    _export_findings(ctx, dtype, exported, export_batch)
    ctx.step(Stage.CHECKING, dtype)
    t0 = time.perf_counter()
    try:
        stages.check(exported.model)
    except StageFailure as failure:
        ctx.fail_all(live, failure.outcome, failure.reason, failure.detail,
                     provenance=ctx.provenance(device, exported))
        return
    check_s = time.perf_counter() - t0
    for provider in dict.fromkeys(k.provider for k in live):
        pkeys = [k for k in live if k.provider == provider]
        shared = {"export_s": export_s, "check_s": check_s}
        _run_provider(ctx, exported, provider, pkeys, refs, export_batch, shared, dtype, device)


def _run_provider(ctx: _Ctx, exported: ExportedModel, provider: str, keys: list[CaseKey],
                  refs: dict[tuple[str, int | None], _Reference], export_batch: int,
                  shared: dict[str, float], dtype: str, device: str) -> None:
    job = ctx.job
    provenance = ctx.provenance(device, exported)
    ctx.step(Stage.LOADING, f"{dtype}", f"on {provider}")
    t0 = time.perf_counter()
    try:
        session = stages.open_session(exported.model, provider, job.providers[provider].options)
    except StageFailure as failure:
        ctx.fail_all(keys, failure.outcome, failure.reason, failure.detail,
                     provenance=provenance)
        return
    timings = {**shared, "session_s": time.perf_counter() - t0}
    feed_names = {i.name for i in session.get_inputs()}
    unoptimized: list[Any] = []  # created on the first mismatch only
    for key in keys:
        ref = refs[(key.inputs, key.batch_size)]
        ctx.step(Stage.RUNNING, key.id)
        result = _run_case(job, session, key, ref, feed_names, export_batch, dict(timings),
                           provenance)
        if result.outcome is Outcome.MISMATCH:
            ctx.step(Stage.RECHECKING, key.id, "with ORT graph optimizations off")
            _fusion_check(job, exported, provider, result, ref, feed_names, export_batch,
                          unoptimized)
        ctx.result(result)


def _fusion_check(job: ModuleJob, exported: ExportedModel, provider: str, result: CaseResult,
                  ref: _Reference, feed_names: set[str], export_batch: int,
                  cache: list[Any]) -> None:
    """Re-run a mismatch with ORT's graph optimizations disabled.

    When the mismatch vanishes, a fusion or rewrite inside ONNX Runtime is the
    likely culprit (a runtime issue, not an exporter one): say so in the result.
    """
    try:
        if not cache:
            cache.append(stages.open_session(exported.model, provider,
                                             job.providers[provider].options,
                                             optimization="disabled"))
        again = _run_case(job, cache[0], result.key, ref, feed_names, export_batch, {},
                          result.provenance)
    except StageFailure as failure:
        result.rerun = Rerun(error=failure.reason)
        return
    except Exception as exc:  # the check is advisory; never lose the real result
        result.rerun = Rerun(error=first_line(repr(exc)))
        return
    worst = again.worst()
    result.rerun = Rerun(outcome=again.outcome,
                         max_abs=worst.max_abs if worst is not None else None)


def _run_case(job: ModuleJob, session: Any, key: CaseKey, ref: _Reference, feed_names: set[str],
              export_batch: int, timings: dict[str, float],
              provenance: Provenance) -> CaseResult:
    """Run every sample of one case, then compare each output over all samples at once."""
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
                              timings=timings, **common)
    timings["run_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = _judge(job, key, ref, got_all, common, export_batch)
    timings["compare_s"] = time.perf_counter() - t0
    timings["eager_s"] = ref.eager_s
    result.timings = timings
    return result


def _judge(job: ModuleJob, key: CaseKey, ref: _Reference, got_all: list[list[np.ndarray]],
           common: dict[str, Any], export_batch: int) -> CaseResult:
    n_ref, n_got = len(ref.outputs[0]), len(got_all[0])
    if n_ref != n_got:
        return CaseResult(key, Outcome.SHAPE_MISMATCH,
                          f"exported model returns {n_got} output(s), eager returns {n_ref}",
                          **common)
    names = output_names(job.module, n_ref)
    specs = {o.name: o for o in job.module.outputs or []}
    comparisons = []
    for i, name in enumerate(names):
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


def _reference(ctx: _Ctx, torch: Any, module: Any, dtype: str, device: str,
               fixture_name: str, batch: int) -> _Reference:
    job = ctx.job
    fixture = job.fixtures[fixture_name]
    ref = _Reference()
    names = [i.name for i in job.module.inputs]
    t0 = time.perf_counter()
    try:
        for sample in range(fixture.samples):
            inputs = generate(fixture_name, fixture, names, batch, dtype, sample,
                              seed=job.seed, base_dir=job.base_dir)
            with torch.inference_mode():
                out = module(*(to_torch(inputs[n], device) for n in names))
            ref.inputs.append(inputs)
            ref.outputs.append([to_numpy(t) for t in leaves(out)])
    except FixtureError as exc:
        ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.EAGER_ERROR,
                               f"fixture {fixture_name!r}: {exc}")
    except Exception as exc:
        tb = traceback.format_exc()[-4000:]
        if batch == 0:
            ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.SKIPPED,
                                   f"eager rejects an empty batch: {first_line(repr(exc))}", tb)
        else:
            ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.EAGER_ERROR,
                                   f"eager forward failed: {first_line(repr(exc))}", tb)
    ref.eager_s = time.perf_counter() - t0
    return ref


def _example(ctx: _Ctx, dtype: str, batch: int) -> dict[str, np.ndarray]:
    """Export example from a plain (non-edge) fixture set when there is one."""
    job = ctx.job
    names = [i.name for i in job.module.inputs]
    ordered = sorted(job.module.fixtures,
                     key=lambda n: isinstance(job.fixtures[n], EdgeFixture))
    name = ordered[0]
    return generate(name, job.fixtures[name], names, batch, dtype, 0, seed=job.seed,
                    base_dir=job.base_dir)


def _export_batch(configured: int | None, batch_sizes: list[int]) -> int:
    if configured:
        return configured
    return min((b for b in batch_sizes if b >= 2), default=2)


def _export_findings(ctx: _Ctx, dtype: str, exported: ExportedModel, export_batch: int) -> None:
    for name, index, symbol, value in exported.baked_dims:
        ctx.note("baked_shape", f"{dtype}: input {name!r} dim {index} was declared dynamic "
                    f"({symbol!r}) but the exported graph fixes it to {value} (exported at "
                    f"batch {export_batch}); other sizes will fail", "error")
    for text in exported.warnings[:5]:
        ctx.note("export_warning", f"{dtype}: {text}")


def _build(job: ModuleJob) -> Any:
    for path in reversed(job.python_path):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    module_name, attr = job.module.factory.split(":", 1)
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target(**job.module.kwargs)


def _seed_everything(torch: Any, seed: int) -> None:
    seed32 = seed % (2**32)
    random.seed(seed32)
    np.random.seed(seed32)
    torch.manual_seed(seed32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

