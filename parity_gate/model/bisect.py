"""`parity-gate bisect`'s answer: which package, which version broke the selected cases.

A probe is one install of a package set and one run of the selected cases in it,
judged against the bad run by each case's failure signature: the same failure is
`bad`, a pass is `good`, anything else (a different failure, an install that fails,
a crash or a hang) is `skip`, as in `git bisect skip`, and never a verdict.
"""

from __future__ import annotations

import enum
from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Record


class Verdict(str, enum.Enum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


class Phase(str, enum.Enum):
    """Why a probe ran: the good set itself, one package moved alone, a bisection step, or
    every differing package moved together (when none reproduces the failure alone)."""

    CONFIRM = "confirm"
    REPEAT = "repeat"      # the bad set again: a failure that does not repeat is flaky
    ISOLATE = "isolate"
    BISECT = "bisect"
    RECHECK = "recheck"    # the boundary (last good, first bad) probed a second time
    TOGETHER = "together"


@dataclass(frozen=True, config=CONFIG)
class Probe(Record):
    """One install + run: what it changed from the good set, how it judged, how long."""

    phase: Phase
    package: str          # the package moved from the good set ("" for the good set itself)
    version: str          # its version in this probe
    verdict: Verdict
    signature: str = ""   # the failure seen (first differing case), "" when all passed
    why: str = ""         # a skip's cause: "cannot install: ...", "timed out after 600 s", ...
    seconds: float = 0.0
    pins: dict[str, str] = field(default_factory=dict)  # the packages the probe installed
    seen: dict[str, str] = field(default_factory=dict)  # each case's signature ("pass")
    # cases this probe shows are not deterministic, with the evidence (the gate's own
    # second eager run, or a repeat of the bad set that did not fail as the bad run did)
    flaky: dict[str, str] = field(default_factory=dict)
    reused: bool = False  # the same set's run, made once per command for every failure


@dataclass(frozen=True, config=CONFIG)
class UpstreamChange(Record):
    """A pull request merged between the two releases of the boundary."""

    repo: str
    number: int
    title: str
    url: str
    merged_at: str = ""
    touches: str = ""  # the culprit's function or kernel it mentions


@dataclass(frozen=True, config=CONFIG)
class PackageBisection(Record):
    """One package that differs between the good and the bad set, and what probing it found."""

    package: str
    good: str
    bad: str
    candidates: list[str] = field(default_factory=list)  # released versions after good, to bad
    involved: bool | None = None   # moving it alone reproduces the failure (None: not probed)
    last_good: str | None = None
    first_bad: str | None = None
    skipped: list[str] = field(default_factory=list)     # versions between that were skips
    untested: list[str] = field(default_factory=list)    # still possible, never probed
    probes: int = 0
    bound: int = 0                 # ⌈log2 N⌉ + 2 for N candidates
    not_probed: str = ""           # why the package (or part of its range) was not probed
    confirmed: bool = False        # the last good and the first bad each probed twice, alike
    upstream: list[UpstreamChange] = field(default_factory=list)  # introduced or fixed by
    upstream_note: str = ""        # why the upstream list is empty or absent
    upstream_looks_for: str = ""   # "regression" (bad is newer) or "fix" (bad is older)

    @property
    def exact(self) -> bool:
        """The first bad version is known: the one before it is good (no skip between)."""
        return self.first_bad is not None and self.last_good is not None and not self.untested \
            and not self.skipped_between

    @property
    def skipped_between(self) -> list[str]:
        """Skipped versions that could still be the first bad one."""
        if self.first_bad is None:
            return []
        order = [self.good, *self.candidates]
        lo = order.index(self.last_good) if self.last_good in order else 0
        hi = order.index(self.first_bad)
        return [v for v in order[lo + 1:hi] if v in self.skipped]

    def describe(self) -> str:
        if self.first_bad is None:
            return f"{self.package}: {self.not_probed or 'no first bad version found'}"
        head = "first bad" if self.confirmed else "first bad, not confirmed"
        tail = "" if self.confirmed or not self.not_probed else f"; {self.not_probed}"
        if self.exact:
            return f"{head}: {self.package} {self.first_bad} ({self.last_good} good){tail}"
        between = [*self.skipped_between, *self.untested]
        return (f"{head}: {self.package} {self.first_bad} or earlier, after "
                f"{self.last_good} (good); not decided: {', '.join(between)}{tail}")


@dataclass(config=CONFIG)
class Bisection(Record):
    """The whole answer: the cases, the two sets, each package's finding and every probe."""

    cases: list[str]
    good: dict[str, str]
    bad: dict[str, str]
    packages: list[PackageBisection] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    culprit: str | None = None      # the package whose change alone reproduces the failure
    stopped: str = ""               # why the search ended early (budget, good set fails, ...)
    wall_s: float = 0.0
    # cases that do not repeat (the evidence): reported, never bisected
    flaky: dict[str, str] = field(default_factory=dict)
    repeat: str = ""                # what the repeat of the bad set showed, or why none ran

    def answer(self) -> str:
        """The line a user reads: 'first bad: onnxscript 0.5.4 (0.5.3 good); onnxruntime and
        torch not involved'."""
        if self.flaky:
            case, why = next(iter(self.flaky.items()))
            more = f" (and {len(self.flaky) - 1} more)" if len(self.flaky) > 1 else ""
            return (f"flaky, not bisected: {case}{more} does not repeat ({why}); no release "
                    "can be blamed for a failure that comes and goes")
        head = self.stopped
        culprit = next((p for p in self.packages if p.package == self.culprit), None) or \
            next((p for p in self.packages if p.involved and p.first_bad), None)
        if culprit is not None:
            head = culprit.describe() + (f" ({self.stopped})" if self.stopped else "")
        elif not head:
            head = "no single package's change reproduces the failure"
        clear = [p.package for p in self.packages if p.involved is False]
        if clear:
            names = " and ".join([", ".join(clear[:-1]), clear[-1]] if len(clear) > 1
                                 else clear)
            head += f"; {names} not involved"
        unprobed = [f"{p.package} ({p.not_probed})" for p in self.packages
                    if p.involved is None and p.not_probed]
        if unprobed:
            head += f"; not probed: {', '.join(unprobed)}"
        return head
