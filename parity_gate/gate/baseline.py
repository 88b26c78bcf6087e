"""The baseline file: known failing cases, parsed with line numbers, matched, refreshed.

A gate that fails on every known exporter bug gets switched off, so known
failures are listed in a committed file with a reason and the error they had
when recorded; the gate (gate.py) then blocks only on what got worse. Parsing,
matching, dumping and `update` are pure; `load`/`find` are the only readers.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Context
from pathlib import Path
from typing import Any

import yaml

from parity_gate.errors import UserError
from parity_gate.model.gate import FIGURES, Figures
from parity_gate.model.keys import is_glob, matches
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult

DEFAULT_NAME = "parity-baseline.yml"
TODO_REASON = "TODO: explain"
TOP_KEYS = ("version", "worsen_factor", "known_failures")
ENTRY_KEYS = ("id", "reason", "link", "outcome", *FIGURES)
FAILING_OUTCOMES = tuple(o.value for o in Outcome if o.failed)
HEADER = (
    "# parity-gate baseline: known failing cases; the gate blocks only on what got worse.\n"
    "# Refresh with `parity-gate baseline update`; edit `reason` and `link` by hand.\n"
    "# `id` is a case id or a glob of them (`*` matches any characters, `/` included).\n"
)


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

    def matches(self, case_id: str) -> bool:
        return case_id == self.id or (self.is_pattern and matches(case_id, self.id))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "reason": self.reason}
        if self.link:
            d["link"] = self.link
        if self.outcome is not None:
            d["outcome"] = self.outcome.value
        for name in FIGURES:
            value = getattr(self.figures, name)
            if value is not None:
                d[name] = value
        return d


@dataclass(frozen=True)
class Baseline:
    path: str
    entries: tuple[Entry, ...] = ()
    worsen_factor: float | None = None

    def where(self, entry: Entry) -> str:
        return f"{self.path}:{entry.line}" if entry.line else self.path

    def entry_for(self, case_id: str) -> Entry | None:
        """The entry that owns a case: an exact id wins, else the first matching glob."""
        for entry in self.entries:
            if entry.id == case_id:
                return entry
        return next((e for e in self.entries if e.matches(case_id)), None)


@dataclass(frozen=True)
class Change:
    """One thing `baseline update` did, printed so nothing is dropped silently."""

    action: str  # added | removed | updated
    id: str
    why: str

    def __str__(self) -> str:
        return f"{self.action} {self.id}: {self.why}"


# ---------------------------------------------------------------------------
# reading


def default_path(manifest_path: Path) -> Path:
    return manifest_path.parent / DEFAULT_NAME


def find(manifest_path: Path, explicit: Path | None) -> Baseline | None:
    """The baseline in force: `--baseline PATH` (must exist), else the default if present."""
    if explicit is not None:
        return load(explicit)
    path = default_path(manifest_path)
    return load(path) if path.is_file() else None


def load(path: Path) -> Baseline:
    if not path.is_file():
        raise UserError(f"{path}: baseline file not found (expected a YAML file of known "
                        "failures; create it with `parity-gate baseline update`)")
    return parse(path.read_text(encoding="utf-8"), str(path))


def parse(text: str, display: str) -> Baseline:
    """Validate the whole file and report every problem, each as `file:line:col: entry: ...`."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"{display}:{mark.line + 1}:{mark.column + 1}" if mark else display
        raise UserError(f"{where}: invalid YAML: {e.problem} (expected a baseline file with "
                        "a `known_failures` list)") from None
    if data is None:
        return Baseline(display)
    problems: list[str] = []
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise UserError(f"{display}:1:1: expected a mapping with a `known_failures` list")
    keys = _key_marks(root)
    for key in data:
        if key not in TOP_KEYS:
            line, col = keys.get(key, (1, 1))
            problems.append(f"{display}:{line}:{col}: {key}: unknown key{_hint(key, TOP_KEYS)} "
                            f"(expected one of: {', '.join(TOP_KEYS)})")
    if data.get("version", 1) != 1:
        line, col = keys.get("version", (1, 1))
        problems.append(f"{display}:{line}:{col}: version: got {data['version']!r} "
                        "(expected 1)")
    factor = data.get("worsen_factor")
    if factor is not None and (not _is_number(factor) or not 1 <= factor < math.inf):
        line, col = keys.get("worsen_factor", (1, 1))
        problems.append(f"{display}:{line}:{col}: worsen_factor: got {factor!r} "
                        "(expected a number >= 1, e.g. 2.0)")
    entries = _parse_entries(data.get("known_failures"), _value_node(root, "known_failures"),
                             display, keys.get("known_failures", (1, 1)), problems)
    if problems:
        raise UserError(problems)
    return Baseline(display, tuple(entries), float(factor) if factor is not None else None)


def _parse_entries(items: Any, node: yaml.Node | None, display: str, at: tuple[int, int],
                   problems: list[str]) -> list[Entry]:
    if items is None:
        return []
    if not isinstance(items, list) or not isinstance(node, yaml.SequenceNode):
        problems.append(f"{display}:{at[0]}:{at[1]}: known_failures: expected a list of "
                        "entries (`- id: ...` with `reason: ...`)")
        return []
    entries: list[Entry] = []
    first_line: dict[str, int] = {}
    for i, (item, item_node) in enumerate(zip(items, node.value, strict=True)):
        line, col = item_node.start_mark.line + 1, item_node.start_mark.column + 1
        label = f"known_failures[{i}]"
        if not isinstance(item, dict):
            problems.append(f"{display}:{line}:{col}: {label}: expected a mapping with `id` "
                            "and `reason`")
            continue
        if isinstance(item.get("id"), str):
            label += f" ({item['id']})"
        marks = _key_marks(item_node)
        errors = _entry_problems(item, marks)
        for key, message in errors:
            kl, kc = marks.get(key, (line, col))
            problems.append(f"{display}:{kl}:{kc}: {label}: {message}")
        if errors:
            continue
        if item["id"] in first_line:
            problems.append(f"{display}:{line}:{col}: {label}: duplicate id (first listed at "
                            f"line {first_line[item['id']]}; expected each id once)")
            continue
        first_line[item["id"]] = line
        entries.append(Entry(
            id=item["id"],
            reason=item["reason"],
            link=item.get("link"),
            outcome=Outcome(item["outcome"]) if item.get("outcome") is not None else None,
            figures=Figures(*(_as_float(item.get(n)) for n in FIGURES)),
            line=line,
        ))
    return entries


def _entry_problems(item: dict[str, Any], marks: dict[Any, tuple[int, int]]
                    ) -> list[tuple[Any, str]]:
    out: list[tuple[Any, str]] = []
    misspelt: set[str] = set()
    for key in item:
        if key not in ENTRY_KEYS:
            misspelt.update(difflib.get_close_matches(str(key), ENTRY_KEYS, n=1, cutoff=0.6))
            out.append((key, f"unknown key {key!r}{_hint(str(key), ENTRY_KEYS)} "
                             f"(expected one of: {', '.join(ENTRY_KEYS)})"))
    for key, what in (("id", "a case id or glob such as 'mlp/float16/*/cpu'"),
                      ("reason", "a short explanation of why this case fails")):
        value = item.get(key)
        if key not in item and key in misspelt:
            continue  # the typo above already says it
        if not isinstance(value, str) or not value.strip():
            got = "nothing" if key not in item else repr(value)
            out.append((key if key in item else None,
                        f"`{key}` is required: got {got} (expected {what})"))
    link = item.get("link")
    if link is not None and not isinstance(link, str):
        out.append(("link", f"link: got {link!r} (expected a URL string)"))
    outcome = item.get("outcome")
    if outcome is not None and outcome not in FAILING_OUTCOMES:
        out.append(("outcome", f"outcome: got {outcome!r}{_hint(str(outcome), FAILING_OUTCOMES)}"
                               f" (expected a failing outcome: {', '.join(FAILING_OUTCOMES)})"))
    for name in FIGURES:
        value = item.get(name)
        if value is not None and (_as_float(value) is None or _as_float(value) < 0):
            out.append((name, f"{name}: got {value!r} (expected a number >= 0 or .inf)"))
    return out


def _key_marks(node: yaml.Node) -> dict[Any, tuple[int, int]]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: (k.start_mark.line + 1, k.start_mark.column + 1) for k, _ in node.value}


def _value_node(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        return next((v for k, v in node.value if k.value == key), None)
    return None


def _hint(word: str, options: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _as_float(x: Any) -> float | None:
    if _is_number(x):
        return math.inf if math.isnan(x) else float(x)
    if isinstance(x, str) and x.strip().lower() in ("inf", ".inf", "infinity"):
        return math.inf
    return None


# ---------------------------------------------------------------------------
# writing


def dump(baseline: Baseline) -> str:
    doc: dict[str, Any] = {"version": 1}
    if baseline.worsen_factor is not None:
        doc["worsen_factor"] = baseline.worsen_factor
    doc["known_failures"] = [e.to_dict() for e in baseline.entries]
    return HEADER + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)


def update(old: Baseline, run: RunResult, reason: str = TODO_REASON
           ) -> tuple[Baseline, list[Change]]:
    """Refresh from a run: keep reasons and links, record new failures, drop what is gone.

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
    kept: list[Entry] = []
    changes: list[Change] = []
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
        elif any(entry.matches(c.id) for c in run.cases):
            changes.append(Change("removed", entry.id,
                                  "redundant: every case it matches has its own entry"))
        else:
            changes.append(Change("removed", entry.id, "stale: matches no case"))
    for case in unowned:
        entry = record(Entry(case.id, reason), [case])
        kept.append(entry)
        changes.append(Change("added", case.id, f"new failure: {case.outcome.value}"))
    return Baseline(old.path, tuple(kept), old.worsen_factor), changes


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
