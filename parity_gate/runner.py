"""`parity-gate run`: manifest → plan → warm workers → RunResult → reports.

Side effects (processes, signals, files) live here and in the CLI; everything
it produces is a RunResult that the reports and the gate read.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from parity_gate import __version__
from parity_gate.engine.environment import versions
from parity_gate.engine.pool import WorkerPool
from parity_gate.engine.runtime import available_providers
from parity_gate.errors import UserError
from parity_gate.gate.decision import GatePolicy, apply
from parity_gate.manifest.models import Manifest, ProviderSettings
from parity_gate.model.findings import Finding
from parity_gate.model.gate import GateDecision
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.plan.cases import ModuleJob, Plan, missing_required_providers, plan
from parity_gate.plan.providers import EXECUTION_PROVIDERS, check_names
from parity_gate.plan.sharding import Shard, plan_ids, shard_plan
from parity_gate.report.progress import Progress
from parity_gate.report.write import ReportPaths, write_all


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


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT/SIGTERM stop the run but still let the reports of finished cases be written."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


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
    """Run everything; returns the result, the decision and the signal that stopped it."""
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
    if options.select and not work.total:
        raise UserError(f"--select {' '.join(options.select)}: matches no case "
                        "(expected a case-id glob such as 'mlp/*' or 'mlp/float16/*/b4/cpu')")
    # Stale baseline entries are judged against every planned case, not just this part.
    universe = plan_ids(plan(manifest, manifest_path, available))
    if options.shard is not None:
        work = shard_plan(work, options.shard, options.timings)
    run = RunResult(
        tool_version=__version__,
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        manifest={"path": str(manifest_path), "sha256": _sha256(manifest_path)},
        versions=versions(available),
        shard=str(options.shard) if options.shard else None,
    )
    progress = Progress(work.total, quiet=options.quiet)
    run.cases.extend(work.skipped)
    progress.skipped(work.skipped)
    stopped: int | None = None
    t0 = time.monotonic()
    run.planned = work.total
    pool = WorkerPool(options.jobs, warm=(ModuleJob.entry.partition(":")[0],))
    try:
        with _interruptible():
            try:
                for event in pool.run(work.jobs):
                    if isinstance(event, CaseResult):
                        _record(run, progress, event)
                    else:
                        _note(run, progress, event)
            except Interrupted as stop:
                stopped = stop.signum
                run.interrupted = True
                progress.message(f"parity-gate: {stop} received; writing reports of the "
                                 f"{len(run.cases)} finished cases")
            finally:
                pool.close()
    finally:
        run.duration_s = time.monotonic() - t0
    decision = apply(run, options.policy, universe)
    run.gate = decision
    progress.final(run)
    write_all(run, options.reports)
    return run, decision, stopped


def _record(run: RunResult, progress: Progress, case: CaseResult) -> None:
    run.cases.append(case)
    progress.case(case)


def _note(run: RunResult, progress: Progress, finding: Finding) -> None:
    if finding not in run.findings:
        run.findings.append(finding)
        progress.message(f"finding [{finding.module}] {finding.kind}: {finding.message}")


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
