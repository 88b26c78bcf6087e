"""Manifest → module jobs with their planned cases (stable ids), and case selection.

A module is the unit of export and of isolation: one job per module goes to a
worker, and every case it is expected to produce is known up front, so cases a
crashed or hung worker never reached still appear in the reports.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from parity_gate.hazards.context import GateDims
from parity_gate.manifest.models import (
    EdgeFixture,
    ExportSettings,
    Manifest,
    ModuleSpec,
    ProviderSettings,
    Settings,
    resolve_settings,
)
from parity_gate.model.keys import CaseKey, could_match, matches, matches_any
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.plan.probes import auto_symbols
from parity_gate.plan.providers import availability


@dataclass
class ModuleJob:
    """Everything a worker needs for one module; picklable, no torch objects."""

    module: ModuleSpec
    settings: Settings
    fixtures: dict[str, Any]  # fixture id (a set, or one size of it: `text@seq=8`) → set
    providers: dict[str, ProviderSettings]
    seed: int
    base_dir: Path
    python_path: list[Path]
    cases: list[CaseKey] = field(default_factory=list)
    cache_dir: Path | None = None  # the export cache; None: every export is made afresh
    artifacts: Path | None = None  # repro folders written by the worker (quantized cases)
    # Dtypes whose tolerance the manifest sets (its defaults or the module): a contract the
    # float64 check reports on ("unattainable") but never waives; the built-in starting
    # tolerances are not one. An output's own `tolerances` are a contract for that output.
    contract_dtypes: frozenset[str] = frozenset()
    gate: GateDims = field(default_factory=GateDims)  # the gate's own dim sums and reach
    # `--select`'s patterns (none: everything): a `shapes: auto` probe runs when its id
    # matches one. `helpers`: ids of cases run only so that a selected probe can exist (the
    # export it is derived from), not selected themselves: kept out of the reports.
    select: tuple[str, ...] = ()
    helpers: frozenset[str] = frozenset()
    entry: ClassVar[str] = "parity_gate.engine.module_worker:run_job"

    @property
    def name(self) -> str:
        return self.module.name

    @property
    def export(self) -> ExportSettings:
        """Resolved export settings (resolution always fills them; the model allows None)."""
        return self.settings.export or ExportSettings()

    @property
    def timeout_s(self) -> float:
        return float(self.settings.timeout_s or 600.0)

    @property
    def memory_limit(self) -> int | None:
        """The module's `worker_memory`, which the pool applies while it runs (None: the
        pool's default)."""
        return int(self.settings.worker_memory) if self.settings.worker_memory else None


@dataclass
class Plan:
    jobs: list[ModuleJob]
    skipped: list[CaseResult]
    # `--select` patterns that match no planned case and may name a probe (see _helpers)
    probe_patterns: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """The selected cases (not a probe's helpers: those are not reported)."""
        return sum(len(j.cases) - len(j.helpers) for j in self.jobs) + len(self.skipped)


def batch_sizes_for(fixture: Any, batch_sizes: Sequence[int]) -> list[int]:
    """Edge sets add an empty batch, the input class most often mishandled."""
    sizes = list(dict.fromkeys(batch_sizes))
    if isinstance(fixture, EdgeFixture) and fixture.empty and 0 not in sizes:
        sizes.append(0)
    return sizes


def fixture_variants(name: str, fixture: Any) -> list[tuple[str, Any]]:
    """A set whose `dims` hold lists runs once per combination of sizes, each its own
    fixture id (`text@seq=8`, `text@seq=32`) with plain integer dims."""
    dims: dict[str, Any] = dict(getattr(fixture, "dims", None) or {})
    multi = {k: v for k, v in dims.items() if isinstance(v, list)}
    if not multi:
        return [(name, fixture)]
    out: list[tuple[str, Any]] = []
    for sizes in itertools.product(*multi.values()):
        chosen = dict(zip(multi, sizes, strict=True))
        label = name + "".join(f"@{k}={v}" for k, v in chosen.items())
        out.append((label, fixture.model_copy(update={"dims": {**dims, **chosen}})))
    return out


def module_fixtures(manifest: Manifest, module: ModuleSpec) -> dict[str, Any]:
    """Fixture id → set (with integer dims) for every set the module runs, in order; a
    module with a KV cache runs each once per past length (`text@past=7`, dim `past`)."""
    out = {label: variant for name in module.fixtures
           for label, variant in fixture_variants(name, manifest.fixtures[name])}
    if module.cache is not None:
        out = {f"{label}@past={past}": _with_dims(variant, past=past)
               for label, variant in out.items() for past in module.cache.past_lengths}
    if module.generation is not None and module.generation.prompt in manifest.fixtures:
        out[generation_id(module)] = manifest.fixtures[module.generation.prompt]
    if module.quantize is not None and module.quantize.calibration in manifest.fixtures:
        out[calibration_id(module)] = manifest.fixtures[module.quantize.calibration]
    return out


GENERATE = "@generate="  # marks a generation case's fixture id: `prompt@generate=16`


def generation_id(module: ModuleSpec) -> str:
    """The fixture id of a module's generation cases."""
    gen = module.generation
    return f"{gen.prompt}{GENERATE}{gen.steps}" if gen is not None else ""


def is_generation(key: CaseKey) -> bool:
    return GENERATE in key.inputs


TASK = "@task"  # marks a task-metric case's fixture id: `digits@task`


def is_task(key: CaseKey) -> bool:
    return key.inputs.endswith(TASK)


QUANT = "@quant="  # marks a quantized case's fixture id: `rand@quant=pt2e`


def is_quantized(key: CaseKey) -> bool:
    return QUANT in key.inputs


def calibration_id(module: ModuleSpec) -> str:
    """The fixture id of a module's calibration set (no cases of its own)."""
    return f"{module.quantize.calibration}@calibration" if module.quantize else ""


def _with_dims(fixture: Any, **dims: int) -> Any:
    if not hasattr(fixture, "dims"):
        return fixture  # a file set: the worker reads its past length from the id
    return fixture.model_copy(update={"dims": {**fixture.dims, **dims}})


def all_case_keys(manifest: Manifest, module: ModuleSpec, settings: Settings) -> list[CaseKey]:
    keys: list[CaseKey] = []
    fixtures = module_fixtures(manifest, module)
    gen = generation_id(module)
    for dtype in settings.dtypes or []:
        for fixture_name, fixture in fixtures.items():
            if fixture_name == calibration_id(module):
                continue
            sizes = [module.generation.batch_size] if fixture_name == gen and \
                module.generation else batch_sizes_for(fixture, settings.batch_sizes or [])
            for batch in sizes:
                for provider in settings.providers or []:
                    keys.append(CaseKey(module.name, dtype, fixture_name, batch, provider))
        if module.task is not None:
            keys += [CaseKey(module.name, dtype, f"{module.task.name}{TASK}",
                             module.task.batch_size, provider)
                     for provider in settings.providers or []]
        q = module.quantize
        if q is not None and dtype == "float32":
            keys += [CaseKey(module.name, dtype, f"{name}{QUANT}{q.flow}", q.batch_size,
                             provider) for name in module.fixtures
                     for provider in settings.providers or []]
            if module.task is not None and q.flow == "runtime":  # the metric on the QDQ graph
                keys += [CaseKey(module.name, dtype, f"{module.task.name}{TASK}{QUANT}{q.flow}",
                                 module.task.batch_size, provider)
                         for provider in settings.providers or []]
    return keys


def plan(manifest: Manifest, manifest_path: Path, available: list[str],
         select: list[str] | None = None) -> Plan:
    """Split the manifest into worker jobs and cases that are skipped without running."""
    base = manifest_path.resolve().parent
    jobs: list[ModuleJob] = []
    skipped: list[CaseResult] = []
    keys_of: dict[str, list[CaseKey]] = {}
    probing: set[str] = set()  # patterns that made a module run helpers for its probes
    for module in manifest.modules:
        settings = resolve_settings(manifest, module)
        job = ModuleJob(
            module=module,
            settings=settings,
            fixtures=module_fixtures(manifest, module),
            providers={str(name): p for name, p in manifest.providers.items()},
            seed=manifest.seed,
            base_dir=base,
            python_path=[(base / p).resolve() for p in manifest.python_path] + [base],
            contract_dtypes=frozenset(str(d) for layer in (manifest.defaults, module)
                                      for d in (layer.tolerances or {})),
            select=tuple(select or ()),
        )
        keys_of[module.name] = all_case_keys(manifest, module, settings)
        for key in keys_of[module.name]:
            if not matches_any(key.id, select or []):
                continue
            reason = _skip_reason(module, key.provider, available)
            if reason:
                skipped.append(CaseResult(key, Outcome.SKIPPED, reason=reason))
            else:
                job.cases.append(key)
        probing |= _add_helpers(job, keys_of[module.name], list(select or []), available)
        if job.cases:
            jobs.append(job)
    return Plan(jobs, skipped, [p for p in select or [] if p in probing and not any(
        matches(k.id, p) for keys in keys_of.values() for k in keys)])


def _add_helpers(job: ModuleJob, keys: list[CaseKey], select: list[str],
                 available: list[str]) -> set[str]:
    """A `--select` pattern that matches none of a `shapes: auto` module's planned cases of
    a dtype, yet could match an id under `module/dtype/set`, may name one of its probes,
    which exist only once that dtype is exported: the job then runs one planned case per
    fixture set and provider of that dtype (the export a full run makes, from the same
    sets) and the probes that match. Those cases are helpers, kept out of the reports.
    Returns the patterns that asked for them."""
    if not auto_symbols(job.module, job.settings) or job.module.cache is not None:
        return set()
    chosen = {k.id for k in job.cases}
    helpers: dict[CaseKey, None] = {}
    probing: set[str] = set()
    for dtype in dict.fromkeys(k.dtype for k in keys):
        mine = [k for k in keys if k.dtype == dtype and not is_generation(k) and not is_task(k)
                and not is_quantized(k)
                and not _skip_reason(job.module, k.provider, available)]
        # A probe's id starts with the name of the set it resizes (its sizes may differ).
        sets = dict.fromkeys(k.inputs.split("@")[0] for k in mine)
        naming = {p for p in select if not any(matches(k.id, p) for k in mine)
                  and any(could_match(p, f"{job.name}/{dtype}/{f}") for f in sets)}
        if not naming:
            continue
        probing |= naming
        firsts = {(k.inputs, k.provider): k for k in reversed(mine)}
        helpers.update((k, None) for k in mine if firsts[(k.inputs, k.provider)] == k
                       and k.id not in chosen)
    if helpers:
        order = {k: i for i, k in enumerate(keys)}
        job.cases = sorted([*job.cases, *helpers], key=order.__getitem__)
        job.helpers = frozenset(k.id for k in helpers)
    return probing


def _skip_reason(module: ModuleSpec, provider: str, available: list[str]) -> str:
    if module.skip:
        return f"module skipped: {module.skip}"
    status = availability(provider, available)
    return "" if status.available else status.reason


def missing_required_providers(manifest: Manifest, available: list[str]) -> list[str]:
    """Required providers this machine cannot run: a configuration error before any work."""
    return [name for name, p in manifest.providers.items()
            if p.required and not availability(name, available).available]
