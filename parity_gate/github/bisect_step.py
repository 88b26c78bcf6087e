"""The Action's `bisect: on-regression`: when a pull request that changes a requirements or
lock file brings a regression, `parity-gate bisect` names the package and version.

The good set is every changed file's pins at the pull request's base commit, the bad set
the same files as checked out (requirements.txt and constraints.txt together); the
answer lands in results.json, which the summary and the comment are written from. The
decisions are pure; `run` does git and the subprocess (the bisect command sits above this
layer, so it runs as a process).
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from parity_gate.github.inputs import DEFAULT_BUDGET, parse_budget

if TYPE_CHECKING:
    from parity_gate.model.results import RunResult

# What a dependency bump changes (matched on the file's name, any folder).
LOCK_FILES = ("requirements*.txt", "requirements*.in", "constraints*.txt", "*.lock",
              "pylock*.toml", "Pipfile.lock")


def lock_files(changed: list[str]) -> list[str]:
    """The requirements and lock files among a pull request's changed paths."""
    def bumps(path: PurePosixPath) -> bool:
        return any(fnmatch.fnmatchcase(path.name, g) for g in LOCK_FILES) or (
            "requirements" in path.parts[:-1] and path.suffix in (".txt", ".in"))
    return [p for p in changed if bumps(PurePosixPath(p))]


def base_sha(event: Mapping[str, object]) -> str | None:
    """The pull request's base commit from the event payload (None: not a pull request)."""
    pr = event.get("pull_request")
    base = pr.get("base") if isinstance(pr, dict) else None
    sha = base.get("sha") if isinstance(base, dict) else None
    return sha if isinstance(sha, str) and sha else None


def why_not(report: RunResult | None, event: Mapping[str, object],
            changed: list[str] | None, changed_why: str) -> str:
    """Why bisect does not run for this run ("" when it does)."""
    if report is None:
        return "the gate wrote no results"
    blocking = report.gate.blocking if report.gate is not None else []
    if not blocking:
        return "no regression"
    if base_sha(event) is None:
        return "not a pull request event: no base commit to take the good versions from"
    if changed is None:
        return f"cannot tell which files the pull request changes: {changed_why}"
    if not lock_files(changed):
        return "the pull request changes no requirements or lock file"
    return ""


def changed_files(workspace: Path, base: str) -> tuple[list[str] | None, str]:
    """`git diff --name-only BASE...HEAD` in the workspace; None and why when git cannot."""
    try:
        done = subprocess.run(["git", "diff", "--name-only", f"{base}...HEAD"], cwd=workspace,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"git diff failed ({exc})"
    if done.returncode != 0:
        return None, (f"git diff {base[:12]}...HEAD failed ({done.stderr.strip()[:160]}); "
                      "check out with `fetch-depth: 0` so the base commit is there")
    return [ln for ln in done.stdout.splitlines() if ln.strip()], ""


def run(inputs: Mapping[str, str], workspace: Path, results: Path, out: Path,
        env: Mapping[str, str], cache_dir: Path | None = None) -> str:
    """Run `parity-gate bisect` for this pull request if it should, with every changed
    requirements or lock file (as at the base: the good set; as checked out: the bad set);
    returns what happened in one line (printed by the caller; never changes the gate's exit
    code)."""
    from parity_gate.gate.merge import read_results

    try:
        report = read_results(results)[1] if results.is_file() else None
    except Exception:  # an unreadable report: the gate step has said so
        report = None
    event_path = env.get("GITHUB_EVENT_PATH", "")
    try:
        event = json.loads(Path(event_path).read_text()) if event_path else {}
    except (OSError, ValueError):
        event = {}
    base = base_sha(event)
    changed, changed_why = changed_files(workspace, base) if base else (None, "")
    reason = why_not(report, event, changed, changed_why)
    if reason:
        return f"bisect skipped: {reason}"
    assert base is not None and changed is not None
    folder = out / "bisect"
    folder.mkdir(parents=True, exist_ok=True)
    good, bad, new = [], [], []
    for n, path in enumerate(lock_files(changed)):
        old = subprocess.run(["git", "show", f"{base}:{path}"], cwd=workspace,
                             capture_output=True, text=True)
        if old.returncode != 0 or not (workspace / path).is_file():
            new.append(path)  # added (no good pins) or deleted (no bad pins) by the PR
            continue
        # one file per changed path, its name kept (the set reader goes by its suffix)
        kept = folder / "good" / f"{n:02d}" / PurePosixPath(path).name
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(old.stdout)
        good.append(kept)
        bad.append(workspace / path)
    if not good:
        return "bisect skipped: the changed lock files are new (no good versions at the base)"
    if new:
        print(f"parity-gate: bisect: {', '.join(new)} added or removed by the pull request: "
              "not read", file=sys.stderr)
    probes, minutes = parse_budget(inputs.get("bisect_budget") or DEFAULT_BUDGET)
    cmd = [sys.executable, "-m", "parity_gate", "bisect", str(workspace / inputs["manifest"]),
           *[a for f in good for a in ("--good", str(f))],
           *[a for f in bad for a in ("--bad", str(f))],
           "--from", str(results), "--out", str(folder)]
    cmd += ["--max-probes", str(probes)] if probes else []
    cmd += ["--max-minutes", str(minutes)] if minutes else []
    cmd += ["--cache-dir", str(cache_dir)] if cache_dir else []
    if inputs.get("upstream", "off") != "off":
        cmd.append("--upstream")
    done = subprocess.run(cmd, cwd=workspace, env=dict(env))
    return f"bisect finished (exit {done.returncode}); its answer is in {results}"
