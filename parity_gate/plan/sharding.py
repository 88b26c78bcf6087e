"""`--shard K/N`: a deterministic, cost-balanced part of the plan for one CI runner.

A module is the unit of export, so it is never split: every case of a module,
skipped ones included, goes to one shard. Modules are assigned greedily,
longest first, to the least-loaded shard (LPT), ties broken by name, so every
runner of a matrix computes the same split from the same plan without talking
to the others. Costs are the seconds a previous run recorded (`--timings`), or
an estimate from the plan. Everything here is pure.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parity_gate.errors import UserError

if TYPE_CHECKING:
    from parity_gate.model.results import RunResult
    from parity_gate.plan.cases import Plan

# Estimate, in "case units": one export (per module and dtype) costs about as much as
# this many cases, since export dominates a small model's time.
EXPORT_WEIGHT = 10.0


@dataclass(frozen=True, order=True)
class Shard:
    index: int  # 1-based
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            raise UserError(f"--shard: got {text!r} (expected K/N with 1 <= K <= N, "
                            "e.g. 2/4 for the second of four shards)")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def units(plan: Plan) -> dict[str, list[str]]:
    """Module → the ids of all its planned cases (run or skipped), the unit of assignment."""
    out: dict[str, list[str]] = defaultdict(list)
    for job in plan.jobs:
        out[job.name] += [k.id for k in job.cases]
    for case in plan.skipped:
        out[case.key.module].append(case.id)
    return dict(out)


def plan_ids(plan: Plan) -> set[str]:
    return {i for ids in units(plan).values() for i in ids}


def estimate(plan: Plan) -> dict[str, float]:
    """Cases plus a weight per export (one per dtype): machine-independent, since skipped
    cases count too (a GPU runner and a CPU runner must agree on the split)."""
    dtypes: dict[str, set[str]] = defaultdict(set)
    cases: dict[str, int] = defaultdict(int)
    keys = [k for job in plan.jobs for k in job.cases] + [c.key for c in plan.skipped]
    for key in keys:
        dtypes[key.module].add(key.dtype)
        cases[key.module] += 1
    return {m: cases[m] + EXPORT_WEIGHT * len(dtypes[m]) for m in units(plan)}


def recorded_seconds(run: RunResult) -> dict[str, float]:
    """Seconds each module took in an earlier run; shared export and session times
    (repeated on every case of one export) are counted once."""
    per_case: dict[str, float] = defaultdict(float)
    shared: dict[tuple[str, ...], float] = {}
    for case in run.cases:
        t = case.timings
        module, dtype, provider = case.key.module, case.key.dtype, case.key.provider
        per_case[module] += sum(t.get(k, 0.0) for k in ("run_s", "compare_s", "eager_s"))
        export = t.get("export_s", 0.0) + t.get("check_s", 0.0)
        shared[(module, dtype)] = max(shared.get((module, dtype), 0.0), export)
        session = t.get("session_s", 0.0)
        shared[(module, dtype, provider)] = max(shared.get((module, dtype, provider), 0.0),
                                                session)
    for key, seconds in shared.items():
        per_case[key[0]] += seconds
    return {m: s for m, s in per_case.items() if s > 0}


def costs(plan: Plan, recorded: dict[str, float] | None = None) -> dict[str, float]:
    """Recorded seconds where known; other modules get their estimate scaled to seconds."""
    est = estimate(plan)
    known = {m: s for m, s in (recorded or {}).items() if m in est}
    if not known:
        return est
    base = sum(est[m] for m in known)
    scale = sum(known.values()) / base if base else 1.0
    return {m: known.get(m, est[m] * scale) for m in est}


def assign(module_costs: dict[str, float], count: int) -> list[list[str]]:
    """Longest processing time first onto the least-loaded shard; ties by name and index."""
    loads = [0.0] * count
    shards: list[list[str]] = [[] for _ in range(count)]
    for name in sorted(module_costs, key=lambda m: (-module_costs[m], m)):
        i = min(range(count), key=lambda j: (loads[j], j))
        loads[i] += module_costs[name]
        shards[i].append(name)
    return [sorted(s) for s in shards]


def shard_plan(plan: Plan, shard: Shard, recorded: dict[str, float] | None = None) -> Plan:
    """The part of `plan` that shard K of N runs."""
    from parity_gate.plan.cases import Plan

    mine = set(assign(costs(plan, recorded), shard.count)[shard.index - 1])
    return Plan(jobs=[j for j in plan.jobs if j.name in mine],
                skipped=[c for c in plan.skipped if c.key.module in mine])
