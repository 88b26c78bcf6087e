"""The one rule for every file the gate writes or removes, wherever it writes it.

Reports, the journal, repro folders and the export cache follow it alike: a file
is written to a regular file or a new path only, never through a symbolic link
and never over a FIFO or device (as root a rename would replace `/dev/full`);
below a folder the gate owns (the cache, the artifacts folder) no component is
followed through a link either, since a link committed by a pull request
(`.parity-cache/tmp -> ~`) would point its writes and removals anywhere. Removal
never descends through a link: the link itself goes. Text is masked on its way
to disk; a binary file that holds a secret value is withheld (masking its bytes
would break it). Stdlib only: the engine's cache and the worker's repros use it.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

from parity_gate.errors import UserError
from parity_gate.model.secrets import Masker

NO_LINKS = "parity-gate never follows links in its own folders"
STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def source_from(source: str, base: Path | str | None) -> str:
    """A `path:line` named from `base` (the manifest's folder, as a reviewer's checkout has
    it) when the path lies under it; as recorded otherwise (an installed package's line)."""
    path, _, line = source.rpartition(":")
    if not path or base is None:
        return source
    try:
        return f"{Path(path).resolve().relative_to(Path(base).resolve()).as_posix()}:{line}"
    except (ValueError, TypeError):
        return source


def kind_of(path: Path | str, st: os.stat_result | None = None) -> str:
    """What is at `path`, in words ('a symbolic link', 'a FIFO', ...)."""
    st = st or os.lstat(path)
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISREG, "a file")):
        if test(st.st_mode):
            return name
    return "not a regular file"


def target_problem(path: Path) -> str:
    """Why `path` must not be replaced by a file the gate writes ('' when it may)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # a new path (its folder is checked next)
        return ""
    except OSError as err:
        return f"cannot inspect {path}: {err.strerror or err}"
    if stat.S_ISREG(st.st_mode):
        return ""
    return (f"{path} is {kind_of(path, st)} (expected a regular file or a new path; reports "
            "never follow links or replace special files)")


def link_problem(root: Path, path: Path) -> str:
    """Why a folder or file at `path`, below the gate's own folder `root`, is not the gate's
    to use ('' when it is): a component from `root` down (`root` itself may be a link the
    user chose) is a link, or one above `path` is not a folder."""
    here = Path(root)
    parts = Path(path).relative_to(root).parts
    for i, part in enumerate(parts):
        if part in ("", ".", ".."):
            return f"{path}: '{part}' in a path below {root} (expected plain names)"
        here = here / part
        try:
            st = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            return ""
        except OSError as err:
            return f"cannot inspect {here}: {err.strerror or err}"
        if stat.S_ISLNK(st.st_mode):
            return f"{here} is a symbolic link (expected a folder or file; {NO_LINKS})"
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            return f"{here} is {kind_of(here, st)} (expected a folder)"
    return ""


def own_folder_problem(folder: Path, base: Path | None = None, *,
                       inside: bool = False) -> str:
    """Why `folder`, one the gate writes and prunes in (the reports' `--out`, the artifacts
    folder, the export cache's root, the Action's folders), is not where it is meant to
    be ('' when it is).

    The rule: the folder itself is never a symbolic link, whoever chose it. Below `base`
    (the working folder for the command line, the workspace or RUNNER_TEMP for the
    Action) no component is a link either and the path resolves to itself: a checkout can
    commit a link there (`.parity-cache -> ~`), so a link in the repository's tree points
    the gate's writes and removals anywhere. What lies above `base` (a home folder that
    is a link) is the machine's layout, and is followed. A folder outside `base` is the
    user's explicit choice on the command line (`--out /scratch/reports`: its last
    component is checked); with `inside` (the Action, whose folders are all derived from
    the workspace) it is refused."""
    given = Path(os.path.abspath(folder))  # `..` folded: where the name says it is
    start = Path(os.path.abspath(base)) if base is not None else None
    if start is not None and (given == start or start in given.parents):
        parts = given.relative_to(start).parts
    elif inside:
        return f"{folder} is outside {base} (expected a folder inside it)"
    else:
        start, parts = given.parent, (given.name,)
    here = start
    for part in parts:
        here = here / part
        try:
            st = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            break
        except OSError as err:
            return f"cannot inspect {here}: {err.strerror or err}"
        if stat.S_ISLNK(st.st_mode):
            where = "" if here == given else f", on the way to {folder}"
            return (f"{here} is a symbolic link{where} (expected a folder, or a path that does "
                    f"not exist yet; {NO_LINKS})")
    real, meant = os.path.realpath(Path(folder).absolute()), os.path.realpath(start)
    meant = os.path.join(meant, *parts) if parts else meant
    if real != meant:  # `a/link/../b`: a link the folded name hides
        return (f"{folder} resolves to {real} (expected {meant}; {NO_LINKS})")
    return ""


def make_folder(root: Path, folder: Path) -> Path:
    """Create `folder` below `root` without following a link on the way (UserError if one is
    there, before and after: a link swapped in meanwhile is still refused)."""
    for _ in range(2):
        problem = link_problem(root, folder)
        if problem:
            raise UserError(problem)
        folder.mkdir(parents=True, exist_ok=True)
    if not folder.is_dir():
        raise UserError(f"{folder} is {kind_of(folder)} (expected a folder)")
    return folder


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


def atomic_write(path: Path, data: bytes | str, *, binary: bool = False,
                 masker: Masker | None = None) -> str:
    """Replace `path` with `data` in one rename, masked; the file gets the permissions an
    ordinary `open()` would give it under the user's umask (mkstemp alone makes them 0600).
    A link or special file at `path` is a UserError, left untouched. A `binary` file that
    holds a secret is not written: returns why ('' when written)."""
    masker = Masker() if masker is None else masker
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if binary:
        if masker.holds(raw):
            return withheld_note(path)
    else:
        raw = masker.data(raw)
    _replace(path, lambda fh: fh.write(raw))
    return ""


def copy_file(source: Path | str, path: Path, masker: Masker | None = None) -> str:
    """Copy a binary file (an external-data model's weights) to `path` under the same rule
    as `atomic_write`; returns why it was withheld ('' when copied)."""
    masker = Masker() if masker is None else masker
    if masker:
        with open(source, "rb") as fh:  # scanned in blocks that overlap by a secret's length
            keep, block = b"", fh.read(1 << 24)
            while block:
                if masker.holds(keep + block):
                    return withheld_note(path)
                keep, block = block[-len(masker.values[0]):], fh.read(1 << 24)
    with open(source, "rb") as src:
        _replace(path, lambda fh: shutil.copyfileobj(src, fh, 1 << 20))
    return ""


def withheld_note(path: Path) -> str:
    return (f"{path.name} withheld: it holds the value of a secret (a token in a tensor or "
            "node name, say); the reports show it as ***")


def _replace(path: Path, fill: Callable[[BinaryIO], object]) -> None:
    problem = target_problem(path)
    if problem:
        raise UserError(problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        problem = target_problem(path)  # made meanwhile: still never replaced
        if problem:
            raise UserError(problem)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_step_summary(text: str, env: Mapping[str, str] | None = None) -> str:
    """Append (masked) to GitHub's job summary file, if the job has one; returns why not
    ('' when done). A folder, link or special file there is refused like a report's path."""
    path = (os.environ if env is None else env).get(STEP_SUMMARY)
    if not path:
        return ""
    problem = target_problem(Path(path))
    if problem:
        return f"{STEP_SUMMARY}: {problem}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(Masker().text(text))
    except OSError as err:
        return (f"{STEP_SUMMARY}: cannot append to {path}: {err.strerror or err} (expected "
                "the job summary file GitHub Actions sets)")
    return ""


def remove(path: Path) -> None:
    """Remove a file or a folder's tree without descending through a link: a link (at `path`
    or anywhere inside) is removed itself, never what it points to."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)  # fd-based on Linux: links inside are unlinked
    else:
        path.unlink(missing_ok=True)
