"""Run an op plan on warm workers; a batch that kills its worker is re-split.

The pool turns a dead worker's unreported cases into crash (or timeout)
results. For a batch of several units those results say only "somewhere in
here": the unreported units go back as two fresh jobs, halving until the
single crashing variant dies alone, with the signal in its reason. Side
effects (processes) live here; what comes out is a list of CaseResults.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from parity_gate.ops.jobs import OpBatchJob, Unit
from parity_gate.ops.planner import OpPlan, Selection, base_meta, job_for, variant_of_key
from parity_gate.outcomes import Outcome
from parity_gate.results import CaseResult
from parity_gate.workers import WorkerPool

_LOST = (Outcome.CRASH, Outcome.TIMEOUT)


@dataclass
class SweepStats:
    jobs: int = 0
    resplits: int = 0
    workers_spawned: int = 0
    seen_ops: dict[str, str] = field(default_factory=dict)


def _lost_by_pool(result: CaseResult) -> bool:
    """A batch died under its cases (pool-made results carry no meta; a worker's own do).

    A worker that never came up says nothing about the batch: splitting it
    would only start more workers that cannot start.
    """
    never_started = any(s in result.reason for s in _NOT_STARTED)
    return result.outcome in _LOST and not result.meta and not never_started


_NOT_STARTED = ("waiting for the worker to start", "import failed")


# The worker's step names the unit when it died in a per-case step (eager).
_STEP_UNIT = re.compile(r"while eager ([\w.]+)/(\w+)/(\w+)")


def resplit(job: OpBatchJob, lost: list[CaseResult], selection: Selection) -> list[OpBatchJob]:
    """Fresh jobs from the units a dead worker never reported: the unit its last step
    names alone plus the rest, else two halves (one job if one unit is left)."""
    wanted = {(variant_of_key(r.key), r.key.dtype, r.key.fixture) for r in lost}
    units = [u for u in job.units if (u.variant, u.dtype, u.input_class) in wanted]
    named = _STEP_UNIT.search(lost[0].reason) if lost else None
    culprit = Unit(*named.groups()) if named else None
    if culprit in units and len(units) > 1:
        parts = [("alone", [culprit]), ("rest", [u for u in units if u != culprit])]
    elif len(units) <= 1:
        parts = [("alone", units)] if units else []
    else:
        half = len(units) // 2
        parts = [("a", units[:half]), ("b", units[half:])]
    return [job_for(f"{job.name}/{tag}", part, selection, job.sources, job.seed,
                    job.generation + 1) for tag, part in parts]


def sweep(op_plan: OpPlan, selection: Selection, workers: int = 2,
          on_case: Callable[[CaseResult], None] | None = None,
          stats: SweepStats | None = None) -> Iterator[CaseResult]:
    """Yield a result for every planned case, re-splitting batches whose worker died."""
    stats = stats if stats is not None else SweepStats()
    queue = list(op_plan.jobs)
    pool = WorkerPool(workers, threads=1)
    try:
        while queue:
            owner = {key: job for job in queue for key in job.cases}
            lost: dict[str, list[CaseResult]] = {}
            stats.jobs += len(queue)
            for kind, payload in pool.run(queue):
                if kind != "case":
                    continue
                job = owner[payload.key]
                if _lost_by_pool(payload) and len(job.units) > 1:
                    lost.setdefault(job.name, []).append(payload)
                    continue
                yield _complete(payload, op_plan, stats)
            by_name = {j.name: j for j in queue}
            queue = [new for name, results in lost.items()
                     for new in resplit(by_name[name], results, selection)]
            stats.resplits += len(queue)
    finally:
        stats.workers_spawned = pool.spawned
        pool.close()


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean_text(text: str) -> str:
    """Without terminal colours and control bytes: XML (JUnit) cannot carry them."""
    return _CONTROL.sub("", _ANSI.sub("", text))


def _complete(result: CaseResult, op_plan: OpPlan, stats: SweepStats) -> CaseResult:
    """Fill the op fields of results the pool made up (a crash reports no meta), and
    strip what the exporter's and ORT's coloured messages would break in JUnit."""
    result.reason, result.detail = clean_text(result.reason), clean_text(result.detail)
    variant = op_plan.variants.get(variant_of_key(result.key))
    if variant is None:
        return result
    if result.meta.get("op") and "aten_ops" in result.meta:
        stats.seen_ops.setdefault(variant.id, result.meta["op"])
    if not result.meta:
        result.meta = base_meta(variant, result.key.fixture)
        seen = stats.seen_ops.get(variant.id)
        if seen:
            result.meta["op"] = seen
    return result


def unit_of(result: CaseResult) -> Unit:
    return Unit(variant_of_key(result.key), result.key.dtype, result.key.fixture)
