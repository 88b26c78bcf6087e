"""The export cache's store: a folder of immutable, digest-checked entries under
`.parity-cache/`. What an entry holds and what its key is a digest of is the caller's
(engine.cached: ONNX translations keyed by the captured program); this module knows files.

Entries are written into a private temporary folder and renamed into place,
so a reader sees a whole entry or none; two runs that share the folder at once
at worst both build the same entry, and one rename wins. Every file of an
entry is listed with its SHA-256 in `entry.json`; a file that is missing, cut
short or changed makes the entry a miss, and it is removed and rebuilt.

Nothing below the cache's folder is followed through a link (model.files' one
rule): a link where a folder or file of the layout belongs is never read, written
or descended into, and prune removes the link itself; an entry naming a file
outside itself (`../x`) is never read. An entry of a newer format is left for the
version that wrote it. What an entry stores is masked like the reports; an entry
whose files hold a secret value is not stored at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parity_gate.errors import UserError
from parity_gate.model.files import NO_LINKS, copy_file, link_problem, remove
from parity_gate.model.secrets import Masker

DEFAULT_DIR = ".parity-cache"
FORMAT = 1  # bump when the layout of an entry changes


def key_of(*parts: Any) -> str:
    """A stable key for JSON-able parts (dicts sorted, floats by repr)."""
    blob = json.dumps([FORMAT, *parts], sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    """A verified cache entry: its folder and the JSON it was stored with."""

    folder: Path
    meta: dict[str, Any]

    def file(self, name: str) -> Path:
        """One of the entry's own (digest-checked) files or its entry.json; KeyError for
        any other name."""
        if name != "entry.json" and name not in self.meta["files"]:
            raise KeyError(name)
        return self.folder / name


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    stored: int = 0
    newer: int = 0  # entries of a newer format, left for the version that wrote them
    withheld: list[str] = field(default_factory=list)  # why entries were not stored


class ExportCache:
    """A folder of immutable entries (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.stats = CacheStats()
        self.unlinked: list[Path] = []  # links prune found in the layout and removed

    def usable(self) -> str:
        """Why this folder cannot hold a cache ("" when it can): checked once per worker,
        so an unwritable cache costs speed, never a result."""
        try:
            with tempfile.NamedTemporaryFile(dir=self._staging_root()):
                pass
        except UserError as exc:
            return str(exc)
        except OSError as exc:
            return f"{self.root}: {exc.strerror or exc}"
        return ""

    def _staging_root(self) -> Path:
        """`tmp`, where entries are built: made here, never through a link."""
        tmp = self.root / "tmp"
        problem = link_problem(self.root, tmp)
        if problem:
            raise UserError(problem)
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp

    def _folder(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def get(self, kind: str, key: str) -> Entry | None:
        """The entry if it is whole and unchanged; a damaged one is removed (a miss), one of
        a newer format is left alone (a miss too)."""
        folder = self._folder(kind, key)
        meta_path = folder / "entry.json"
        if link_problem(self.root, meta_path) or not _regular(meta_path):
            self.stats.misses += 1
            if os.path.lexists(folder) and not link_problem(self.root, folder.parent):
                self.stats.corrupt += 1
                _remove(folder)  # a link or junk where the entry belongs: the link itself
            return None
        try:
            meta = json.loads(_read(meta_path).decode("utf-8"))
            newer = isinstance(meta.get("format"), int) and meta["format"] > FORMAT
            ok = not newer and meta.get("format") == FORMAT and meta.get("key") == key and all(
                _own(name) and _regular(folder / name) and file_sha256(folder / name) == digest
                for name, digest in meta["files"].items())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            newer, ok = False, False
        if newer:  # written by a later parity-gate: its entry, to keep
            self.stats.newer += 1
            self.stats.misses += 1
            return None
        if not ok:
            self.stats.corrupt += 1
            self.stats.misses += 1
            _remove(folder)
            return None
        self.stats.hits += 1
        os.utime(meta_path, follow_symlinks=False)  # last use, for pruning
        return Entry(folder, meta)

    def put(self, kind: str, key: str, files: Mapping[str, bytes | Path],
            info: Mapping[str, Any] | None = None) -> Entry | None:
        """Store `files` (bytes, or a file to copy: an external-data model) atomically; if
        another run stored the key first, theirs is kept. `info` is masked; None (and the
        reason in `stats.withheld`) when a file holds a secret value or a link is in the way."""
        final = self._folder(kind, key)
        masker = Masker()
        try:
            problem = link_problem(self.root, final)
            if problem:
                raise UserError(problem)
            staging = Path(tempfile.mkdtemp(prefix=f"{key[:12]}-", dir=self._staging_root()))
        except UserError as exc:
            self.stats.withheld.append(f"{kind} entry not stored: {exc}")
            return None
        try:
            for name, data in files.items():
                if not _own(name):
                    raise ValueError(f"not a plain file name: {name!r}")
                if isinstance(data, Path):
                    note = copy_file(data, staging / name, masker)
                elif masker.holds(data):
                    note = f"{name} withheld: it holds the value of a secret"
                else:
                    (staging / name).write_bytes(data)
                    note = ""
                if note:
                    self.stats.withheld.append(f"{kind} entry not stored: {note}")
                    return None
            meta = {"format": FORMAT, "key": key, "kind": kind, "created": time.time(),
                    "files": {name: file_sha256(staging / name) for name in files},
                    "info": masker.tree(dict(info or {}))}
            (staging / "entry.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
            final.parent.mkdir(parents=True, exist_ok=True)
            problem = link_problem(self.root, final)  # a link swapped in meanwhile
            if problem:
                self.stats.withheld.append(problem)
                return None
            try:
                os.rename(staging, final)
            except OSError:  # a concurrent run got there first, or a damaged leftover
                if not _regular(final / "entry.json"):
                    _remove(final)
                    os.rename(staging, final)
            self.stats.stored += 1
            return Entry(final, meta)
        finally:
            _remove(staging)

    def drop(self, kind: str, key: str) -> None:
        """Remove one entry (a results entry whose inputs changed: its key is reused)."""
        folder = self._folder(kind, key)
        if os.path.lexists(folder) and not link_problem(self.root, folder.parent):
            _remove(folder)

    def _entries(self) -> list[tuple[Path, int]]:
        """Every whole entry (staging folders aside): its entry.json and its bytes."""
        return [(folder / "entry.json",
                 sum(os.lstat(f).st_size for f in folder.iterdir() if _regular(f)))
                for folder in self._walk() if _ours(folder)]

    def _walk(self, links: list[Path] | None = None, tidy: bool = False) -> Iterator[Path]:
        """The entry folders (`kind/xx/key`), in order, never through a link: links found
        where the layout has folders are collected in `links`; `tmp` and removal leftovers
        (`.name.gone`, removed when `tidy`) are not entries."""
        for kind in _subfolders(self.root, links, False, skip=("tmp",)):
            for prefix in _subfolders(kind, links, False):
                yield from _subfolders(prefix, links, tidy)

    def usage(self) -> dict[str, tuple[int, int]]:
        """kind → (entries, bytes) of the whole entries."""
        out: dict[str, tuple[int, int]] = {}
        for meta, size in self._entries():
            kind = meta.parent.parent.parent.name
            count, total = out.get(kind, (0, 0))
            out[kind] = (count + 1, total + size)
        return out

    def prune(self, older_than_s: float | None = None, max_bytes: int | None = None,
              now: float | None = None) -> tuple[int, int]:
        """Remove entries unused for `older_than_s`, then the least recently used until the
        cache is under `max_bytes`; returns (entries removed, bytes freed). Staging folders
        older than an hour and removals a kill left halfway go too; a link in the cache's
        layout is removed itself (listed in `unlinked`), never followed. Only what the
        cache can prove its own is removed (`_ours`, `_STAGING`, `_GONE`): a folder it did
        not write stays, whatever its age."""
        if os.path.islink(self.root):
            raise UserError(f"{self.root} is a symbolic link (expected the export cache's "
                            f"folder; {NO_LINKS})")
        now = time.time() if now is None else now
        entries = sorted((os.lstat(meta).st_mtime, size, meta.parent)
                         for meta, size in self._entries())
        removed = freed = 0
        total = sum(size for _, size, _ in entries)
        for used, size, folder in entries:
            old = older_than_s is not None and now - used > older_than_s
            big = max_bytes is not None and total > max_bytes
            if not (old or big):
                continue
            _remove(folder)
            removed, freed, total = removed + 1, freed + size, total - size
        links: list[Path] = []
        tmp = self.root / "tmp"
        if os.path.islink(tmp):
            links.append(tmp)
        elif tmp.is_dir():
            for child in tmp.iterdir():
                if (_STAGING.fullmatch(child.name) and _real_folder(child)
                        and now - os.lstat(child).st_mtime > 3600):
                    remove(child)
        for _ in self._walk(links, tidy=True):
            pass
        for link in links:
            link.unlink(missing_ok=True)
        self.unlinked += links
        return removed, freed

    def pruned(self, older_than_s: float | None = None, max_bytes: int | None = None) -> str:
        """Prune, and say what went and what is left (`cache prune`, and the Action after
        its run)."""
        removed, freed = self.prune(older_than_s=older_than_s, max_bytes=max_bytes)
        usage = self.usage()
        entries, size = sum(n for n, _ in usage.values()), sum(b for _, b in usage.values())
        links = (f"; removed {len(self.unlinked)} link{'s' * (len(self.unlinked) > 1)} in the "
                 f"cache, never followed: {', '.join(map(str, self.unlinked))}"
                 if self.unlinked else "")
        return (f"removed {removed} entries, freed {megabytes(freed)}; kept {entries} "
                f"entries, {megabytes(size)}{links}")


def megabytes(size: int) -> str:
    mb = size / 1e6
    return f"{mb:.1f} MB" if mb >= 0.1 or size == 0 else f"{mb:.2g} MB"


def file_sha256(path: Path) -> str:
    """The digest of a regular file, opened without following a link."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _regular(path: Path) -> bool:
    """A regular file, not a link to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _own(name: Any) -> bool:
    """A plain file name inside an entry (a manifest naming `../x` or `/etc/x` is not)."""
    return (isinstance(name, str) and name not in ("", ".", "..", "entry.json")
            and "/" not in name and "\\" not in name and "\0" not in name)


# What prune may prove its own: an entry (`kind/xx/KEY` holding an entry.json that names
# its key and kind), a staging folder (`tmp/`, made by tempfile.mkdtemp with the key's first
# 12 digits as prefix) and an entry moved aside for removal (`_remove`).
_KEY = re.compile(r"[0-9a-f]{16,128}")
_STAGING = re.compile(r"[0-9a-f]{12}-[a-z0-9_]{8}")
_GONE = re.compile(r"\.[0-9a-f]{16,128}\.[0-9a-f]{32}\.gone")


def _ours(folder: Path) -> bool:
    """An entry this cache wrote: a key-shaped name in its key's prefix folder, and the
    entry.json the gate writes, naming that key and kind (a folder that merely holds an
    entry.json is not one)."""
    name = folder.name
    if not (_KEY.fullmatch(name) and folder.parent.name == name[:2]
            and _regular(folder / "entry.json")):
        return False
    try:
        meta = json.loads(_read(folder / "entry.json").decode("utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(meta, dict) and meta.get("key") == name
            and meta.get("kind") == folder.parent.parent.name)


def _real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _subfolders(folder: Path, links: list[Path] | None, tidy: bool,
                skip: tuple[str, ...] = ()) -> list[Path]:
    """The real folders in `folder`, sorted; links among them are noted in `links`;
    leftovers of removals (`.x.gone`: a kill stopped them halfway) are removed if `tidy`."""
    out = []
    try:
        found = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    for entry in found:
        if entry.name in skip:
            continue
        if entry.is_symlink():
            if links is not None:
                links.append(Path(entry.path))
        elif entry.name.startswith(".") and entry.name.endswith(".gone"):
            if tidy and _GONE.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                remove(Path(entry.path))
        elif entry.is_dir(follow_symlinks=False):
            out.append(Path(entry.path))
    return out


def _remove(path: Path) -> None:
    """Remove a folder, moving it aside first so no reader ever sees half of it; a link
    (or file) where a folder belongs is removed itself."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not path.is_dir():
        remove(path)
        return
    doomed = path.with_name(f".{path.name}.{uuid.uuid4().hex}.gone")
    try:
        os.rename(path, doomed)
    except OSError:
        return
    remove(doomed)


# -- the hand-off to localisation --------------------------------------------------------
# A failing (module, dtype)'s exports, left by the worker that ran its cases in its own
# scratch folder (the pool's, removed with it) for the localisation job, which may run
# on another worker of the same pool: localisation reads the run's exports instead of
# making them again (two exports per failing module otherwise).

HANDOFF = "localise-handoff"


@dataclass
class HandOff:
    """The model ONNX Runtime ran for the gate, the exporter's optimizer-off translation of
    one torch.export program (every value keeps its FX name but the outputs, which carry
    `outputs`' names) and that program, saved with torch.export.save. An export the cache
    served has no live program: then only the model (`plain` None)."""

    folder: Path
    model: bytes | str  # a path when the weights are external data
    plain: bytes | str | None
    outputs: list[str]

    def program(self) -> Any:
        """The torch.export program (None: the export came from the cache)."""
        import torch

        path = self.folder / "program.pt2"
        return torch.export.load(path) if self.plain is not None and path.is_file() else None


def _handoff_name(module: str, dtype: str) -> str:
    return f"{hashlib.sha256(module.encode()).hexdigest()[:16]}-{dtype}"


def hand_off(scratch: Path, module: str, dtype: str, model: bytes | str,
             plain: bytes | str | None, program: Any, outputs: Sequence[str]) -> None:
    """Leave one (module, dtype)'s exports for localisation (meta.json last: a folder a
    crash cut short is never read); `plain` and `program` None: the model alone."""
    import torch

    folder = scratch / HANDOFF / _handoff_name(module, dtype)
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    for key, source in (("model", model), ("plain", plain)):
        if source is None or (key == "plain" and program is None):
            continue
        if isinstance(source, str):  # external data: the export's own file stays put
            files[key] = source
        elif key == "plain" and source is model:
            files[key] = files["model"]
        else:
            (folder / f"{key}.onnx").write_bytes(source)
            files[key] = f"{key}.onnx"
    if "plain" in files:
        torch.export.save(program, folder / "program.pt2")
    meta = {"module": module, "dtype": dtype, "files": files, "outputs": list(outputs)}
    (folder / "meta.json").write_text(json.dumps(meta))


def handed_off(root: Path, module: str, dtype: str) -> HandOff | None:
    """The hand-off some worker of the pool whose folder is `root` left, or None."""
    for meta_path in sorted(root.glob(f"*/{HANDOFF}/{_handoff_name(module, dtype)}/meta.json"),
                            key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("module") != module or meta.get("dtype") != dtype:
                continue
            folder = meta_path.parent
            files = meta["files"]
            return HandOff(folder, _handed_file(folder, files["model"]),
                           _handed_file(folder, files["plain"]) if "plain" in files else None,
                           [str(o) for o in meta["outputs"]])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def _handed_file(folder: Path, name: str) -> bytes | str:
    """A hand-off's model: its bytes, or the export's own path (external data)."""
    path = Path(name)
    return str(path) if path.is_absolute() else (folder / path).read_bytes()
