"""Write every report atomically, to regular files only, with the user's umask, masked.

An interrupt never leaves half a file (one rename); a symlink, a FIFO or a
device at a report's path is refused, never followed or replaced (as root a
rename would replace `/dev/full`); and the output paths are checked before any
work, so a bad `--out` costs seconds, not the whole run.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from parity_gate.errors import UserError
from parity_gate.model.results import RunResult
from parity_gate.report import junit, markdown
from parity_gate.report.html import render as render_html
from parity_gate.report.locate import locate
from parity_gate.report.secrets import Masker

NAMES = ("json", "junit", "summary", "html")


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
    if paths.out is not None and os.path.lexists(paths.out) and not paths.out.is_dir():
        raise UserError(f"--out: {paths.out} is {_kind(paths.out)} (expected a folder for "
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
        return f"{up} is {_kind(up)} (expected a folder {purpose})"
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


def target_problem(path: Path) -> str:
    """Why `path` must not be replaced by a report ('' when it may)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # a new path (its folder is checked next)
        return ""
    except OSError as err:
        return f"cannot inspect {path}: {err.strerror or err}"
    if stat.S_ISREG(st.st_mode):
        return ""
    return (f"{path} is {_kind(path, st)} (expected a regular file or a new path; reports "
            "never follow links or replace special files)")


def _kind(path: Path, st: os.stat_result | None = None) -> str:
    st = st or os.lstat(path)
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISREG, "a file")):
        if test(st.st_mode):
            return name
    return "not a regular file"


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: the classic read-by-setting, restored at once
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one rename; the file gets the permissions an ordinary
    `open()` would give it under the user's umask (mkstemp alone makes them 0600).
    A link or special file at `path` is a UserError, left untouched."""
    problem = target_problem(path)
    if problem:
        raise UserError(problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        problem = target_problem(path)  # made meanwhile: still never replaced
        if problem:
            raise UserError(problem)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def masked(run: RunResult, masker: Masker | None = None) -> RunResult:
    """A copy of `run` with every secret value replaced (the run itself when there is none)."""
    masker = Masker() if masker is None else masker
    if not masker:
        return run
    return RunResult.from_dict(masker.tree(run.to_dict()), "masked results")


def run_json(run: RunResult) -> bytes:
    masker = Masker()
    doc = masker.tree(run.to_dict())
    return masker.data(json.dumps(doc, indent=1, allow_nan=False).encode("utf-8"))


def write_all(run: RunResult, paths: ReportPaths, summary: str | None = None) -> str:
    """Write the requested reports; returns the markdown (also used for the step summary).

    `summary` replaces the default markdown (the op sweep writes its findings table).
    One report that cannot be written does not stop the others; the problems are raised
    together at the end.
    """
    masker = Masker()
    run = masked(run, masker)
    summary = masker.text(markdown.render(run) if summary is None else summary)
    where = locate(run)
    writers = ((paths.json, lambda: run_json(run)), (paths.junit, lambda: junit.to_xml(run, where)),
               (paths.summary, lambda: summary.encode("utf-8")),
               (paths.html, lambda: render_html(run, where).encode("utf-8")))
    problems: list[str] = []
    for path, render in writers:
        if path is None:
            continue
        try:
            atomic_write(path, masker.data(render()))
        except UserError as err:
            problems += err.problems
        except OSError as err:
            problems.append(f"{path}: cannot write the report: {err.strerror or err}")
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a", encoding="utf-8") as fh:
            fh.write(markdown.trim(summary) + "\n")
    if problems:
        raise UserError(problems)
    return summary
