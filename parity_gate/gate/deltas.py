"""Per-case error figures, and how they changed against an earlier run (`--compare-to`).

A reviewer asks "what did this change do to parity?", not "what is the state of
parity?": the answer is the cases whose outcome changed, then those whose error
grew the most. Pure functions of two RunResults; nothing here reads files.
"""

from __future__ import annotations

import math

from parity_gate.model.gate import CaseDelta, Deltas, Figures
from parity_gate.model.results import RunResult


def compute(old: RunResult, new: RunResult, against: str,
            elsewhere: set[str] | None = None) -> Deltas:
    """Every case whose outcome or figures differ, outcome changes first, then growth.

    `elsewhere`: ids planned but run by another shard (or not selected); an old case
    among them is not "gone", just not here.
    """
    skip = (elsewhere or set()) - {c.id for c in new.cases}
    before = {c.id: c for c in old.cases if c.id not in skip}
    after = {c.id: c for c in new.cases}
    changes: list[CaseDelta] = []
    unchanged = 0
    for case_id in sorted(before.keys() | after.keys()):
        a, b = before.get(case_id), after.get(case_id)
        delta = CaseDelta(
            case_id,
            a.outcome.value if a else None,
            b.outcome.value if b else None,
            Figures.of(a) if a else Figures(),
            Figures.of(b) if b else Figures(),
        )
        if delta.outcome_changed or (delta.old != delta.new):
            changes.append(delta)
        else:
            unchanged += 1
    return Deltas(against, order(changes), unchanged, old.started_at)


def order(changes: list[CaseDelta]) -> list[CaseDelta]:
    """Outcome changes first (most worsened first), then the largest error growth."""

    def key(d: CaseDelta) -> tuple[int, int, float, str]:
        if d.outcome_changed:
            return (0, -d.severity_change, 0.0, d.id)
        growth = d.growth
        return (1, 0, -(growth if growth is not None else -math.inf), d.id)

    return sorted(changes, key=key)


def combine(recorded: list[Deltas | None]) -> Deltas | None:
    """The shards' `gate.compare_to` records as one (each shard compared its own cases)."""
    parts = [d for d in recorded if d is not None]
    if not parts:
        return None
    unique = {c.id: c for p in parts for c in p.changes}  # cases gone from all shards repeat
    changes = list(unique.values())
    return Deltas(parts[0].path, order(changes), sum(p.unchanged for p in parts),
                  parts[0].started_at)
