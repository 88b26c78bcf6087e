"""The journal: every finished case on disk the moment it finishes.

`OUT/journal.jsonl` is one JSON object a line, appended and fsync'd as the run
goes: a header (the run's metadata, the planned case count and ids, the gate's
policy), then `{"case": ...}` and `{"finding": ...}` lines, and an `{"end": ...}`
line once the reports are written. Whatever kills the gate (SIGKILL included),
the finished cases are readable; `parity-gate report --from-journal` turns them
into the reports, marked interrupted with planned vs finished counts. A case
that appears twice (its localisation came later) counts once, the last line;
but a later line never turns a failure into a pass (only the localisation's
`artefacts: pass` settlement may), and a case the header did not plan is left
out: both are flagged in the report as findings. Every line is masked like the
reports. A run holds a lock on its out folder (`OUT/.parity-gate.lock`: the `filelock`
library's native lock, flock on POSIX; removed at the end) from its first look at the
journal to its end, so a second run into the same folder is refused instead of moving
the live run's journal aside. A journal the disk refuses (ENOSPC) is said once and the
run goes on, its results in memory for the reports; the run then ends with that line,
exit 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock

from parity_gate.errors import UserError
from parity_gate.gate.jsonfile import loads, read_text
from parity_gate.model.findings import Finding
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.report.secrets import Masker
from parity_gate.report.write import target_problem

VERSION = 1
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
WHAT = "a parity-gate journal (OUT/journal.jsonl, one JSON object a line)"
LOCK = ".parity-gate.lock"
_held: dict[Path, filelock.BaseFileLock] = {}  # out folder → its lock, held by this process


@dataclass
class Replay:
    """What a journal holds: the run so far, the gate's policy, the planned case ids."""

    run: RunResult
    policy: dict[str, Any] = field(default_factory=dict)
    universe: list[str] = field(default_factory=list)
    ended: bool = False  # the run wrote its reports (an `end` line)


class Journal:
    """Appends records to the journal; each line is written whole and fsync'd."""

    def __init__(self, path: Path, run: RunResult, policy: dict[str, Any],
                 universe: list[str]) -> None:
        self.path = path
        self.masker = Masker()
        self.t0 = time.monotonic()
        problem = target_problem(path)
        if problem:
            raise UserError(f"--out: {problem}")
        path.parent.mkdir(parents=True, exist_ok=True)
        hold_lock(path.parent)
        self.problem = ""  # set when the disk refused a line: the journal stops there
        # O_NOFOLLOW: never through a link; O_NONBLOCK: a FIFO swapped in fails, not hangs.
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                          | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o666)
        head = run.to_dict()
        for key in ("cases", "findings", "verdict", "gate"):
            head.pop(key, None)
        self._line({"journal": VERSION, "run": head, "policy": policy, "universe": universe})
        if self.problem:  # no room for its first line: nothing has run yet
            self.close()
            raise UserError(self.problem)

    def case(self, case: CaseResult) -> None:
        self._line({"case": case.to_dict(), "t": round(time.monotonic() - self.t0, 3)})

    def finding(self, finding: Finding) -> None:
        self._line({"finding": finding.to_dict()})

    def end(self, run: RunResult) -> None:
        """The reports are written: the last line. A journal the disk cut short gets none
        (it lacks cases) and its problem is the run's error (exit 2)."""
        if self.problem:
            self.close()
            raise UserError(self.problem)
        self._line({"end": {"interrupted": run.interrupted, "duration_s": run.duration_s}})

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        release_lock(self.path.parent)

    def _line(self, doc: dict[str, Any]) -> None:
        if self.problem:
            return
        data = (json.dumps(self.masker.tree(doc), allow_nan=False, separators=(",", ":"))
                + "\n").encode("utf-8")
        view = memoryview(self.masker.data(data))
        # A signal mid-line would tear it and the lines after it; hold them meanwhile.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            while view:
                view = view[os.write(self.fd, view):]
            os.fsync(self.fd)
        except OSError as err:  # a full disk: the run's results stay in memory for the reports
            self.problem = (f"--out: cannot write {self.path}: {err.strerror or err} (expected "
                            "a folder with room for the journal and the reports)")
            print(f"parity-gate: {self.problem}; the journal stops here, the run goes on",
                  file=sys.stderr)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)


def hold_lock(out: Path) -> None:
    """Lock the out folder for this run (a non-blocking exclusive lock on
    OUT/.parity-gate.lock, released when the journal closes or the process ends, however it
    ends): another live run there is a UserError naming it, before its journal is touched.
    The file holds the holder's pid and is removed on release; a lock that could not be
    taken because its file was removed meanwhile is taken again on the new one."""
    key = out.absolute()
    if key in _held:
        return
    path = out / LOCK
    while True:
        problem = target_problem(path)
        if problem:
            raise UserError(f"--out: {problem}")
        lock = filelock.FileLock(path, timeout=0, thread_local=False)
        try:
            lock.acquire()
            break
        except filelock.Timeout:
            if not os.path.lexists(path):
                continue  # its run released and removed it meanwhile: lock the one there now
            other = _holder(path)
            raise UserError(f"--out: {out} is in use by another parity-gate run"
                            f"{f' (pid {other})' if other.isdigit() else ''} (expected one run "
                            "per out folder: give this one its own --out, or wait for that one)"
                            ) from None
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)
    _held[key] = lock


def _holder(path: Path) -> str:
    """The pid a lock file's holder wrote into it ('' if none can be read)."""
    try:
        with path.open("rb") as fh:
            return fh.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


def release_lock(out: Path) -> None:
    lock = _held.pop(out.absolute(), None)
    if lock is not None:
        # Still locked: no other run holds this file. (Windows removes it on release.)
        with contextlib.suppress(FileNotFoundError, PermissionError):
            (out / LOCK).unlink()
        lock.release()


def keep_unfinished(path: Path) -> Path | None:
    """An earlier run's journal that never got its reports is moved aside, not overwritten;
    returns where it went. Takes the out folder's lock first: a journal a live run is
    writing is never moved (that run is named instead, UserError)."""
    if path.parent.is_dir():
        hold_lock(path.parent)
    if not path.is_file() or path.is_symlink():
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - 4096))
            tail = fh.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return None
    if tail and tail[-1].startswith('{"end"'):
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(path.stat().st_mtime))
    kept = path.with_name(f"journal-{stamp}.interrupted.jsonl")
    os.replace(path, kept)
    return kept


def read(path: Path) -> Replay:
    """The run a journal describes, or a located UserError. A torn last line (the gate
    was killed mid-write) is dropped; the run is interrupted unless the journal ended
    complete or holds every planned case."""
    docs = _documents(path)
    head = docs[0][1]
    if head.get("journal") != VERSION or not isinstance(head.get("run"), dict):
        raise UserError(f"{path}:1: not a parity-gate journal header (expected "
                        f'{{"journal": {VERSION}, "run": ...}} first)')
    run = RunResult.from_dict({**head["run"], "cases": [], "findings": []}, f"{path}:1")
    universe = [str(u) for u in head.get("universe") or []]
    ended, t = _replay(path, docs[1:], set(universe), run)
    planned = run.planned if run.planned is not None else len(run.cases)
    if ended is not None:
        run.interrupted = bool(ended.get("interrupted"))
        run.duration_s = float(ended.get("duration_s") or t)
    else:
        run.interrupted = sum(not c.probe for c in run.cases) < planned
        run.duration_s = t
    policy = head.get("policy") if isinstance(head.get("policy"), dict) else {}
    return Replay(run, policy or {}, universe, ended is not None)


def _documents(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every line's JSON object with its line number. Only the last line may be torn
    (the gate killed mid-write: every complete line before it counts); any other bad
    line is a located UserError."""
    lines = read_text(path, WHAT).split("\n")
    if not lines or not lines[0].strip():
        raise UserError(f"{path}:1: empty journal (expected {WHAT})")
    last = max(i for i, line in enumerate(lines) if line.strip())
    docs: list[tuple[int, dict[str, Any]]] = []
    for i, text in enumerate(lines):
        if not text.strip():
            continue
        try:
            doc = loads(text, str(path), WHAT, first_line=i + 1)
        except UserError:
            if i == last and i > 0:
                break  # torn by the kill: every complete line before it counts
            raise
        if not isinstance(doc, dict):
            raise UserError(f"{path}:{i + 1}: expected a JSON object (expected {WHAT})")
        docs.append((i + 1, doc))
    return docs


def _replay(path: Path, docs: list[tuple[int, dict[str, Any]]], planned_ids: set[str],
            run: RunResult) -> tuple[dict[str, Any] | None, float]:
    """The body's case, finding and end lines replayed into `run` (its cases and
    findings); returns the end line (None: the run never ended) and the last case's
    time. A case the header did not plan, or one whose outcome a later line changes,
    is flagged as a journal finding (the failure is kept)."""
    cases: dict[str, CaseResult] = {}
    first_line: dict[str, int] = {}  # the line each kept case came from
    ended: dict[str, Any] | None = None
    flags: list[Finding] = []
    t = 0.0
    for line, doc in docs:
        where = f"{path}:{line}"
        if "case" in doc:
            case = _record(CaseResult, doc["case"], where)
            t = float(doc.get("t") or t)
            if planned_ids and case.id not in planned_ids and not case.probe:  # probes: extra
                flags.append(_flag(case, f"{where}: case {case.id} was not planned by this run "
                                   "(not among the header's planned ids); left out"))
                continue
            earlier = cases.get(case.id)
            if earlier is not None and not _may_follow(earlier, case):
                flags.append(_flag(case, f"{where}: case {case.id} again, now "
                                   f"{case.outcome.value} where line {first_line[case.id]} said "
                                   f"{earlier.outcome.value}; the failure is kept"))
                if earlier.failed:
                    continue
            cases[case.id] = case
            first_line[case.id] = line
        elif "finding" in doc:
            finding = _record(Finding, doc["finding"], where)
            if finding not in run.findings:
                run.findings.append(finding)
        elif "end" in doc and isinstance(doc["end"], dict):
            ended = doc["end"]
        else:
            raise UserError(f"{where}: unknown journal line with keys {sorted(doc)} "
                            "(expected case, finding or end)")
    run.cases = list(cases.values())
    run.findings += [f for f in flags if f not in run.findings]
    return ended, t


def _may_follow(earlier: CaseResult, later: CaseResult) -> bool:
    """A case's later line may add to it (its localisation) but not change its outcome; the
    one exception is the manifest's `localise.artefacts: pass`, which settles a mismatch
    that localisation found to be a tolerance artefact."""
    if later.outcome is earlier.outcome:
        return True
    loc = later.localisation
    return (earlier.outcome is Outcome.MISMATCH and later.outcome is Outcome.PASS
            and loc is not None and loc.artefact is True)


def _flag(case: CaseResult, message: str) -> Finding:
    return Finding(module=case.key.module, kind="journal", message=message, severity="error")


def _record(cls: Any, data: Any, where: str) -> Any:
    from pydantic import ValidationError

    try:
        return cls.from_dict(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{where}: {key}: {first['msg']} (expected {WHAT})") from None
