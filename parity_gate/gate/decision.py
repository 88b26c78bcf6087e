"""The gate decision: each case ruled regression, known or fixed; what blocks; the exit code.

Without a baseline every failure is a regression (the original any-failure gate).
With one, a known failure blocks only when it got worse: a more severe outcome,
or an error figure beyond its record times the worsen factor. The decision is
a pure function of a RunResult and a Baseline, so shard merging re-decides it
(never reusing a shard's recorded rulings) and tests build it from RunResult
objects without running anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parity_gate.gate.baseline import Baseline, Entry
from parity_gate.gate.deltas import compute as compute_deltas
from parity_gate.gate.performance import run_flags
from parity_gate.model.gate import (
    CATEGORIES,
    DEFAULT_WORSEN_FACTOR,
    FIGURES,
    FIXED,
    KNOWN,
    REGRESSION,
    Figures,
    GateDecision,
    Ruling,
    Stale,
    counts_line,
)
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ROUNDOFF, rounding_level
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import one_line

ALL_SKIPPED = ("every case was skipped, so nothing was checked: blocking (expected at least "
               "one case to run; pass --allow-all-skipped, or the Action input "
               "allow_all_skipped: true, to accept that)")

UNREPORTED = ("{n} planned case(s) have no outcome although the run was not interrupted: "
              "blocking (every planned case must end with an outcome; this is a bug in "
              "parity-gate, please report it)")


@dataclass
class GatePolicy:
    """The gate's inputs besides the run: loaded up front so a bad file fails before work."""

    fail_on: str | None = None  # None: regressions with a baseline, else any-failure
    baseline: Baseline | None = None
    strict: bool = False
    worsen_factor: float | None = None
    compare_to: tuple[str, RunResult] | None = None  # (path, earlier run)
    allow_all_skipped: bool = False  # a run whose every case was skipped may pass


def apply(run: RunResult, policy: GatePolicy, universe: set[str] | None = None
          ) -> GateDecision:
    """`decide` with the policy, plus the deltas against `--compare-to`."""
    decision = decide(run, policy.fail_on, baseline=policy.baseline, strict=policy.strict,
                      worsen_factor=policy.worsen_factor, universe=universe,
                      allow_all_skipped=policy.allow_all_skipped)
    if policy.compare_to is not None:
        path, old = policy.compare_to
        decision.compare_to = compute_deltas(old, run, path, universe)
    return decision


def resolve_fail_on(fail_on: str | None, baseline: Baseline | None) -> str:
    """Default: block on regressions when a baseline exists, else on any failure."""
    return fail_on or ("regressions" if baseline is not None else "any-failure")


def decide(run: RunResult, fail_on: str | None = "any-failure", *,
           baseline: Baseline | None = None, strict: bool = False,
           worsen_factor: float | None = None,
           universe: set[str] | None = None,
           allow_all_skipped: bool = False) -> GateDecision:
    """Rule every case of `run` against `baseline`.

    `universe` is the set of case ids the manifest plans (before --select and
    --shard): an entry is stale only if it matches none of them, so a shard does
    not call the other shards' entries stale. Default: the run's own cases.
    """
    factor = worsen_factor or (baseline.worsen_factor if baseline else None) \
        or DEFAULT_WORSEN_FACTOR
    rulings = [r for case in sorted(run.cases, key=lambda c: c.key)
               if (r := rule(case, baseline, factor)) is not None]
    ids = universe if universe is not None else {c.id for c in run.cases}
    stale = [Stale(e.id, baseline.where(e)) for e in baseline.unmatched(ids)] \
        if baseline else []
    fail_on = resolve_fail_on(fail_on, baseline)
    order = {c: i for i, c in enumerate(CATEGORIES)}
    # An interrupted run says so itself; "nothing was checked" would misstate why.
    all_skipped = not run.interrupted and all(c.outcome is Outcome.SKIPPED for c in run.cases)
    hazards = sorted({f"{f.module}: {f.hazard.rule}" for f in run.findings
                      if f.hazard is not None and f.hazard.blocks})
    return GateDecision(blocking(run, rulings, fail_on, strict), fail_on, strict,
                        baseline.path if baseline else None, factor,
                        sorted(rulings, key=lambda r: (order[r.category], r.id)), stale,
                        all_skipped=all_skipped, allow_all_skipped=allow_all_skipped,
                        hazards=hazards, unreported=unreported(run),
                        performance=run_flags(run, baseline))


def blocking(run: RunResult, rulings: list[Ruling], fail_on: str, strict: bool) -> list[str]:
    """The blocking case ids, worst outcome first: regressions (plus known under
    any-failure, plus fixed under --strict); `never` lists them but passes. (A run in
    which no case ran blocks too, unless allowed, and one with fewer outcomes than planned
    cases without being interrupted always does: GateDecision decides those.)"""
    block = {REGRESSION} | ({KNOWN} if fail_on == "any-failure" else set()) \
        | ({FIXED} if strict else set())
    ids = {r.id for r in rulings if r.category in block}
    return [c.id for c in sorted((c for c in run.cases if c.id in ids),
                                 key=lambda c: (-c.outcome.severity, c.id))]


def unreported(run: RunResult) -> int:
    """Planned cases without an outcome, in a run no signal stopped (else 0)."""
    if run.interrupted or run.planned is None:
        return 0
    return max(0, run.planned - len({c.id for c in run.cases if not c.probe}))


def rule(case: CaseResult, baseline: Baseline | None, factor: float) -> Ruling | None:
    """One case's category; None for passing cases without an entry and for skipped ones."""
    if case.outcome is Outcome.SKIPPED:
        return None
    entry = baseline.entry_for(case.id) if baseline else None
    figures = Figures.of(case)
    if entry is None:
        if not case.failed:
            return None
        why = "new failure (not in the baseline)" if baseline else "fails (no baseline)"
        return Ruling(case.id, REGRESSION, case.outcome.value, why, figures=figures)
    where = baseline.where(entry) if baseline else ""

    def ruling(category: str, why: str) -> Ruling:
        return Ruling(case.id, category, case.outcome.value, why, entry.id, where, figures,
                      entry.figures)

    if not case.failed:
        return ruling(FIXED, f"now passes: remove it from the baseline ({where})")
    worse = worsened(entry, case.outcome, significant(case), factor, growth_floor(case))
    if worse:
        return ruling(REGRESSION, f"known failure got worse: {worse} ({where})")
    if worsened(entry, case.outcome, figures, factor):
        worst = case.worst()
        dtype = worst.dtype_ref if worst is not None else case.key.dtype
        return ruling(KNOWN, f"known failure within its record (figure growth at the rounding "
                             f"level of {dtype} ignored): {entry.reason}")
    return ruling(KNOWN, f"known failure within its record: {entry.reason}")


# How far above its dtype's rounding level (model.precision.rounding_level) a relative
# error must be before its growth counts: below it, figures move with the machine
# (vector width, summation order, an ORT upgrade), not with the exporter.
ABOVE_ROUNDING = 1.0


# How many roundings of the output's dtype, at the worst element's scale, the needed
# tolerance must grow by before a known failure counts as worse (the same CPU kind with
# another vector width or summation order moves it by one or two).
GROWTH_STEPS = 4


def growth_floor(case: CaseResult, steps: int = GROWTH_STEPS) -> float:
    """`steps` roundings of the worst output's dtype at the scale of its worst element
    (the larger of eager's and ONNX's value there; 1 where none is recorded)."""
    worst = case.worst()
    if worst is None:
        return 0.0
    values = [abs(v) for v in (worst.ref_value, worst.got_value)
              if v is not None and math.isfinite(v)]
    scale = max(values) if values else 1.0
    return steps * ROUNDOFF.get(worst.dtype_ref, 0.0) * max(scale, 1e-30)


def significant(case: CaseResult, above: float = ABOVE_ROUNDING) -> Figures:
    """The case's figures, with max_abs/max_rel dropped where they are rounding noise.

    A known failure regresses by a more severe outcome, or by error figures that grew
    *and* stand above the output dtype's rounding level: `max_rel 1.5e-14 → 1.1e-13` on
    the finite part of a float64 NaN-type failure is noise, in the module gate and the
    op sweep's alike.
    """
    figures = Figures.of(case)
    worst = case.worst()
    if worst is None or figures.max_rel is None:
        return figures
    if figures.max_rel <= above * rounding_level(worst.dtype_ref):
        return Figures(None, None, figures.mismatch_fraction)
    return figures


def worsened(entry: Entry, outcome: Outcome, figures: Figures, factor: float,
             floor: float = 0.0) -> str:
    """How a known failure got worse than its record, or '' if it did not. `floor`: the
    absolute growth of the needed tolerance that counts at all (a few roundings of the
    output's dtype at the output's scale, `growth_floor`). Where both sides have a max_abs,
    it decides alone: a max_rel that grows while max_abs does not is a near-zero element
    (one rounding step on another CPU), not a worse export."""
    if entry.outcome is not None and outcome.severity > entry.outcome.severity:
        return f"outcome {entry.outcome.value} → {outcome.value}"
    if entry.outcome is not None and outcome is not entry.outcome:
        return ""  # a milder outcome: its figures measure something else
    absolute = entry.figures.max_abs is not None and figures.max_abs is not None
    for name in FIGURES:
        recorded, now = getattr(entry.figures, name), getattr(figures, name)
        if recorded is None or now is None or (name == "max_rel" and absolute):
            continue
        if name == "max_abs" and now - recorded <= floor:
            continue
        if now > recorded * factor and now > recorded:
            times = "∞" if recorded == 0 else f"{now / recorded:.3g}"
            return (f"{name} grew {recorded:.4g} → {now:.4g} ({times}×, more than "
                    f"the worsen factor {factor:g}×)")
    return ""


def notices(decision: GateDecision) -> list[str]:
    """Console lines: nothing checked; for a baseline run regressions, then fixed, then
    stale entries. Each is `one_line`: ids and reasons come from results files (`merge`,
    `ops --from`), and a line must not start a workflow command or carry control bytes."""
    return [one_line(line) for line in _notices(decision)]


def _notices(decision: GateDecision) -> list[str]:
    lines = [f"parity-gate: {ALL_SKIPPED}"] if decision.unchecked else []
    if decision.unreported:
        lines.append(f"parity-gate: {UNREPORTED.format(n=decision.unreported)}")
    if decision.baseline is None:
        return lines
    lines += [f"parity-gate: regression {r.id}: {r.why}" for r in decision.of(REGRESSION)]
    tail = " (blocking: --strict)" if decision.strict and decision.fail_on != "never" else ""
    lines += [f"parity-gate: fixed {r.id}: {r.why}{tail}" for r in decision.of(FIXED)]
    lines += [f"parity-gate: warning: {s.where}: baseline entry {s.entry!r} matches no case "
              "(stale: remove it, or run `parity-gate baseline update`)"
              for s in decision.stale]
    lines.append(f"parity-gate: gate ({decision.baseline}, fail-on {decision.fail_on}"
                 f"{', strict' if decision.strict else ''}): {counts_line(decision)} → "
                 f"{'pass' if decision.passed else 'BLOCKING'}")
    return lines
