"""The search, with no side effects: which package's change reproduces the failure, then
which of its versions first does.

The probe is a function handed in (install + run + judge, `parity_gate.bisect.probe`,
or a fake in tests), so the order of probes, the skip handling and the probe bound are
checked without installing anything.

Cost: the good set is probed once (the probe environment must pass where the good run
passed, or no verdict means anything), each differing package once on its own, then
the culprit's N candidate versions are bisected in at most ⌈log2 N⌉ more probes: at most
⌈log2 N⌉ + 2 per package. A skipped version (`git bisect skip`) is stepped around and
leaves the range, earning one more probe, at most the bound again; past that, the
versions left undecided are listed rather than guessed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from parity_gate.model.bisect import Bisection, PackageBisection, Phase, Probe, Verdict

# (phase, package moved, its version, the full set to install) -> the judged probe
ProbeFn = Callable[[Phase, str, str, dict[str, str]], Probe]
# the full set -> why it may not be probed ("" when it may)
RefuseFn = Callable[[dict[str, str]], str]


@dataclass(frozen=True)
class Budget:
    """Limits over the whole search (the Action's `bisect_budget`); None: no limit."""

    probes: int | None = None
    seconds: float | None = None
    used_probes: int = 0        # spent before this search (earlier failures of one command)
    used_seconds: float = 0.0

    def spent(self, probes: list[Probe]) -> str:
        """Why no further probe may run ("" while one may)."""
        if self.probes is not None and self.used_probes + len(probes) >= self.probes:
            return f"probe budget of {self.probes} spent"
        used = self.used_seconds + sum(p.seconds for p in probes)
        if self.seconds is not None and used >= self.seconds:
            return f"time budget of {self.seconds / 60:g} min spent ({used / 60:.1f} min)"
        return ""


def probe_bound(candidates: int) -> int:
    """⌈log2 N⌉ + 2: the good set, the package alone at its bad version, then bisection."""
    return math.ceil(math.log2(candidates)) + 2 if candidates > 1 else 2


def next_index(lo: int, hi: int, closed: set[int]) -> int | None:
    """The open index nearest the middle of (lo, hi), lower first on a tie; None if none."""
    open_ = [i for i in range(lo + 1, hi) if i not in closed]
    if not open_:
        return None
    mid = (lo + hi) / 2
    return min(open_, key=lambda i: (abs(i - mid), i))


def search(good: Mapping[str, str], bad: Mapping[str, str],
           candidates: Mapping[str, list[str]], probe: ProbeFn,
           refuse: RefuseFn = lambda pins: "", budget: Budget | None = None,
           cases: list[str] | None = None) -> Bisection:
    """Bisect the packages in `candidates` (each: its released versions after the good
    one, up to and including the bad one, in order from good to bad); every other package
    is held at its good version."""
    budget = budget or Budget()
    differing = [p for p in candidates if good.get(p) != bad.get(p)]
    held = {p: good[p] for p in differing}
    out = Bisection(cases=list(cases or []), good=dict(good), bad=dict(bad))
    records = {p: PackageBisection(package=p, good=good[p], bad=bad[p],
                                   candidates=list(candidates[p]),
                                   bound=probe_bound(len(candidates[p]))) for p in differing}

    def run(phase: Phase, package: str, version: str,
            over: Mapping[str, str] | None = None) -> Probe | str:
        pins = {**held, **(over or {}), **({package: version} if package else {})}
        why = refuse(pins) or budget.spent(out.probes)
        if why:
            return why
        result = replace(probe(phase, package, version, pins), pins=pins)
        out.probes.append(result)
        return result

    def finish(stopped: str = "") -> Bisection:
        out.packages = list(records.values())
        out.stopped = stopped
        return out

    if not differing:
        return finish("the good and the bad set do not differ in the packages bisected")
    confirm = run(Phase.CONFIRM, "", "")
    if isinstance(confirm, str):
        return finish(f"the good set could not be probed: {confirm}")
    if confirm.verdict is not Verdict.GOOD:
        seen = confirm.why or confirm.signature
        return finish("the selected cases do not pass in a probe of the good set "
                      f"({confirm.verdict.value}: {seen}); no version can be judged")
    for rec in list(records.values()):
        records[rec.package] = _isolate(rec, run)
    involved = [r for r in records.values() if r.involved]
    for rec in involved:
        records[rec.package] = _bisect_one(rec, run)
        out.culprit = out.culprit or rec.package
    stopped = ""
    if not involved:
        stopped = (budget.spent(out.probes) and f"stopped: {budget.spent(out.probes)}") or (
            _together(run, bad, differing)
            if all(r.involved is False for r in records.values()) else "")
    return finish(stopped)


def _isolate(rec: PackageBisection, run: Callable[..., Probe | str]) -> PackageBisection:
    """The package alone at its bad version, the others at their good ones: does it
    reproduce the failure (involved), not (innocent alone), or cannot it be judged?"""
    result = run(Phase.ISOLATE, rec.package, rec.bad)
    if isinstance(result, str):  # refused or over budget: the whole range is unprobed
        return replace(rec, probes=1, not_probed=f"{rec.good}..{rec.bad}, "
                       f"{len(rec.candidates)} release(s): {result}")
    if result.verdict is Verdict.SKIP:
        return replace(rec, probes=2, not_probed=f"alone at {rec.bad}: skip ({result.why})")
    return replace(rec, involved=result.verdict is Verdict.BAD, probes=2)


def _together(run: Callable[..., Probe | str], bad: Mapping[str, str],
              differing: list[str]) -> str:
    """No package alone reproduces it: does the whole bad set (one more probe)?"""
    if len(differing) == 1:
        return "moving the package alone does not reproduce the failure"
    whole = run(Phase.TOGETHER, "", "", {p: bad[p] for p in differing})
    if isinstance(whole, str) or whole.verdict is Verdict.SKIP:
        return ("no single package's change reproduces the failure; the whole bad set "
                "could not be judged")
    if whole.verdict is Verdict.BAD:
        return (f"no single package's change reproduces the failure; {', '.join(differing)} "
                "moved together do: they break it together")
    return ("the bad set does not reproduce the failure in a probe environment: a package "
            "not bisected (or the machine) made the difference")


def _bisect_one(rec: PackageBisection,
                run: Callable[[Phase, str, str], Probe | str]) -> PackageBisection:
    order = [rec.good, *rec.candidates]
    lo, hi = 0, len(order) - 1         # good (confirmed), bad (reproduced alone)
    skipped: set[int] = set()
    probes, note = rec.probes, ""
    # A skip removes its version from the range, so it earns one more probe, up to the
    # bound again: never more than 2 × (⌈log2 N⌉ + 2), however many versions cannot be judged.
    while probes < rec.bound + min(len(skipped), rec.bound):
        i = next_index(lo, hi, skipped)
        if i is None:
            break
        result = run(Phase.BISECT, rec.package, order[i])
        if isinstance(result, str):
            note = result
            break
        probes += 1
        if result.verdict is Verdict.BAD:
            hi = i
        elif result.verdict is Verdict.GOOD:
            lo = i
        else:
            skipped.add(i)
    untested = [order[i] for i in range(lo + 1, hi) if i not in skipped]
    if untested and not note:
        note = (f"probe bound of {rec.bound} (+{len(skipped)} for skips) reached")
    return replace(rec, last_good=order[lo], first_bad=order[hi], probes=probes,
                   skipped=[order[i] for i in sorted(skipped)], untested=untested,
                   not_probed=note)
