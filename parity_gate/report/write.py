"""Write every report atomically, to regular files only, with the user's umask, masked.

An interrupt never leaves half a file (one rename); a symlink, a FIFO or a
device at a report's path is refused, never followed or replaced (as root a
rename would replace `/dev/full`); and the output paths are checked before any
work, so a bad `--out` costs seconds, not the whole run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from parity_gate.errors import UserError
from parity_gate.model.files import (
    append_step_summary,
    atomic_write,
    current_umask,
    kind_of,
    own_folder_problem,
    target_problem,
)
from parity_gate.model.results import RunResult
from parity_gate.model.text import clean_tree, run_url
from parity_gate.report import junit, markdown
from parity_gate.report.html import render as render_html
from parity_gate.report.locate import locate
from parity_gate.report.secrets import Masker

NAMES = ("json", "junit", "summary", "html")
__all__ = ["ReportPaths", "atomic_write", "check_outputs", "current_umask", "folder_problem",
           "masked", "run_json", "target_problem", "write_all"]


@dataclass
class ReportPaths:
    json: Path | None = None
    junit: Path | None = None
    summary: Path | None = None
    html: Path | None = None
    out: Path | None = None  # `--out`: the folder of every path not given its own flag
    given: tuple[str, ...] = ()  # names (`json`, ...) given by their own flag

    @classmethod
    def in_folder(cls, out: Path, json: Path | None = None, junit: Path | None = None,
                  summary: Path | None = None, html: Path | None = None) -> ReportPaths:
        """`--out DIR` with the standard names, each overridable by its own flag."""
        given = tuple(n for n, p in zip(NAMES, (json, junit, summary, html), strict=True)
                      if p is not None)
        return cls(json or out / "results.json", junit or out / "junit.xml",
                   summary or out / "summary.md", html or out / "report.html", out, given)

    def written(self) -> list[Path]:
        return [p for p in (self.json, self.junit, self.summary, self.html) if p is not None]

    @property
    def journal(self) -> Path | None:
        """`OUT/journal.jsonl`: the finished cases, appended as each one completes."""
        return self.out / "journal.jsonl" if self.out is not None else None

    def labelled(self, journal: bool = True) -> list[tuple[str, Path]]:
        """(the flag that chose it, path) for each output."""
        out = [(f"--{n}" if n in self.given else "--out", p)
               for n, p in zip(NAMES, (self.json, self.junit, self.summary, self.html),
                               strict=True)
               if p is not None]
        return out + ([("--out", self.journal)] if journal and self.journal is not None else [])


def check_outputs(paths: ReportPaths, journal: bool = True) -> None:
    """Every report (and the journal) can be written: folders exist or can be made and
    are writable, no target is anything but a regular file. Creates the folders; one
    located line per problem."""
    linked = own_folder_problem(paths.out, Path.cwd()) if paths.out is not None else ""
    if linked:
        raise UserError(f"--out: {linked}")
    if paths.out is not None and os.path.lexists(paths.out) and not paths.out.is_dir():
        raise UserError(f"--out: {paths.out} is {kind_of(paths.out)} (expected a folder for "
                        "the reports, or a path that does not exist yet)")
    labelled = paths.labelled(journal)
    # targets first: a refused symlink or device leaves no folder behind either
    problems = [f"{flag}: {problem}" for flag, path in labelled
                if (problem := target_problem(path))]
    seen: set[Path] = set()
    if not problems:
        problems = [f"{flag}: {problem}" for flag, path in labelled
                    if (problem := folder_problem(path.parent, seen))]
    if problems:
        raise UserError(list(dict.fromkeys(problems)))


def folder_problem(folder: Path, seen: set[Path] | None = None,
                   purpose: str = "to write the reports in") -> str:
    """Why `folder` cannot be made and written ('' when it can): checked before any work."""
    seen = set() if seen is None else seen
    if folder in seen:
        return ""
    seen.add(folder)
    up = folder
    while not os.path.lexists(up) and up != up.parent:
        up = up.parent
    if os.path.lexists(up) and not up.is_dir():
        return f"{up} is {kind_of(up)} (expected a folder {purpose})"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".parity-gate-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        what = "create" if not folder.is_dir() else "write in"
        return (f"cannot {what} {folder}: {err.strerror or err} (expected a folder this user "
                "can write)")
    return ""


def masked(run: RunResult, masker: Masker | None = None) -> RunResult:
    """A copy of `run` with every secret value replaced (the run itself when there is none)."""
    masker = Masker() if masker is None else masker
    if not masker:
        return run
    return RunResult.from_dict(masker.tree(run.to_dict()), "masked results")


def run_json(run: RunResult) -> bytes:
    masker = Masker()
    doc = masker.tree(clean_tree(run.to_dict()))
    return masker.data(json.dumps(doc, indent=1, allow_nan=False).encode("utf-8"))


def write_all(run: RunResult, paths: ReportPaths, summary: str | None = None) -> str:
    """Write the requested reports; returns the markdown (also used for the step summary).

    `summary` replaces the default markdown (the op sweep writes its findings table).
    One report that cannot be written does not stop the others: the small ones go first
    (on a filling disk they still fit), each failure is one line naming its flag and path,
    raised together at the end; when the summary file itself could not be written, the
    summary goes to stdout, so a full disk never loses the run's results silently.
    """
    masker = Masker()
    run = masked(run, masker)
    summary = masker.text(markdown.render(run, run_url=run_url(os.environ))
                          if summary is None else summary)
    where = locate(run)
    renders = {"summary": lambda: summary.encode("utf-8"), "json": lambda: run_json(run),
               "junit": lambda: junit.to_xml(run, where),
               "html": lambda: render_html(run, where).encode("utf-8")}
    flags = dict((path, flag) for flag, path in paths.labelled(journal=False))
    problems: list[str] = []
    unwritten: list[str] = []
    for name in ("summary", "json", "junit", "html"):  # smallest first
        path = getattr(paths, name)
        if path is None:
            continue
        try:
            atomic_write(path, renders[name](), masker=masker)
        except UserError as err:
            problems += err.problems
            unwritten.append(name)
        except OSError as err:
            problems.append(write_problem(flags.get(path, f"--{name}"), path, err))
            unwritten.append(name)
    problem = append_step_summary(markdown.trim(summary) + "\n")
    if problem:
        problems.append(problem)
    if "summary" in unwritten:
        _to_stdout(summary)
    if problems:
        raise UserError(problems)
    return summary


def write_problem(flag: str, path: Path, err: OSError) -> str:
    """One line for a report the disk refused: the flag that chose the path, the path, why."""
    return (f"{flag}: cannot write {path}: {err.strerror or err} (expected room for the "
            "reports there; the smaller ones are written first)")


def _to_stdout(summary: str) -> None:
    """The summary, where the disk had no room for it."""
    try:
        sys.stdout.write(summary + "\n")
        sys.stdout.flush()
    except OSError:
        pass
