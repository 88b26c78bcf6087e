"""Run an op plan on warm workers; a batch that kills its worker is re-split.

The pool turns a dead worker's unreported cases into crash (or timeout)
results. For a batch of several units those results say only "somewhere in
here": the unreported units go back as two fresh jobs, halving until the
single crashing variant dies alone, with the signal in its reason. Side
effects (processes) live here; what comes out is a list of CaseResults.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace

from parity_gate.engine.pool import WorkerPool
from parity_gate.engine.protocol import Job
from parity_gate.model.findings import Stage
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.model.text import strip_control
from parity_gate.ops.findings import finding_class
from parity_gate.ops.jobs import OpBatchJob, Unit
from parity_gate.ops.planner import OpPlan, Selection, base_op, job_for, variant_of_key

# Outcomes a worker reports when the batch export failed for a case (its variant then
# becomes a suspect for later jobs: OpBatchJob.suspects).
EXPORT_FAILURES = frozenset({Outcome.EXPORT_ERROR, Outcome.UNSUPPORTED_OP})

# Imported once per worker at start-up, so the first batch does not pay for it.
WARM = ("parity_gate.ops.worker",)


@dataclass
class SweepStats:
    jobs: int = 0
    resplits: int = 0
    workers_spawned: int = 0
    suspects: set[str] = field(default_factory=set)  # variants whose export failed so far
    forewarned: int = 0  # jobs sent with some of their variants marked as suspects
    seen_ops: dict[str, str] = field(default_factory=dict)


def _lost_by_pool(result: CaseResult) -> bool:
    """A batch died under this case: the pool made the result up (the worker never
    reported it).

    A worker that never came up says nothing about the batch: splitting it
    would only start more workers that cannot start.
    """
    return result.lost is not None and not result.lost.never_started


def culprit(result: CaseResult) -> Unit | None:
    """The unit a dead worker was on when it died in a per-unit step (eager), if any."""
    step = result.lost.step if result.lost is not None else None
    if step is None or step.stage is not Stage.EAGER:
        return None
    parts = step.subject.rsplit("/", 2)
    return Unit(*parts) if len(parts) == 3 and all(parts) else None


def resplit(job: OpBatchJob, lost: list[CaseResult], selection: Selection) -> list[OpBatchJob]:
    """Fresh jobs from the units a dead worker never reported: the unit its last step
    names alone plus the rest, else two halves (one job if one unit is left)."""
    wanted = {unit_of(r) for r in lost}
    units = [u for u in job.units if u in wanted]
    named = culprit(lost[0]) if lost else None
    if named in units and len(units) > 1:
        parts = [("alone", [named]), ("rest", [u for u in units if u != named])]
    elif len(units) <= 1:
        parts = [("alone", units)] if units else []
    else:
        half = len(units) // 2
        parts = [("a", units[:half]), ("b", units[half:])]
    return [job_for(f"{job.name}/{tag}", part, selection, job.sources, job.seed,
                    job.generation + 1) for tag, part in parts]


def sweep(op_plan: OpPlan, selection: Selection, workers: int = 2,
          on_case: Callable[[CaseResult], None] | None = None,
          stats: SweepStats | None = None) -> Generator[CaseResult, None, None]:
    """Yield a result for every planned case, re-splitting batches whose worker died.

    Closing the generator (or an exception through it) closes the pool."""
    stats = stats if stats is not None else SweepStats()
    queue = list(op_plan.jobs)
    pool = WorkerPool(workers, threads=1, warm=WARM)
    try:
        while queue:
            owner = {key: job for job in queue for key in job.cases}
            lost: dict[str, list[CaseResult]] = {}
            stats.jobs += len(queue)
            for event in pool.run(queue, prepare=lambda job: _forewarn(job, stats)):
                if not isinstance(event, CaseResult):  # op workers report no findings
                    continue
                job = owner[event.key]
                if _lost_by_pool(event) and len(job.units) > 1:
                    lost.setdefault(job.name, []).append(event)
                    continue
                if event.outcome in EXPORT_FAILURES:
                    stats.suspects.add(variant_of_key(event.key))
                yield _complete(event, op_plan, stats)
            by_name = {j.name: j for j in queue}
            queue = [new for name, results in lost.items()
                     for new in resplit(by_name[name], results, selection)]
            stats.resplits += len(queue)
    finally:
        stats.workers_spawned = pool.spawned
        pool.close()


def _forewarn(job: Job, stats: SweepStats) -> Job:
    """The job as sent: with the run's export failures so far as suspects (a worker then
    exports them apart from its batch, and may never have seen them fail itself)."""
    assert isinstance(job, OpBatchJob)
    mine = stats.suspects.intersection(u.variant for u in job.units)
    if not mine:
        return job
    stats.forewarned += 1
    return replace(job, suspects=frozenset(mine))


def _complete(result: CaseResult, op_plan: OpPlan, stats: SweepStats) -> CaseResult:
    """Fill the op fields of results no worker reported (crash, timeout), and strip what
    the exporter's and ORT's coloured messages would break in JUnit."""
    result.reason, result.detail = strip_control(result.reason), strip_control(result.detail)
    variant = op_plan.variants.get(variant_of_key(result.key))
    if variant is None:
        return result
    if result.op is not None and result.op.aten_ops and result.op.op:
        stats.seen_ops.setdefault(variant.id, result.op.op)  # the op a worker saw it call
    if result.op is None:
        result.op = base_op(variant, stats.seen_ops.get(variant.id))
    result.op.finding_class = finding_class(result)
    return result


def unit_of(result: CaseResult) -> Unit:
    return Unit(variant_of_key(result.key), result.key.dtype, result.key.inputs)
