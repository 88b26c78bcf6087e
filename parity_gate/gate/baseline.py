"""The baseline file: known failing cases, parsed with line numbers, matched, refreshed.

A gate that fails on every known exporter bug gets switched off, so known
failures are listed in a committed file with a reason and the error they had
when recorded; the gate (gate.py) then blocks only on what got worse. The file
format is the pydantic models below (`BaselineFile`, `EntryModel`), validated and
located by the manifest's machinery (`manifest.located`), so a bad entry reads
`file:line:col: known_failures[2].outcome: ... (expected ...)`. Parsing, matching,
dumping and `update` are pure; `load`/`find` are the only readers.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Context
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from parity_gate.compare.timing import order_bounds
from parity_gate.errors import UserError
from parity_gate.manifest.located import (
    Phrasing,
    Problems,
    load_document,
    position,
    read_text,
    validate,
)
from parity_gate.model.gate import FIGURES, Figures
from parity_gate.model.keys import GLOB_CHARS, is_glob, matches
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult

DEFAULT_NAME = "parity-baseline.yml"
# A reason that only promises one: the gate accepts a known failure for what it says, so
# `TODO: explain` in a committed file would hide a failure nobody looked at.
_PLACEHOLDER = re.compile(r"\s*(?:(?:todo|fixme|xxx|tbd).*|\W*explain\W*)",
                          re.IGNORECASE | re.DOTALL)
REASON_EXPECTED = "expected why the case fails: what goes wrong and, if known, the upstream issue"
FAILING_OUTCOMES = tuple(o.value for o in Outcome if o.failed)
HEADER = (
    "# parity-gate baseline: known failing cases; the gate blocks only on what got worse.\n"
    "# Refresh with `parity-gate baseline update`; edit `reason` and `link` by hand.\n"
    "# `id` is a case id or a glob of them (`*` matches any characters, `/` included).\n"
)


# ---------------------------------------------------------------------------
# the file format, validated (and its errors located) like the manifest


def _infinite_words(value: Any) -> Any:
    """`inf` written as a word, and NaN (infinitely wrong, so it compares), read as .inf."""
    if isinstance(value, str) and value.strip().lower() in ("inf", ".inf", "infinity"):
        return math.inf
    if isinstance(value, float) and math.isnan(value):
        return math.inf
    return value


_NOT_BLANK = r"\S"
Text = Annotated[str, Field(pattern=_NOT_BLANK)]
Figure = Annotated[float, BeforeValidator(_infinite_words), Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class EntryModel(_Strict):
    """One entry of `known_failures`, as written in the file."""

    id: Text = Field(description="a case id, or a glob of them such as `mlp/float16/*/cpu`")
    reason: Text = Field(description="why this case fails (edit by hand)")
    link: str | None = Field(None, description="an issue URL (edit by hand)")
    outcome: Literal[FAILING_OUTCOMES] | None = Field(  # type: ignore[valid-type]
        None, description="the failing outcome recorded; a more severe one is a regression")
    max_abs: Figure | None = Field(None, description="recorded max |got - ref| (or .inf)")
    max_rel: Figure | None = Field(None, description="recorded max relative error (or .inf)")
    mismatch_fraction: Figure | None = Field(
        None, description="recorded share of elements out of tolerance")


class PerformanceEntryModel(_Strict):
    """One entry of `performance`: a case's recorded ONNX/eager time ratio."""

    id: Text = Field(description="a case id")
    ratio: Figure = Field(description="median per-pair time ratio ONNX Runtime / eager")
    low: Figure = Field(description="lower end of its 95% interval")
    high: Figure = Field(description="upper end of its 95% interval")


class BaselineFile(_Strict):
    """Top level of `parity-baseline.yml`."""

    version: Literal[1] = Field(1, description="baseline format version")
    worsen_factor: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = Field(
        None, description="how much a recorded figure may grow before it is a regression")
    known_failures: list[EntryModel] | None = Field(
        None, description="known failing cases (`- id: ...` with `reason: ...`)")
    performance: list[PerformanceEntryModel] | None = Field(
        None, description="recorded time ratios per case (written by `baseline update`): a "
        "case whose interval now lies wholly above its recorded one is slower beyond the "
        "noise of both runs")


TOP_KEYS = tuple(BaselineFile.model_fields)
PERFORMANCE_KEYS = tuple(PerformanceEntryModel.model_fields)
ENTRY_KEYS = tuple(EntryModel.model_fields)
assert tuple(FIGURES) == ENTRY_KEYS[-len(FIGURES):]  # Figures(*...) reads them in order
PHRASING = Phrasing(patterns={_NOT_BLANK: "a non-blank string"})


@dataclass(frozen=True)
class Entry:
    """One known failure: a case id (or glob), why it fails, and the error it had."""

    id: str
    reason: str
    link: str | None = None
    outcome: Outcome | None = None
    figures: Figures = field(default_factory=Figures)
    line: int = 0  # where it was read from; 0 for entries made by `update`

    @property
    def is_pattern(self) -> bool:
        return is_glob(self.id)

    @property
    def literal_prefix(self) -> str:
        """What every id it matches starts with: the id up to its first glob character."""
        return self.id[:next((i for i, ch in enumerate(self.id) if ch in GLOB_CHARS),
                             len(self.id))]

    def matches(self, case_id: str) -> bool:
        return case_id == self.id or (self.is_pattern and matches(case_id, self.id))

    @classmethod
    def of(cls, model: EntryModel, line: int = 0) -> Entry:
        return cls(model.id, model.reason, model.link,
                   Outcome(model.outcome) if model.outcome is not None else None,
                   Figures(*(getattr(model, name) for name in FIGURES)), line)

    def to_model(self) -> EntryModel:
        return EntryModel.model_construct(  # made by this code: valid by construction
            id=self.id, reason=self.reason, link=self.link or None,
            outcome=self.outcome.value if self.outcome is not None else None,
            **{name: getattr(self.figures, name) for name in FIGURES})

    def to_dict(self) -> dict[str, Any]:
        return self.to_model().model_dump(exclude_none=True)


@dataclass(frozen=True)
class Recorded:
    """A case's recorded time ratio and its interval (`performance` in the file)."""

    id: str
    ratio: float
    low: float
    high: float
    line: int = 0

    @property
    def figures(self) -> tuple[float, float, float]:
        return self.ratio, self.low, self.high

    def to_model(self) -> PerformanceEntryModel:
        return PerformanceEntryModel.model_construct(id=self.id, ratio=self.ratio,
                                                     low=self.low, high=self.high)


@dataclass(frozen=True)
class Baseline:
    path: str
    entries: tuple[Entry, ...] = ()
    worsen_factor: float | None = None
    performance: tuple[Recorded, ...] = ()

    def where(self, entry: Entry | Recorded) -> str:
        return f"{self.path}:{entry.line}" if entry.line else self.path

    def recorded_for(self, case_id: str) -> Recorded | None:
        return self._index.recorded.get(case_id)

    def entry_for(self, case_id: str) -> Entry | None:
        """The entry that owns a case: an exact id wins, else the first matching glob."""
        return self._index.entry_for(case_id)

    def unmatched(self, ids: Iterable[str]) -> list[Entry]:
        """The entries that match none of `ids` (stale against them), in file order."""
        return CaseIds(ids).unmatched(self.entries)

    @cached_property
    def _index(self) -> _Index:
        return _Index(self.entries, self.performance)


class _Index:
    """Entries by exact id and globs by literal prefix: an op sweep gates ~10^5 cases
    against ~10^4 entries, where testing every entry against every case takes minutes."""

    def __init__(self, entries: tuple[Entry, ...], performance: tuple[Recorded, ...]) -> None:
        self.exact: dict[str, Entry] = {}
        self.globs: dict[str, list[tuple[int, Entry]]] = {}
        for pos, entry in enumerate(entries):
            self.exact.setdefault(entry.id, entry)
            if entry.is_pattern:
                self.globs.setdefault(entry.literal_prefix, []).append((pos, entry))
        self.lengths = sorted({len(p) for p in self.globs})
        self.recorded = {r.id: r for r in reversed(performance)}  # the first one wins

    def entry_for(self, case_id: str) -> Entry | None:
        if case_id in self.exact:
            return self.exact[case_id]
        found = [pe for n in self.lengths if n <= len(case_id)
                 for pe in self.globs.get(case_id[:n], ()) if pe[1].matches(case_id)]
        return min(found, key=lambda pe: pe[0])[1] if found else None


class CaseIds:
    """Case ids sorted, so the ids a glob can match are one range (its literal prefix)."""

    def __init__(self, ids: Iterable[str]) -> None:
        self.sorted = sorted(set(ids))
        self.set = set(self.sorted)

    def first_match(self, entry: Entry) -> str | None:
        return next(self._matching(entry), None)

    def every_match(self, entry: Entry) -> list[str]:
        """Every id `entry` matches, in sorted order."""
        return list(self._matching(entry))

    def unmatched(self, entries: Iterable[Entry]) -> list[Entry]:
        return [e for e in entries if self.first_match(e) is None]

    def _matching(self, entry: Entry) -> Iterator[str]:
        """The ids `entry` matches, scanning only the range of its literal prefix."""
        if not entry.is_pattern:
            if entry.id in self.set:
                yield entry.id
            return
        prefix = entry.literal_prefix
        for i in range(bisect_left(self.sorted, prefix), len(self.sorted)):
            case_id = self.sorted[i]
            if not case_id.startswith(prefix):
                return
            if entry.matches(case_id):
                yield case_id


@dataclass(frozen=True)
class Change:
    """One thing `baseline update` did, printed so nothing is dropped silently."""

    action: str  # added | removed | updated | recorded (time ratios)
    id: str
    why: str

    def __str__(self) -> str:
        return f"{self.action} {self.id}: {self.why}"


def reason_problem(reason: str) -> str | None:
    """What is wrong with a known failure's `reason` (blank, or a placeholder such as
    `TODO: explain`), in words; None when it says something."""
    if not reason.strip():
        return f"got an empty reason ({REASON_EXPECTED})"
    if _PLACEHOLDER.fullmatch(reason):
        return f"{reason.strip()[:60]!r} is a placeholder, not a reason ({REASON_EXPECTED})"
    return None


# ---------------------------------------------------------------------------
# reading


def default_path(manifest_path: Path) -> Path:
    return manifest_path.parent / DEFAULT_NAME


def find(manifest_path: Path, explicit: Path | None) -> Baseline | None:
    """The baseline in force: `--baseline PATH` (must exist), else the default if present."""
    if explicit is not None:
        return load(explicit)
    path = default_path(manifest_path)
    return load(path) if path.exists() else None


def load(path: Path) -> Baseline:
    if not path.exists():
        raise UserError(f"{path}: baseline file not found (expected a YAML file of known "
                        "failures; create it with `parity-gate baseline update`)")
    return parse(read_text(path, "a baseline YAML file of known failures"), str(path))


def parse(text: str, display: str) -> Baseline:
    """Validate the whole file and report every problem, each as `file:line:col: path: ...`."""
    doc = load_document(text, display,
                        expected="a baseline file with a `known_failures` list")
    if doc.data is None:
        return Baseline(display)
    problems = Problems(doc)
    if not isinstance(doc.data, dict):
        problems.add((), "expected a mapping with a `known_failures` list")
        problems.raise_if_any()
    problems.add_duplicate_keys()
    file: BaselineFile | None = validate(problems, BaselineFile, PHRASING)
    _check_unique_ids(doc.data.get("known_failures"), problems)
    _check_reasons(doc.data.get("known_failures"), problems)
    problems.raise_if_any()
    assert file is not None  # no problems means the schema accepted it
    items = doc.node(("known_failures",))
    lines = [position(n)[0] for n in items.value] if isinstance(items, yaml.SequenceNode) else []
    entries = tuple(Entry.of(model, line) for model, line
                    in zip(file.known_failures or [], lines, strict=True))
    items = doc.node(("performance",))
    lines = [position(n)[0] for n in items.value] if isinstance(items, yaml.SequenceNode) else []
    timed = tuple(Recorded(m.id, m.ratio, m.low, m.high, line)
                  for m, line in zip(file.performance or [], lines, strict=True))
    return Baseline(display, entries, file.worsen_factor, timed)


def _check_unique_ids(items: Any, problems: Problems) -> None:
    """What the schema cannot say: each id once (an exact id or glob owns its cases)."""
    first: dict[str, int] = {}
    for i, item in enumerate(items if isinstance(items, list) else []):
        key = item.get("id") if isinstance(item, dict) else None
        if not isinstance(key, str):
            continue
        if key in first:
            line, _ = position(problems.doc.node(("known_failures", first[key])))
            problems.add(("known_failures", i, "id"), f"duplicate id {key!r} (expected each "
                         f"id once; first listed at line {line})")
        first.setdefault(key, i)


def _check_reasons(items: Any, problems: Problems) -> None:
    """Each reason says why (the schema refuses a blank one; a placeholder is refused
    here)."""
    for i, item in enumerate(items if isinstance(items, list) else []):
        reason = item.get("reason") if isinstance(item, dict) else None
        if isinstance(reason, str) and reason.strip():
            said = reason_problem(reason)
            if said:
                problems.add(("known_failures", i, "reason"), said)


# ---------------------------------------------------------------------------
# writing


def dump(baseline: Baseline) -> str:
    file = BaselineFile.model_construct(
        worsen_factor=baseline.worsen_factor,
        known_failures=[e.to_model() for e in baseline.entries],
        performance=[r.to_model() for r in baseline.performance] or None)
    doc = file.model_dump(exclude_none=True)
    return HEADER + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)


def new_failures(old: Baseline, run: RunResult) -> list[CaseResult]:
    """The run's failing cases no entry of `old` owns: what `update` adds, each needing a
    reason."""
    return [c for c in sorted(run.cases, key=lambda c: c.key)
            if c.failed and old.entry_for(c.id) is None]


def update(old: Baseline, run: RunResult, reason: str | None = None
           ) -> tuple[Baseline, list[Change]]:
    """Refresh from a run: keep reasons and links, record new failures with `reason`
    (required when there are any: see `new_failures`), drop what is gone.

    An entry whose cases were all skipped is kept as it is (this machine could not
    tell); one whose cases now pass is removed as fixed, one matching no case as stale.
    """
    owned: dict[str, list[CaseResult]] = {e.id: [] for e in old.entries}
    unowned: list[CaseResult] = []
    for case in sorted(run.cases, key=lambda c: c.key):
        entry = old.entry_for(case.id)
        if entry is not None:
            owned[entry.id].append(case)
        elif case.failed:
            unowned.append(case)
    if unowned and (reason is None or reason_problem(reason)):
        raise ValueError(f"{len(unowned)} new failure(s) need a reason, got {reason!r}")
    kept: list[Entry] = []
    changes: list[Change] = []
    ran = CaseIds(c.id for c in run.cases)
    for entry in old.entries:
        cases = owned[entry.id]
        failing = [c for c in cases if c.failed]
        if failing:
            fresh = record(entry, failing)
            if fresh != entry:
                changes.append(Change("updated", entry.id, _refresh_note(entry, fresh)))
            kept.append(fresh)
        elif any(c.outcome is Outcome.SKIPPED for c in cases):
            kept.append(entry)
        elif cases:
            changes.append(Change("removed", entry.id, "fixed: now passes"))
        elif ran.first_match(entry) is not None:
            changes.append(Change("removed", entry.id,
                                  "redundant: every case it matches has its own entry"))
        else:
            changes.append(Change("removed", entry.id, "stale: matches no case"))
    for case in unowned:
        entry = record(Entry(case.id, str(reason)), [case])
        kept.append(entry)
        changes.append(Change("added", case.id, f"new failure: {case.outcome.value}"))
    timed, note = record_performance(old.performance, run)
    if note:
        changes.append(note)
    return Baseline(old.path, tuple(kept), old.worsen_factor, timed), changes


def record_performance(old: tuple[Recorded, ...], run: RunResult
                       ) -> tuple[tuple[Recorded, ...], Change | None]:
    """The run's time ratios over the recorded ones (cases the run did not time keep
    theirs). An unstable figure is recorded with its wide interval, so a later run still
    has something to compare against (a wide interval claims little: the regression rule
    needs the new interval wholly above it), unless the record it would replace is
    narrower. A figure without a 95% interval (too few pairs) is no record."""
    before = {r.id: r for r in old}
    fresh: dict[str, Recorded] = {}
    for c in run.cases:
        lat = c.performance.latency if c.performance is not None else None
        if lat is None or order_bounds(lat.pairs) is None:
            continue
        now = Recorded(c.id, _round(lat.ratio), _round(lat.low), _round(lat.high))
        was = before.get(c.id)
        if lat.stable or was is None or _width(now) <= _width(was):
            fresh[c.id] = now
    if not fresh:
        return old, None
    merged = before | fresh
    return (tuple(merged[k] for k in sorted(merged)),
            Change("recorded", "performance", f"time ratios of {len(fresh)} case(s)"))


def _width(r: Recorded) -> float:
    return r.high / r.low if r.low > 0 else math.inf


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def record(entry: Entry, failing: list[CaseResult]) -> Entry:
    """The entry with the outcome and figures of the cases it covers (their worst)."""
    outcome = max((c.outcome for c in failing), key=lambda o: (o.severity, o.value))
    figures = Figures.worst_of([Figures.of(c) for c in failing])
    rounded = Figures(*(_round_up(getattr(figures, n)) for n in FIGURES))
    return replace(entry, outcome=outcome, figures=rounded, line=entry.line)


def _refresh_note(old: Entry, new: Entry) -> str:
    parts = []
    if old.outcome != new.outcome:
        parts.append(f"outcome {old.outcome.value if old.outcome else 'unset'} → "
                     f"{new.outcome.value if new.outcome else 'unset'}")
    for name in FIGURES:
        a, b = getattr(old.figures, name), getattr(new.figures, name)
        if a != b:
            parts.append(f"{name} {_show(a)} → {_show(b)}")
    return "recorded figures refreshed: " + ", ".join(parts)


def _show(x: float | None) -> str:
    return "unset" if x is None else f"{x:g}"


_CEIL4 = Context(prec=4, rounding=ROUND_CEILING)


def _round_up(x: float | None) -> float | None:
    """4 significant digits, rounded up so the recorded run is always within its record."""
    if x is None or not math.isfinite(x):
        return x
    return float(_CEIL4.create_decimal_from_float(x))
