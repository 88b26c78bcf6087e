"""`parity-gate merge`: shard JSON reports → one RunResult, after checking they belong together.

Merging results of different manifests or tool versions, or with a shard
missing or run twice, would report a verdict about cases nobody ran, so each
of those is a user error naming the file. The checks and the merge are pure;
`read_results` is the only reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity_gate.errors import UserError
from parity_gate.gate.jsonfile import read_json
from parity_gate.model.results import RunResult
from parity_gate.plan.sharding import Shard

Loaded = tuple[str, RunResult]  # display path, result


RESULTS = "the JSON report of `parity-gate run`"


def read_results(path: Path) -> Loaded:
    """A `results.json` written by `parity-gate run` or `merge`, or a one-line UserError
    (missing, a folder, binary, bad UTF-8, control characters, duplicate keys, invalid
    JSON, a wrong-typed field with its key path)."""
    if not os.path.lexists(path):
        raise UserError(f"{path}: results file not found (expected {RESULTS}, e.g. "
                        "parity-reports/results.json)")
    raw = read_json(path, RESULTS)
    if not isinstance(raw, dict) or "cases" not in raw or "schema_version" not in raw:
        raise UserError(f"{path}: not a parity-gate results file (expected a JSON object "
                        "with `schema_version` and `cases`)")
    return str(path), RunResult.from_dict(raw, str(path))


def problems(loaded: list[Loaded]) -> list[str]:
    """Why these files cannot be merged into one run (empty list: they can)."""
    out: list[str] = []
    first_path, first = loaded[0]
    for path, run in loaded[1:]:
        if run.manifest.get("sha256") != first.manifest.get("sha256"):
            what, expected = (("op plan", "one sweep's shards, planned from the same variants "
                               "(the same torch and OpInfo build)")
                              if first.manifest.get("command") == "ops" else
                              ("manifest", "shards of one run of the same manifest"))
            out.append(f"{path}: {what} sha256 {_short(run.manifest.get('sha256'))} differs "
                       f"from {first_path}'s {_short(first.manifest.get('sha256'))} (expected "
                       f"{expected})")
        if run.tool_version != first.tool_version:
            out.append(f"{path}: parity-gate {run.tool_version or '?'} differs from "
                       f"{first_path}'s {first.tool_version or '?'} (expected one tool version)")
    out += _shard_problems(loaded)
    if out:
        return out
    seen: dict[str, str] = {}
    for path, run in loaded:
        within: dict[str, int] = {}
        for i, case in enumerate(run.cases):
            if case.id in within:  # the last would win in the gate: refused, never chosen
                out.append(f"{path}: cases[{i}]: case {case.id} again (also cases"
                           f"[{within[case.id]}], {run.cases[within[case.id]].outcome.value} "
                           f"there, {case.outcome.value} here; expected each case once)")
                break
            within[case.id] = i
            if case.id in seen and seen[case.id] != path:
                out.append(f"{path}: case {case.id} is also in {seen[case.id]} (expected each "
                           "case in exactly one shard)")
                break
            seen[case.id] = path
        else:
            planned = [c for c in run.cases if not c.probe]  # probes are extra, by design
            if run.planned is not None and len(planned) > run.planned:
                out.append(f"{path}: {len(planned)} cases where the run planned "
                           f"{run.planned} (expected no case the run did not plan)")
    return out


def _shard_problems(loaded: list[Loaded]) -> list[str]:
    shards: dict[str, Shard | None] = {}
    for path, run in loaded:
        try:
            shards[path] = Shard.parse(run.shard) if run.shard else None
        except UserError:
            return [f"{path}: shard {run.shard!r} is not K/N"]
    unsharded = [p for p, s in shards.items() if s is None]
    if unsharded:
        if len(loaded) == 1:
            return []
        return [f"{unsharded[0]}: not a shard result (expected results of "
                "`parity-gate run --shard K/N`, one per shard)"]
    out: list[str] = []
    counts = {s.count for s in shards.values() if s}
    if len(counts) > 1:
        path, odd = next((p, s) for p, s in shards.items() if s and s.count != min(counts))
        return [f"{path}: shard {odd} is from a split into {odd.count} "
                f"(expected every file from the same --shard K/{min(counts)} matrix)"]
    count = counts.pop()
    by_index: dict[int, str] = {}
    for path, s in shards.items():
        assert s is not None
        if s.index in by_index:
            out.append(f"{path}: duplicate shard {s} (also in {by_index[s.index]}; expected "
                       "each shard once)")
        by_index.setdefault(s.index, path)
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in by_index]
    if missing:
        got = sorted((s for s in shards.values() if s), key=lambda s: s.index)
        out.append(f"missing shard{'s' if len(missing) > 1 else ''} {_few(missing)} "
                   f"(got {_few([str(s) for s in got])} from {_few(list(shards))}; "
                   f"expected all {count})")
    return out


def merge_runs(runs: list[RunResult]) -> RunResult:
    """One run: all cases, findings once each, the earliest start, the longest shard time."""
    first = runs[0]
    findings = []
    for run in runs:
        findings += [f for f in run.findings if f not in findings]
    return RunResult(
        cases=sorted((c for run in runs for c in run.cases), key=lambda c: c.key.sort_key),
        findings=findings,
        versions=first.versions,
        manifest=first.manifest,
        tool_version=first.tool_version,
        started_at=min((r.started_at for r in runs if r.started_at), default=""),
        duration_s=max(r.duration_s for r in runs),
        interrupted=any(r.interrupted for r in runs),
        shard=None,
        # Planned across shards: an interrupted shard's unfinished cases still count.
        planned=sum(r.planned if r.planned is not None else len(r.cases) for r in runs),
    )


def merge_files(paths: list[Path]) -> tuple[RunResult, list[Loaded]]:
    """Read, check and merge; also returns the shards (with their display paths)."""
    loaded = [read_results(p) for p in paths]
    found = problems(loaded)
    if found:
        raise UserError(found)
    return merge_runs([run for _, run in loaded]), loaded


@dataclass(frozen=True)
class Recorded:
    """The gate settings the shards ran with: merge's defaults, never its rulings.

    A shard's rulings (which case is known, which blocks) are claims a merge must not
    take on trust: a results file edited or written by an older tool could rule a failing
    case away. Only the settings are taken, and every case is re-decided from its outcome
    against the baseline these name.
    """

    baseline: str | None = None
    fail_on: str | None = None
    strict: bool | None = None
    worsen_factor: float | None = None
    allow_all_skipped: bool | None = None
    stale: frozenset[str] | None = None  # entries every shard found stale (None: unknown)


def recorded(loaded: list[Loaded]) -> Recorded:
    """The shards' common gate settings, or a UserError naming the shard that differs."""
    gated = [(path, run.gate) for path, run in loaded if run.gate is not None]
    if not gated:
        return Recorded()
    first_path, first = gated[0]
    for path, gate in gated[1:]:
        for key in ("baseline", "fail_on", "strict", "worsen_factor", "allow_all_skipped"):
            if getattr(gate, key) != getattr(first, key):
                raise UserError(f"{path}: gate.{key} {getattr(gate, key)!r} differs from "
                                f"{first_path}'s {getattr(first, key)!r} (expected the shards "
                                f"of one matrix to run with the same gate settings)")
    stale = frozenset.intersection(*(frozenset(s.entry for s in g.stale) for _, g in gated)) \
        if len(gated) == len(loaded) else None
    return Recorded(first.baseline, first.fail_on, first.strict, first.worsen_factor,
                    first.allow_all_skipped, stale)


def recorded_baseline(loaded: list[Loaded], settings: Recorded) -> Path | None:
    """The baseline file the shards were gated against, which must still be readable here."""
    if settings.baseline is None:
        return None
    path = Path(settings.baseline)
    if not path.is_file():
        raise UserError(f"{loaded[0][0]}: gate.baseline: the shards were gated against "
                        f"{settings.baseline}, which is not a file here (expected it at that "
                        "path, as the shards read it, or --baseline PATH; the shards' own "
                        "rulings are never reused)")
    return path


def _few(items: list[str], shown: int = 6) -> str:
    """A list that stays one readable line: a 160-shard matrix names six and counts the rest."""
    rest = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {rest} more" if rest > 0 else "")


def _short(sha: Any) -> str:
    return str(sha)[:12] if sha else "(none)"
