"""`parity-gate run`: manifest → plan → warm workers → RunResult → reports.

Side effects (processes, signals, files) live here and in the CLI; everything
it produces is a RunResult that the reports and the gate read.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from parity_gate import __version__
from parity_gate.engine.environment import versions
from parity_gate.engine.pool import Activity, WorkerPool
from parity_gate.engine.runtime import available_providers
from parity_gate.engine.signals import Interrupted, Signals, interruptible
from parity_gate.errors import UserError
from parity_gate.gate.decision import GatePolicy, apply
from parity_gate.localise.crash import replay
from parity_gate.localise.run import LocalisePolicy, localise
from parity_gate.manifest.models import Manifest, ProviderSettings
from parity_gate.model.findings import Finding
from parity_gate.model.gate import GateDecision
from parity_gate.model.keys import matches
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.plan.cases import ModuleJob, Plan, missing_required_providers, plan
from parity_gate.plan.providers import EXECUTION_PROVIDERS, check_names
from parity_gate.plan.sharding import Shard, plan_ids, shard_plan
from parity_gate.report.journal import Journal, keep_unfinished
from parity_gate.report.progress import Progress
from parity_gate.report.write import ReportPaths, check_outputs, write_all


@dataclass
class RunOptions:
    select: list[str] = field(default_factory=list)
    jobs: int = 1
    providers: list[str] | None = None
    reports: ReportPaths = field(default_factory=ReportPaths)
    quiet: bool = False
    policy: GatePolicy = field(default_factory=GatePolicy)  # fail-on, baseline, --strict...
    shard: Shard | None = None  # --shard K/N
    timings: dict[str, float] | None = None  # module → seconds, from --timings
    localise: LocalisePolicy | None = field(default_factory=LocalisePolicy)  # None: --no-localise
    cache_dir: Path | None = None  # the export cache (--cache-dir); None: --no-cache


def _replay_crashes(run: RunResult, policy: LocalisePolicy, journal: Journal | None,
                    progress: Progress, jobs: list[ModuleJob], pool: WorkerPool) -> None:
    """Each crash inside ONNX Runtime replayed in a repro folder (localise.crash), while the
    workers' folder still holds its evidence; each under its module's timeout and memory
    limit, as its worker ran."""
    assert policy.artifacts is not None
    modules = {job.name: job for job in jobs}
    for i, case in enumerate(run.cases):
        job = modules.get(case.key.module)
        if job is None:
            continue
        replayed = replay(case, policy.artifacts, policy.version_line, job.timeout_s,
                          job.memory_limit or pool.memory_limit)
        if replayed is not case and replayed.crash is not None:
            run.cases[i] = replayed
            if journal is not None:
                journal.case(replayed)  # again, with its repro: the last one counts
            progress.message(f"crash of {case.id}: {replayed.crash.describe()}")


def apply_provider_override(manifest: Manifest, names: list[str] | None) -> Manifest:
    """`--providers cpu,cuda` replaces the manifest's list, keeping declared settings."""
    if not names:
        return manifest
    check_names(names)
    declared: dict[str, ProviderSettings] = {str(k): v for k, v in manifest.providers.items()}
    chosen = {n: declared.get(n, ProviderSettings()) for n in names}
    modules = [m.model_copy(update={"providers": [p for p in (m.providers or names)
                                                  if p in chosen] or None})
               for m in manifest.modules]
    return manifest.model_copy(update={"providers": chosen, "modules": modules})


def run_manifest(manifest: Manifest, manifest_path: Path,
                 options: RunOptions) -> tuple[RunResult, GateDecision, int | None]:
    """Run everything; returns the result, the decision and the signal that stopped it.

    A signal while the run is being set up waits until its reports can be written, and
    then stops it as one during the work would (the interrupted report, never a
    traceback)."""
    with interruptible(armed=False) as signals:
        run, decision = _run(manifest, manifest_path, options, signals)
    return run, decision, signals.stopped


def _run(manifest: Manifest, manifest_path: Path, options: RunOptions,
         signals: Signals) -> tuple[RunResult, GateDecision]:
    """Plan, record the skipped cases, run the rest (and localise the failures), decide."""
    work, universe, available = _plan_work(manifest, manifest_path, options)
    run = RunResult(
        tool_version=__version__,
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        manifest={"path": str(manifest_path), "sha256": _sha256(manifest_path)},
        versions=versions(available),
        shard=str(options.shard) if options.shard else None,
    )
    run.planned = work.total
    journal = _open_journal(options, run, universe)
    to_run = sum(len(j.cases) - len(j.helpers) for j in work.jobs)
    progress = Progress(to_run, quiet=options.quiet, skipped=len(work.skipped))
    for case in work.skipped:
        _record(run, progress, case, journal, show=False)
    progress.skipped(work.skipped)
    if work.jobs:
        progress.started(len(work.jobs), min(options.jobs, len(work.jobs)))
    t0 = time.monotonic()
    _execute(run, work, options, progress, journal, signals)
    run.duration_s = time.monotonic() - t0
    decision = apply(run, options.policy, universe)
    run.gate = decision
    lines = [_cache_line(run, options.cache_dir) if options.cache_dir is not None else "",
             probe_share(run)]
    for line in lines:
        if line:
            progress.message(line)
    progress.final(run)
    write_all(run, options.reports)
    if journal is not None:
        journal.end(run)
        journal.close()
    unmatched = [p for p in work.probe_patterns if not any(matches(c.id, p) for c in run.cases)]
    if unmatched:
        raise UserError(f"--select {' '.join(unmatched)}: matches no case and names no probe "
                        "of a `shapes: auto` module (expected a case id, or a probe id as "
                        "`parity-gate check --explain` lists it)")
    return run, decision


def _plan_work(manifest: Manifest, manifest_path: Path,
               options: RunOptions) -> tuple[Plan, set[str], list[str]]:
    """This run's part of the plan, every planned case id, and the providers on this
    machine. Every mistake the options can make (a required provider missing, a
    --select that matches nothing, a bad --out) stops here, before any work."""
    manifest = apply_provider_override(manifest, options.providers)
    available = available_providers()
    missing = missing_required_providers(manifest, available)
    if missing:
        raise UserError([
            f"{manifest_path}: providers.{name}.required: provider {name!r} is required but "
            f"this machine's onnxruntime offers only {', '.join(available)} (expected "
            f"{EXECUTION_PROVIDERS[name]}; set required: false to skip it instead)"
            for name in missing
        ])
    work: Plan = plan(manifest, manifest_path, available, options.select)
    if options.select and not work.total and not any(j.helpers for j in work.jobs):
        raise UserError(f"--select {' '.join(options.select)}: matches no case "
                        "(expected a case-id glob such as 'mlp/*' or 'mlp/float16/*/b4/cpu')")
    check_outputs(options.reports)  # before any work: a bad --out costs seconds, not the run
    # Stale baseline entries are judged against every planned case, not just this part.
    universe = plan_ids(plan(manifest, manifest_path, available))
    if options.shard is not None:
        work = shard_plan(work, options.shard, options.timings)
    for job in work.jobs:
        job.cache_dir = options.cache_dir
        if options.localise is not None and options.localise.artifacts is not None:
            job.artifacts = Path(options.localise.artifacts)  # quantized cases' repros
    return work, universe, available


def _execute(run: RunResult, work: Plan, options: RunOptions, progress: Progress,
             journal: Journal | None, signals: Signals) -> None:
    """The jobs on the worker pool, each event recorded as it comes, then the failing
    cases' crash replays and localisation on the same pool. A signal ends it with the
    interrupted notice; the pool is closed whatever happens."""
    pool: WorkerPool | None = None
    try:
        signals.arm()  # a signal during the set-up stops the run here
        pool = WorkerPool(options.jobs, warm=(ModuleJob.entry.partition(":")[0],))
        _run_jobs(run, work.jobs, pool, Sink(progress, journal))
        if options.localise is not None and options.localise.artifacts is not None:
            _replay_crashes(run, options.localise, journal, progress, work.jobs, pool)
        if options.localise is not None:  # follow-up checks on the failing cases

            def localised(case: CaseResult) -> None:
                if journal is not None:
                    journal.case(case)  # again, with its localisation: the last one counts
                progress.message(f"localised {case.id}: " + "; ".join(
                    case.localisation.summary() if case.localisation else []))

            localise(run, work.jobs, pool, options.localise, on_case=localised)
    except Interrupted as stop:
        signals.shutting_down()
        run.interrupted = True
        progress.message(stop.notice("parity-gate", len(run.cases), run.planned))
    finally:
        signals.shutting_down()
        if pool is not None:
            pool.close()


@dataclass(frozen=True)
class Sink:
    """Where a run's events go as they come: the progress output and the journal."""

    progress: Progress
    journal: Journal | None


def _run_jobs(run: RunResult, jobs: list[ModuleJob], pool: WorkerPool, sink: Sink) -> None:
    """Every job on the pool: each module is built and run in every run, whatever a cache
    holds (the cache serves only what is a pure function of what the run itself digests:
    engine.translations)."""
    helpers = {i for job in jobs for i in job.helpers}
    held: list[CaseResult] = []
    for event in pool.run(jobs):
        if isinstance(event, Activity):
            sink.progress.step(event.module, event.step)
            continue
        if isinstance(event, CaseResult) and event.id in helpers:
            held.append(event)  # run only to make a selected probe's export
            continue
        _take(run, sink, event)
    for case in unexplained(held, run.cases):
        _take(run, sink, case)


def _take(run: RunResult, sink: Sink, event: CaseResult | Finding) -> None:
    if isinstance(event, CaseResult):
        _record(run, sink.progress, event, sink.journal)
    else:
        _note(run, sink.progress, event, sink.journal)


def unexplained(helpers: list[CaseResult], reported: list[CaseResult]) -> list[CaseResult]:
    """The helper cases worth reporting: the failing ones of a module and dtype where no
    probe was reported (their failure, an export or eager error, is why there is none)."""
    probed = {(c.key.module, c.key.dtype) for c in reported if c.probe}
    return [c for c in helpers if c.failed and (c.key.module, c.key.dtype) not in probed]


def policy_record(policy: GatePolicy) -> dict[str, Any]:
    """What `report --from-journal` needs to decide the gate again as this run would."""
    return {"fail_on": policy.fail_on, "strict": policy.strict,
            "worsen_factor": policy.worsen_factor,
            "baseline": policy.baseline.path if policy.baseline is not None else None,
            "allow_all_skipped": policy.allow_all_skipped}


def _open_journal(options: RunOptions, run: RunResult, universe: set[str]) -> Journal | None:
    path = options.reports.journal
    if path is None:
        return None
    kept = keep_unfinished(path)
    if kept is not None:
        print(f"parity-gate: {path}: an earlier run was stopped before its reports were "
              f"written; its finished cases are kept in {kept} (`parity-gate report "
              f"--from-journal {kept}` writes their reports)", file=sys.stderr)
    return Journal(path, run, policy_record(options.policy), sorted(universe))


def _record(run: RunResult, progress: Progress, case: CaseResult, journal: Journal | None,
            show: bool = True) -> None:
    run.cases.append(case)
    if journal is not None:
        journal.case(case)
    if show:
        progress.case(case)


def _note(run: RunResult, progress: Progress, finding: Finding,
          journal: Journal | None) -> None:
    if finding not in run.findings:
        run.findings.append(finding)
        if journal is not None:
            journal.finding(finding)
        progress.message(f"finding [{finding.module}] {finding.kind}: {finding.message}")


def probe_share(run: RunResult) -> str:
    """`shapes: auto`'s cost: its cases and their share of the run's time ("" when none)."""
    probes = [c for c in run.cases if c.probe]
    if not probes:
        return ""
    took = sum(c.timings.get("probe_s", 0.0) for c in probes)
    failing = sum(c.failed for c in probes)
    return (f"shapes: auto: {len(probes)} probe case(s), {failing} failing; "
            f"{took:.1f}s of the run's {run.duration_s:.1f}s "
            f"({100 * took / max(run.duration_s, 1e-9):.0f}%, on the modules' own exports)")


def _cache_line(run: RunResult, folder: Path) -> str:
    """How many (module, dtype) exports reused their ONNX translation from the cache, of
    those that exported in this run ('' when none exported)."""
    exported: dict[tuple[str, str], bool] = {}
    for case in run.cases:
        if case.provenance is not None and case.provenance.opset is not None:
            key = (case.key.module, case.key.dtype)
            exported[key] = exported.get(key, True) and case.provenance.export_cached
    if not exported:
        return ""
    return (f"export cache {folder}: {sum(exported.values())} of {len(exported)} exports "
            "reused their ONNX translation (every module was built, run eagerly and "
            "captured with torch.export in this run)")


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
