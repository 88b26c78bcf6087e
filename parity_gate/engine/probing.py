"""`shapes: auto`: probe cases at sizes chosen from what the export assumed, run on the
dtype's own export and session (no export per probe) after the planned cases.

Each probe is a case with its own id (`enc/float32/tokens@seq=23/b2/cpu`) and says
which assumption it probes. Judged as a user would: at a size eager accepts, the ONNX
model must give eager's shape and values (a failure is a defect, the probe its repro);
an ONNX Runtime error at a size that breaks an assumption is the export refusing loudly
(skipped, said); at a size eager rejects, an ONNX result is a hazard
(`unchecked-size-assumption`), not a mismatch.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from parity_gate.engine.fixtures import Draw, FixtureError, generate
from parity_gate.engine.followups import CaseState, ProviderRun, run_follow_ups
from parity_gate.engine.judging import run_case
from parity_gate.engine.protocol import PROBE_STEP
from parity_gate.engine.references import eager_reference
from parity_gate.engine.stages import StageFailure, run
from parity_gate.engine.state import EagerRef, JobContext
from parity_gate.hazards.rules import BY_ID
from parity_gate.manifest.models import EdgeFixture, FileFixture
from parity_gate.model.findings import Stage
from parity_gate.model.hazards import Action, Hazard
from parity_gate.model.keys import CaseKey, matches_any
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.plan.cases import GENERATE, batch_sizes_for
from parity_gate.plan.probes import (
    Probe,
    ProbeSettings,
    Range,
    auto_symbols,
    derive,
    fixture_sizes,
    probe_label,
    resize,
)

RULE = "unchecked-size-assumption"  # what an ONNX result at a size eager rejects is


def plan_probes(ctx: JobContext, exported: Any, example: dict[str, np.ndarray],
                export_batch: int) -> tuple[str, list[Probe]] | None:
    """The fixture set the probes resize and the probes, for one dtype's export; None when
    the module does not ask for them. A module with only file sets gets its probes with
    an empty set name (each is then skipped, with why)."""
    job = ctx.job
    symbols = auto_symbols(job.module, job.settings)
    if not symbols or job.module.cache is not None:
        return None
    from parity_gate.engine.assumptions import export_sizes

    sizes = export_sizes(example, job.module.inputs)
    exported_at = set(sizes.items())
    planned = {k: v for k, v in job.fixtures.items()
               if GENERATE not in k and k not in ctx.probe_sets}
    # The set (or size of it) the export was made at: a probe moves one thing at a time.
    chosen = sorted(planned, key=lambda n: (
        isinstance(planned[n], FileFixture),
        not fixture_sizes(planned[n], job.module.inputs, export_batch) <= exported_at,
        isinstance(planned[n], EdgeFixture)))
    name = chosen[0] if chosen and not isinstance(planned[chosen[0]], FileFixture) else ""
    declared: set[tuple[str, int]] = set()
    for fixture in planned.values():
        for batch in batch_sizes_for(fixture, job.settings.batch_sizes or []):
            declared |= fixture_sizes(fixture, job.module.inputs, batch)
    high = _memory_caps(example, sizes, int(job.settings.max_case_bytes or 0),
                        [k for k, r in exported.ranges.items() if r.high is not None])
    settings = ProbeSettings(symbols, int(job.settings.max_probes or 0),
                             tuple(job.settings.small_dims or ()), high)
    # A dim torch.export fixed to the example's size (no symbol left): a range of one point.
    ranges = {**exported.ranges,
              **{sym: Range(v, v) for _, _, sym, v in exported.baked_dims}}
    return name, derive(exported.assumptions, sizes, ranges, settings, declared)


def _memory_caps(example: dict[str, np.ndarray], sizes: dict[str, int], limit: int,
                 bounded: list[str]) -> dict[str, int]:
    """A bounded dim's largest size whose case stays within `max_case_bytes` (inputs scale
    about linearly in each dim)."""
    total = sum(int(a.nbytes) for a in example.values()) or 1
    return {s: max(int(sizes[s] * limit / total), 1) for s in bounded if s in sizes and limit}


def run_probes(ctx: JobContext, shared: ProviderRun, planned: tuple[str, list[Probe]],
               export_batch: int) -> None:
    """Every probe of one (dtype, provider), on the session the planned cases ran on."""
    import torch

    job, mod = ctx.job, shared.mod
    name, probes = planned
    # Not timed against eager: a probe asks whether a size works, not how fast it runs.
    shared = dataclasses.replace(shared, measurer=None)
    batch_symbol = next((s for spec in job.module.inputs for i, s in spec.dynamic.items()
                         if i == 0 and s == "batch"), None)
    base = job.fixtures.get(name) if name else None
    for probe in probes:
        changed = probe.changed
        label = probe_label(name or next(iter(job.fixtures), "file"), probe, batch_symbol)
        batch = changed.get(batch_symbol, export_batch) if batch_symbol else export_batch
        key = CaseKey(job.name, mod.dtype, label, batch, shared.provider)
        if not matches_any(key.id, job.select):
            continue  # `--select` names other cases (or other probes)
        said = f"{probe.label}: {probe.why}"
        t0 = time.perf_counter()
        resized = resize(base, job.module.inputs, changed) if base is not None else \
            "the module runs only file fixture sets, which have only their files' sizes"
        if isinstance(resized, str):
            ctx.result(CaseResult(key, Outcome.SKIPPED, f"probe {said}; {resized}",
                                  probe=said, provenance=shared.run.provenance))
            continue
        if label != name:  # a batch-only probe runs the set itself at another batch
            job.fixtures[label] = resized[0]
            ctx.probe_sets = ctx.probe_sets | {label}
        ctx.step(Stage.RUNNING, key.id, f"{PROBE_STEP}{said})")  # a crash is pinned on it
        ref = eager_reference(ctx, torch, mod, label, batch)
        if ref.error is not None:
            result = _eager_rejects(ctx, shared, key, ref, probe, said)
        else:
            result, got = run_case(job, shared.run, key, ref, {})
            if result.outcome is Outcome.RUNTIME_ERROR and probe.breaks:
                result = CaseResult(key, Outcome.SKIPPED, f"probe {said}; eager accepts it, "
                                    "and ONNX Runtime refuses it loudly (the export assumed "
                                    f"{probe.breaks[0]}): {result.reason}", result.detail,
                                    timings=result.timings, provenance=result.provenance)
            elif result.outcome is Outcome.PASS:
                result = run_follow_ups(CaseState(shared, ref, result, got, result.outcome))
            else:
                result = run_follow_ups(CaseState(shared, ref, result, got, result.outcome))
                result.reason = f"{result.reason} (probe {said})"
        result.probe = said
        result.timings = {**result.timings, "probe_s": time.perf_counter() - t0}
        ctx.result(result)


def _eager_rejects(ctx: JobContext, shared: ProviderRun, key: CaseKey, ref: EagerRef,
                   probe: Probe, said: str) -> CaseResult:
    """A size eager rejects: the ONNX model should not answer either. It answering is a
    hazard on the module (the export serves sizes the model does not)."""
    job = ctx.job
    error = ref.error
    assert error is not None
    common: dict[str, Any] = {"provenance": shared.run.provenance, "detail": error.detail}
    if error.outcome is not Outcome.EAGER_ERROR and error.outcome is not Outcome.SKIPPED:
        return CaseResult(key, error.outcome, f"{error.reason} (probe {said})", **common)
    eager = error.reason.removeprefix("eager forward failed: ")
    try:
        inputs = generate(key.inputs, job.fixtures[key.inputs],
                          [i.name for i in job.module.inputs],
                          Draw(key.batch_size or 0, key.dtype), seed=job.seed,
                          base_dir=job.base_dir)
        feeds = {k: v for k, v in inputs.items() if k in shared.run.feed_names}
        run(shared.run.session, feeds, label="")
    except (StageFailure, FixtureError) as refused:
        text = refused.reason if isinstance(refused, StageFailure) else str(refused)
        return CaseResult(key, Outcome.SKIPPED, f"probe {said}; eager rejects it ({eager}) "
                          f"and so does ONNX Runtime ({text})", **common)
    rule = BY_ID[RULE]
    action, reason = (job.settings.hazards.resolve(RULE) if job.settings.hazards
                      else (rule.action, ""))
    if action is not Action.OFF:
        ctx.hazard([Hazard(RULE, rule.severity, action, job.name,
                           f"at {probe.label} eager rejects the input ({eager}), yet the ONNX "
                           f"model returns a result without an error (probe {key.id}: "
                           f"{probe.why})", rule.fix, [], [key.dtype], reason)])
    return CaseResult(key, Outcome.SKIPPED, f"probe {said}; eager rejects it ({eager}) but "
                      f"the ONNX model returns a result silently: reported as hazard {RULE}",
                      **common)


def explain(job: Any) -> list[str]:
    """`parity-gate check --explain`: the probes `shapes: auto` derives for one module, from
    one export per dtype on the CPU (what a run derives from its own export), as lines."""
    import torch

    from parity_gate.engine.assumptions import read_assumptions
    from parity_gate.engine.binding import bind
    from parity_gate.engine.exports import export_once
    from parity_gate.engine.factory import build, seed_everything
    from parity_gate.engine.fixtures import derive_seed
    from parity_gate.engine.state import TypedModule, choose_export_batch

    if not auto_symbols(job.module, job.settings):
        return []
    seed_everything(torch, derive_seed(job.seed, job.name))
    module = build(job).eval()
    binding, problems = bind(module, job.module)
    if problems:
        return [f"{job.name}: cannot bind its inputs: {problems[0]}"]
    ctx = JobContext(job, lambda _message: None)
    batch = choose_export_batch(job.export.batch_size, job.settings.batch_sizes or [])
    names = [i.name for i in job.module.inputs]
    lines: list[str] = []
    for dtype in job.settings.dtypes or []:
        mod = TypedModule(module.to(getattr(torch, dtype)), binding, dtype, "cpu", module)
        generated = [n for n, f in job.fixtures.items()
                     if hasattr(f, "dims") and GENERATE not in n]
        if not generated:
            lines.append(f"{job.name}/{dtype}: only file fixture sets; every probe would be "
                         "skipped (a file has only its own sizes)")
            continue
        example = generate(generated[0], job.fixtures[generated[0]], names,
                           Draw(batch, dtype), seed=job.seed, base_dir=job.base_dir)
        exported = export_once(job, mod, example, [], job.export)
        exported.assumptions, exported.ranges = read_assumptions(exported.captured, [
            s for n in binding.order for s in job.module.inputs if s.name == n],
            exported.guard_sources)
        planned = plan_probes(ctx, exported, example, batch)
        probes = planned[1] if planned else []
        lines.append(f"{job.name}/{dtype}: {len(exported.assumptions)} assumption(s), "
                     f"{len(probes)} probe(s) (max_probes {job.settings.max_probes})")
        lines += [f"  assumes {a.describe()}" for a in exported.assumptions]
        batch_symbol = "batch" if any(s.dynamic.get(0) == "batch" for s in job.module.inputs) \
            else None
        for probe in probes:
            label = probe_label(generated[0], probe, batch_symbol)
            at = probe.changed.get(batch_symbol, batch) if batch_symbol else batch
            lines.append(f"  probe {job.name}/{dtype}/{label}/b{at}: {probe.why}")
    return lines
