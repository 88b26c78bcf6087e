"""The gate's decision as a record: rulings per case, stale entries, deltas, what blocks.

Computed by `parity_gate.gate` (a pure function of a run and a baseline) and
stored inside the run's JSON, so readers (the Action, merge, PR comment) take
the decision as it was made instead of re-deriving it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import field
from typing import Protocol

from pydantic import computed_field
from pydantic.dataclasses import dataclass

from parity_gate.errors import EXIT_FAIL, EXIT_PASS
from parity_gate.model.comparison import Comparison
from parity_gate.model.outcomes import Outcome
from parity_gate.model.performance import PerformanceFlag
from parity_gate.model.record import CONFIG, Real, Record


class _HasWorst(Protocol):
    """A case, as the figures read it (results import this module, not the reverse)."""

    def worst(self) -> Comparison | None: ...

FIGURES = ("max_abs", "max_rel", "mismatch_fraction")
REGRESSION, KNOWN, FIXED = "regression", "known", "fixed"
CATEGORIES = (REGRESSION, FIXED, KNOWN)  # the order the summary reads them in
DEFAULT_WORSEN_FACTOR = 2.0


@dataclass(frozen=True, config=CONFIG)
class Figures(Record):
    """The error figures of a case's worst comparison (None where there is none)."""

    max_abs: Real | None = None
    max_rel: Real | None = None
    mismatch_fraction: Real | None = None

    @classmethod
    def of(cls, case: _HasWorst) -> Figures:
        worst = case.worst()
        if worst is None or worst.max_abs is None:  # no numbers: shape/dtype or no output
            return cls()
        # NaN figures (a one-sided NaN) count as infinitely wrong, so they compare.
        return cls(*(_nan_to_inf(getattr(worst, name)) for name in FIGURES))

    @classmethod
    def worst_of(cls, many: list[Figures]) -> Figures:
        """Field-wise maximum: a pattern entry records the worst of the cases it covers."""
        return cls(*(_max(getattr(f, name) for f in many) for name in FIGURES))


@dataclass(frozen=True, config=CONFIG)
class Ruling(Record):
    """Why one case is a regression, a known failure or fixed."""

    id: str
    category: str
    outcome: str
    why: str
    entry: str | None = None  # the baseline entry's id (a case id or glob)
    where: str = ""  # file:line of that entry
    figures: Figures = field(default_factory=Figures)
    recorded: Figures = field(default_factory=Figures)


@dataclass(frozen=True, config=CONFIG)
class Stale(Record):
    """A baseline entry that matches no case: it protects nothing and should go."""

    entry: str
    where: str


@dataclass(frozen=True, config=CONFIG)
class CaseDelta(Record):
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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def growth(self) -> Real | None:
        """new / old max_abs (inf when it grew from zero; None without both figures)."""
        old, new = self.old.max_abs, self.new.max_abs
        if old is None or new is None:
            return None
        if old == 0:
            return 1.0 if new == 0 else math.inf
        return _inf_if_nan(new) / _inf_if_nan(old)


@dataclass(config=CONFIG)
class Deltas(Record):
    """All changes against one earlier run, ordered for the reader."""

    path: str
    changes: list[CaseDelta]
    unchanged: int = 0
    started_at: str = ""


@dataclass(config=CONFIG)
class GateDecision(Record):
    """What blocks, and why: the `gate` object of results.json."""

    blocking: list[str] = field(default_factory=list)  # case ids, worst first
    fail_on: str = "any-failure"
    strict: bool = False
    baseline: str | None = None
    worsen_factor: float = DEFAULT_WORSEN_FACTOR
    rulings: list[Ruling] = field(default_factory=list)
    stale: list[Stale] = field(default_factory=list)
    compare_to: Deltas | None = None
    # No case ran (every one skipped, or none planned): nothing was checked, so the gate
    # blocks unless the user accepted that (`--allow-all-skipped`) or set fail-on never.
    all_skipped: bool = False
    allow_all_skipped: bool = False
    # Export hazards whose rule the manifest promoted to `fail` ("module: rule").
    hazards: list[str] = field(default_factory=list)
    # Planned cases with no outcome in a run nobody interrupted: a case was lost on the
    # way, and a run that checked less than it planned never passes, whatever `fail_on`.
    unreported: int = 0
    # Performance rules cases broke (gate.performance): blocking ones fail the run.
    performance: list[PerformanceFlag] = field(default_factory=list)

    @property
    def slow(self) -> list[PerformanceFlag]:
        """The performance flags that block."""
        return [f for f in self.performance if f.blocks]

    @property
    def unchecked(self) -> bool:
        """Blocks because nothing was checked (not because anything failed)."""
        return self.all_skipped and not self.allow_all_skipped and self.fail_on != "never"

    @property
    def passed(self) -> bool:
        return ((not self.blocking and not self.hazards and not self.slow)
                or self.fail_on == "never") \
            and not self.unchecked and not self.unreported

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_FAIL

    def of(self, category: str) -> list[Ruling]:
        return [r for r in self.rulings if r.category == category]

    def counts(self) -> dict[str, int]:
        """Cases per ruling, and stale entries, as the summary reads them."""
        return {**{c: len(self.of(c)) for c in CATEGORIES}, "stale": len(self.stale)}


def counts_line(decision: GateDecision) -> str:
    """`2 regressions, 1 fixed, 3 known, 1 stale entry`, in the summary's order."""
    parts = [_plural(len(decision.of(REGRESSION)), "regression"),
             f"{len(decision.of(FIXED))} fixed", f"{len(decision.of(KNOWN))} known",
             _plural(len(decision.stale), "stale entry", "stale entries")]
    return ", ".join(parts)


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _inf_if_nan(x: float) -> float:
    return math.inf if math.isnan(x) else x


def _nan_to_inf(x: float | None) -> float | None:
    return None if x is None else _inf_if_nan(float(x))


def _max(values: Iterable[float | None]) -> float | None:
    present = [_inf_if_nan(v) for v in values if v is not None]
    return max(present) if present else None


def _severity(outcome: str | None) -> int:
    return Outcome(outcome).severity if outcome else 0
