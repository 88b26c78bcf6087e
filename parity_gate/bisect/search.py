"""The search, with no side effects: which package's change reproduces the failure, then
which of its versions first does.

The probe is a function handed in (install + run + judge, `parity_gate.bisect.probe`,
or a fake in tests), so the order of probes, the skip handling and the probe bound are
checked without installing anything.

Cost: the bad set is probed twice first (a failure that does not repeat is flaky, and no
release can be blamed for it), the good set once (the probe environment must pass where
the good run passed, or no verdict means anything; a failure there is probed once more: a
pass then makes the cases flaky, a second failure is a contradiction),
each differing package once on its own, then the culprit's N candidate versions are
bisected in at most ⌈log2 N⌉ more probes: at most ⌈log2 N⌉ + 2 per package. A skipped
version (`git bisect skip`) is stepped around and leaves the range, earning one more
probe, at most the bound again; past that, the versions left undecided are listed rather
than guessed. The boundary found (last good, first bad) is probed a second time each
before the package is named: two probes that disagree make the cases flaky. A probe whose
cases carry the gate's own nondeterminism finding ends the search the same way.
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

REPEATS = 2  # probes of the bad set before bisecting: the failure must repeat in each
OWN_MODEL = ("no dependency is involved: the good and the bad set pin the same release of "
             "every package bisected, so the change that broke it is the model's own (its "
             "code, weights, inputs or manifest): compare those between the two runs")


class _Flaky(Exception):
    """A probe showed the cases do not repeat: the search ends, no package is named."""


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
           cases: list[str] | None = None, repeats: int = REPEATS) -> Bisection:
    """Bisect the packages in `candidates` (each: its released versions after the good
    one, up to and including the bad one, in order from good to bad); every other package
    is held at its good version."""
    budget = budget or Budget()
    differing = [p for p in candidates if good.get(p) != bad.get(p)]
    stuck = held_at_bad({p: good[p] for p in differing}, bad, refuse)
    held = {p: stuck.get(p, good[p]) for p in differing}
    out = Bisection(cases=list(cases or []), good=dict(good), bad=dict(bad))
    records = {p: PackageBisection(package=p, good=good[p], bad=bad[p],
                                   candidates=list(candidates[p]),
                                   bound=probe_bound(len(candidates[p])),
                                   not_probed=(f"held at {bad[p]}, where bisect runs, in every "
                                               f"probe: {refuse({p: good[p]})}"
                                               if p in stuck else "")) for p in differing}
    differing = [p for p in differing if p not in stuck]

    def run(phase: Phase, package: str, version: str,
            over: Mapping[str, str] | None = None) -> Probe | str:
        pins = {**held, **(over or {}), **({package: version} if package else {})}
        why = refuse(pins) or budget.spent([p for p in out.probes if not p.reused])
        if why:
            return why
        result = replace(probe(phase, package, version, pins), pins=pins)
        out.probes.append(result)
        if result.flaky:
            out.flaky.update(result.flaky)
            raise _Flaky
        return result

    def finish(stopped: str = "") -> Bisection:
        out.packages = list(records.values())
        out.stopped = stopped
        return out

    if not differing:
        return finish("nothing else differs between the sets: no probe can tell" if stuck
                      else OWN_MODEL)
    try:
        out.repeat = _repeat(run, {p: bad[p] for p in differing}, repeats)
        confirm = run(Phase.CONFIRM, "", "")
        if isinstance(confirm, str):
            return finish(f"the good set could not be probed: {confirm}")
        if confirm.verdict is Verdict.BAD and stuck:
            return finish(f"the good set with {', '.join(f'{p} {bad[p]}' for p in stuck)} "
                          f"held at the bad release fails as the bad run did "
                          f"({confirm.signature}): {', '.join(stuck)}'s move is the suspect "
                          "(--allow-heavy probes it)")
        if confirm.verdict is Verdict.BAD:
            _again(run, confirm, out)
            return finish(f"contradiction: the good set passed these cases, but a probe of "
                          f"it fails them as the bad run did ({confirm.signature}): the "
                          "failure does not come from the packages that differ (a package "
                          "not bisected, or the machine, differs from the good run's); "
                          "nothing is bisected")
        if confirm.verdict is not Verdict.GOOD:
            return finish("the selected cases do not pass in a probe of the good set "
                          f"({confirm.verdict.value}: {confirm.why}); no version can be "
                          "judged")
        for name in differing:
            records[name] = _isolate(records[name], run)
        involved = [r for r in records.values() if r.involved]
        for rec in involved:
            records[rec.package] = _bisect_one(rec, run)
            records[rec.package] = _recheck(records[rec.package], run, out)
            if records[rec.package].confirmed:
                out.culprit = out.culprit or rec.package
    except _Flaky:  # a package confirmed before the flake was found is no answer either
        out.culprit = None
        return finish()
    stopped = ""
    spent = budget.spent([p for p in out.probes if not p.reused])
    if not involved:
        stopped = (spent and f"stopped: {spent}") or (
            _together(run, bad, differing, out.repeat)
            if all(records[p].involved is False for p in differing) else "")
    return finish(stopped)


def held_at_bad(good: Mapping[str, str], bad: Mapping[str, str],
                refuse: RefuseFn) -> dict[str, str]:
    """Packages whose good release may not be installed here but whose bad one runs here (a
    multi-GB torch build the bad run used): held at the bad release in every probe, so the
    others can still be bisected."""
    return {p: bad[p] for p, v in good.items()
            if v != bad.get(p) and refuse({p: v}) and not refuse({p: bad[p]})}


def _again(run: Callable[..., Probe | str], first: Probe, out: Bisection) -> None:
    """The good set failed as the bad run did: probed once more, a pass makes the cases that
    failed flaky (`run` raises); failing again, the contradiction stands."""
    again = run(Phase.CONFIRM, "", "")
    if isinstance(again, str) or again.verdict is not Verdict.GOOD:
        return
    out.flaky.update({c: "the good set failed as the bad run did in one probe and passed in "
                      "another" for c, sig in first.seen.items() if sig != "pass"})
    if out.flaky:
        raise _Flaky


def _repeat(run: Callable[..., Probe | str], bad: Mapping[str, str], times: int) -> str:
    """The bad set probed `times` times: a case that passes in one is flaky (`run` raises);
    what the repeat showed, or why it could not run."""
    for _ in range(times):
        result = run(Phase.REPEAT, "", "", bad)
        if isinstance(result, str):
            return f"the bad set was not probed again: {result}"
        if result.verdict is Verdict.SKIP:
            return f"the bad set could not be judged in a probe ({result.why})"
    return f"the failure repeated in {times} probes of the bad set"


def _recheck(rec: PackageBisection, run: Callable[..., Probe | str],
             out: Bisection) -> PackageBisection:
    """The last good and the first bad probed a second time each: the package is named
    only when both agree with the first probes; a disagreement makes the cases flaky."""
    if rec.first_bad is None or rec.last_good is None:
        return rec
    for version, want in ((rec.last_good, Verdict.GOOD), (rec.first_bad, Verdict.BAD)):
        result = run(Phase.RECHECK, rec.package, version)
        if isinstance(result, str):
            return replace(rec, not_probed=f"the boundary was not probed a second time "
                           f"({result})")
        if result.verdict is Verdict.SKIP:
            return replace(rec, not_probed=f"a second probe of {rec.package} {version} "
                           f"could not be judged ({result.why})")
        if result.verdict is not want:
            moved = [c for c, sig in result.seen.items()
                     if (sig == "pass") == (want is Verdict.BAD)] or list(result.seen) \
                or list(out.cases)
            out.flaky.update({c: f"{rec.package} {version} was {want.value} in one probe "
                              f"and {result.verdict.value} in another" for c in moved})
            raise _Flaky
    return replace(rec, confirmed=True)


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
              differing: list[str], repeat: str) -> str:
    """No package alone reproduces it: does the whole bad set (one more probe, unless the
    repeats of the bad set already said so)?"""
    if len(differing) == 1:
        return "moving the package alone does not reproduce the failure"
    if repeat.startswith("the failure repeated"):
        return (f"no single package's change reproduces the failure; {', '.join(differing)} "
                "moved together do (the repeats of the bad set): they break it together")
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
