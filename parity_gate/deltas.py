"""Per-case error figures, and how they changed against an earlier run (`--compare-to`).

A reviewer asks "what did this change do to parity?", not "what is the state of
parity?": the answer is the cases whose outcome changed, then those whose error
grew the most. Pure functions of two RunResults; nothing here reads files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from parity_gate.outcomes import Outcome
from parity_gate.results import CaseResult, RunResult

FIGURES = ("max_abs", "max_rel", "mismatch_fraction")


@dataclass(frozen=True)
class Figures:
    """The error figures of a case's worst comparison (None where there is none)."""

    max_abs: float | None = None
    max_rel: float | None = None
    mismatch_fraction: float | None = None

    @classmethod
    def of(cls, case: CaseResult) -> Figures:
        worst = case.worst()
        if worst is None or worst.max_abs is None:  # no numbers: shape/dtype or no output
            return cls()
        # NaN figures (a one-sided NaN) count as infinitely wrong, so they compare.
        return cls(*(_nan_to_inf(_float(getattr(worst, name))) for name in FIGURES))

    @classmethod
    def worst_of(cls, many: list[Figures]) -> Figures:
        """Field-wise maximum: a pattern entry records the worst of the cases it covers."""
        return cls(*(_max(getattr(f, name) for f in many) for name in FIGURES))

    def to_dict(self) -> dict[str, Any]:
        return {name: encode(getattr(self, name)) for name in FIGURES}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Figures:
        d = d or {}
        return cls(*(_float(d.get(name)) for name in FIGURES))


@dataclass(frozen=True)
class CaseDelta:
    """One case whose outcome or figures differ between the old and the new run."""

    id: str
    old_outcome: str | None  # None: the case was not in the old run
    new_outcome: str | None  # None: the case is not in the new run
    old: Figures
    new: Figures

    @property
    def outcome_changed(self) -> bool:
        return self.old_outcome != self.new_outcome

    @property
    def severity_change(self) -> int:
        return _severity(self.new_outcome) - _severity(self.old_outcome)

    @property
    def growth(self) -> float | None:
        """new / old max_abs (inf when it grew from zero; None without both figures)."""
        old, new = self.old.max_abs, self.new.max_abs
        if old is None or new is None:
            return None
        if old == 0:
            return 1.0 if new == 0 else math.inf
        return _inf_if_nan(new) / _inf_if_nan(old)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "old_outcome": self.old_outcome,
            "new_outcome": self.new_outcome,
            "old": self.old.to_dict(),
            "new": self.new.to_dict(),
            "growth": encode(self.growth),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaseDelta:
        return cls(d["id"], d.get("old_outcome"), d.get("new_outcome"),
                   Figures.from_dict(d.get("old")), Figures.from_dict(d.get("new")))


@dataclass
class Deltas:
    """All changes against one earlier run, ordered for the reader (see `order`)."""

    against: str
    changes: list[CaseDelta]
    unchanged: int = 0
    against_started_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.against,
            "started_at": self.against_started_at,
            "unchanged": self.unchanged,
            "changes": [c.to_dict() for c in self.changes],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Deltas:
        return cls(d.get("path", ""), [CaseDelta.from_dict(c) for c in d.get("changes", [])],
                   int(d.get("unchanged", 0)), d.get("started_at", ""))


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


def encode(x: float | None) -> float | str | None:
    """JSON-safe number: the report is written with allow_nan=False."""
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _float(x: Any) -> float | None:
    if x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _inf_if_nan(x: float) -> float:
    return math.inf if math.isnan(x) else x


def _nan_to_inf(x: float | None) -> float | None:
    return None if x is None else _inf_if_nan(x)


def _max(values: Any) -> float | None:
    present = [_inf_if_nan(v) for v in values if v is not None]
    return max(present) if present else None


def _severity(outcome: str | None) -> int:
    return Outcome(outcome).severity if outcome else 0


def combine(recorded: list[dict[str, Any]]) -> Deltas | None:
    """The shards' `gate.compare_to` objects as one (each shard compared its own cases)."""
    parts = [Deltas.from_dict(d) for d in recorded if d]
    if not parts:
        return None
    unique = {c.id: c for p in parts for c in p.changes}  # cases gone from all shards repeat
    changes = list(unique.values())
    return Deltas(parts[0].against, order(changes), sum(p.unchanged for p in parts),
                  parts[0].against_started_at)
