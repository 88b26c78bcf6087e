"""The gate's export of one (module, dtype): from the best fixture set's example, through
the export cache, with the export-hazard rules run on it; and the exports left for
localisation when a case of it fails."""

from __future__ import annotations

import re
import tempfile
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate.engine.assumptions import read_assumptions
from parity_gate.engine.cache import hand_off
from parity_gate.engine.evidence import export_evidence
from parity_gate.engine.exporting import (
    ExportedModel,
    ExportFailure,
    Translations,
    export_module,
)
from parity_gate.engine.fixtures import Draw, FixtureError, generate
from parity_gate.engine.state import EagerRef, JobContext, TypedModule
from parity_gate.engine.tensors import to_torch
from parity_gate.hazards.context import HazardContext, tf32_switches
from parity_gate.hazards.run import check_failure, run_checks
from parity_gate.manifest.models import EdgeFixture
from parity_gate.model.files import source_from
from parity_gate.model.findings import Stage
from parity_gate.model.hazards import Hazard
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ExportCause
from parity_gate.plan.cases import ModuleJob


def export_from_good_set(ctx: JobContext, mod: TypedModule,
                          refs: dict[tuple[str, int | None], EagerRef], names: list[str],
                          export_batch: int
                          ) -> tuple[ExportedModel, dict[str, np.ndarray], bool] | None:
    """Export with an example from a fixture set eager accepted. A set whose example
    fails the export, or makes it fix a declared-dynamic dim (a one-long sequence that
    torch.export specialises), is followed by the next good set: a bad set costs only its
    own cases, not every set's. None: every case got its failure."""
    job, dtype = ctx.job, mod.dtype
    live = [k for k in ctx.pending if k.dtype == dtype]
    examples, last = export_examples(job, refs, dtype, export_batch)
    tried: list[str] = []
    kept: tuple[ExportedModel, dict[str, np.ndarray], bool, list[Hazard]] | None = None
    for name, example in examples[:2]:  # an export is costly: the best two sets at most
        try:
            exported, found, cached = cached_export(ctx, mod, example, names, job.export,
                                                     export_batch)
        except ExportFailure as failure:
            last = failure
            tried.append(f"{name!r} failed ({failure.reason})")
            if not SIZE_BOUND.search(f"{failure.reason}\n{failure.cause.key}"
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
                     provenance=ctx.provenance(device), cause=_relative(last.cause, job))
        ctx.hazard(last.hazards)
    else:
        ctx.fail_all(live, Outcome.EAGER_ERROR, f"fixture: {last}" if last else
                     "no fixture set produced an export example",
                     provenance=ctx.provenance(device))
    return None


def _relative(cause: ExportCause | None, job: ModuleJob) -> ExportCause | None:
    """The cause with its source line named from the manifest's folder (as a reviewer's
    checkout has it), or left as recorded when it lies outside that folder."""
    if cause is None or not cause.source:
        return cause
    return replace(cause, source=source_from(cause.source, job.base_dir))


def export_examples(job: ModuleJob, refs: dict[tuple[str, int | None], EagerRef], dtype: str,
                    export_batch: int
                    ) -> tuple[list[tuple[str, dict[str, np.ndarray]]],
                               ExportFailure | FixtureError | None]:
    """An example per fixture set eager accepted, best first (generated sets before edge
    sets, sets without a 0/1-long dynamic dim first), and the last fixture error."""
    examples: list[tuple[str, dict[str, np.ndarray]]] = []
    last: ExportFailure | FixtureError | None = None
    for name in dict.fromkeys(name for name, _ in refs):
        if any(r.error is None for (f, _), r in refs.items() if f == name):
            try:
                examples.append((name, generate(
                    name, job.fixtures[name], [i.name for i in job.module.inputs],
                    Draw(export_batch, dtype), seed=job.seed, base_dir=job.base_dir)))
            except FixtureError as exc:
                last = exc
    examples.sort(key=lambda e: (isinstance(job.fixtures[e[0]], EdgeFixture),
                                 tiny_dynamic_dim(job, e[1])))
    return examples, last


# Export failures that depend on the example's sizes (a guard on a size, a specialised
# dim): worth one more try with another fixture set's example. Others are not.
SIZE_BOUND = re.compile(r"Constraints violated|speciali[sz]|data.dependent|GuardOnData",
                         re.I)


def tiny_dynamic_dim(job: ModuleJob, example: dict[str, np.ndarray]) -> bool:
    """A declared-dynamic dim of size 0 or 1 in the example: torch.export specialises
    those, so such a set is the last choice for the export example."""
    return any(example[spec.name].ndim > dim and example[spec.name].shape[dim] <= 1
               for spec in job.module.inputs if spec.name in example
               for dim in spec.dynamic)


def cached_export(ctx: JobContext, mod: TypedModule, example: dict[str, np.ndarray],
                  names: list[str], settings: Any, export_batch: int, purpose: str = "gate"
                  ) -> tuple[ExportedModel, list[Hazard], bool]:
    """The export (and, for the gate's own export, the hazards found on it), with whether
    its ONNX translation came from the cache. The capture runs every time (it runs the
    model's code); only the translation of the captured program is reused
    (engine.cached). An export failure is raised with the hazards its error text shows on
    `failure.hazards`."""
    job = ctx.job
    hazards: list[Hazard] = []
    ctx.step(Stage.EXPORTING, mod.dtype, "" if purpose == "gate" else f"({purpose})",
             export_evidence(job, mod, example, names, settings))
    try:
        exported = export_once(job, mod, example, names, settings, ctx.cache)
    except ExportFailure as failure:
        if purpose == "gate":
            hazards = check_failure(hazard_context(ctx, mod, example, export_batch, None,
                                                    f"{failure.reason}\n{failure.detail}"),
                                    job.settings.hazards)
        failure.hazards = hazards
        raise
    if purpose == "gate":
        hazards = run_checks(hazard_context(ctx, mod, example, export_batch, exported),
                             job.settings.hazards)
        exported.assumptions, exported.ranges = read_assumptions(exported.captured, [
            spec for n in mod.binding.order for spec in job.module.inputs if spec.name == n],
            exported.guard_sources)
        exported.guard_sources = {}  # read into the assumptions
    return exported, hazards, exported.reused


def hazard_context(ctx: JobContext, mod: TypedModule, example: dict[str, np.ndarray],
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
        exported.captured if exported else None,
        exported.raw_warnings if exported else [], job.settings.target_runtime,
        dict(job.export.options), job.export.opset, error,
        exported.graph if exported else None, job.gate,
        exported.decomposed if exported else None,
        exported.facts if exported else None,
        _fixed_at(exported, specs, job) if exported else {},
        reference_device=mod.device, tf32=tf32_switches())


def _fixed_at(exported: ExportedModel, specs: list[Any], job: ModuleJob
              ) -> dict[str, tuple[str, str]]:
    """Declared symbol → (line, call) where the export fixed it to a number, the line
    named from the manifest's folder."""
    from parity_gate.engine.assumptions import specialised

    out: dict[str, tuple[str, str]] = {}
    for a in specialised(exported.guard_sources, specs):
        out.setdefault(a.symbols[0], (source_from(a.source, job.base_dir), a.op))
    return out


def export_once(job: ModuleJob, mod: TypedModule, example: dict[str, np.ndarray], names: list[str],
                settings: Any, translations: Translations | None = None) -> ExportedModel:
    """One export of `mod` with the example bound as forward() takes it."""
    tensors = {n: to_torch(example[n], mod.device) for n in mod.binding.order}
    return export_module(mod.typed.to(mod.device), mod.binding.arguments(tensors),
                         job.module.inputs, names, settings, translations)


def hand_off_exports(job: ModuleJob, mod: TypedModule, exported: ExportedModel,
                     names: list[str]) -> None:
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
