"""Worker side: the files a module job read, so a warm run can tell that nothing its results
depend on has changed (engine.replay) without building the module again.

The parent keys the manifest entry, parity-gate's own source and every installed package;
what is left is files: the factory's source and the helpers it imports, a checkpoint it
loads, a fixture file. Python's audit hook sees each one opened for reading while the job
runs (`open`, `os.open`, and `io.open_code`, which is how imports read source). To that are
added what the hook cannot see:
- the user files imported before the job (an earlier job of the same worker imported them),
  and the file of every class the module is built from;
- weights read by native code (safetensors' reader does not go through Python's `open`):
  files with a weight suffix beside a file the factory opened (a checkpoint folder's
  `model.safetensors` beside its `config.json`), and any file or folder a factory keyword
  argument names.
Installed packages (keyed by version), the standard library, parity-gate itself, the
cache and temporary folders and the kernel's pseudo-files are left out. Environment
variables the job reads through `os.environ` / `os.getenv` are recorded too (by a digest
of their value; absent is a value), except those the worker process itself set or changed. A
factory that reads its inputs another way (the network, the clock, native `getenv`) is not
seen: `--rerun` or `--no-cache` runs everything (docs/explanation/export-cache.md).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from parity_gate.engine.cache import file_sha256, installed, user_files
from parity_gate.engine.sandbox import CREDENTIALS

WEIGHT_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".npz", ".npy",
                             ".h5", ".onnx", ".gguf", ".msgpack", ".data"})
_MAX_WALK = 2000  # files taken from one folder a keyword argument names


class _Recorder:
    """The files opened for reading since `start` (one audit hook per process: hooks
    cannot be removed, so it stays installed and records only while a job runs)."""

    def __init__(self) -> None:
        self.active = False
        self.building = False
        self.read: set[str] = set()
        self.built: set[str] = set()  # opened while the factory ran
        self.environ: dict[str, str | None] = {}  # variables read → their value's digest
        self.written: set[str] = set()  # variables the job set (then reads are not inputs)
        self.bulk: list[str] = []  # keys a whole-environment copy has yet to read
        self.installed = False

    def start(self) -> None:
        if not self.installed:
            sys.addaudithook(self._hook)
            if type(os.environ) is os._Environ:  # the same object `from os import environ` holds
                os.environ.__class__ = _WatchedEnviron
            self.installed = True
        self.read, self.built, self.environ, self.written = set(), set(), {}, set()
        self.active = True

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or event != "open":
            return
        path, mode, flags = (*tuple(args), None, None, None)[:3]
        if isinstance(path, int) or path is None:
            return
        writing = (any(c in mode for c in "wax+") if isinstance(mode, str)
                   else isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
        if not writing:
            name = os.path.abspath(os.fsdecode(path) if isinstance(path, bytes | os.PathLike)
                                   else str(path))
            self.read.add(name)
            if self.building:
                self.built.add(name)


RECORDER = _Recorder()
# A worker's environment as the gate started it (engine.pool fills it first thing): a
# variable this process changed since (torch's imports set some) is its own, not an input.
STARTING_ENVIRON: dict[str, str] = {}
# Set or removed in a worker by the pool itself (its scratch folder, torch's log level, the
# gate's credentials): their value there says nothing about the job's inputs.
# A shell's own bookkeeping (`_`, PWD, ...) says nothing about them either.
POOL_SET = frozenset({"TMPDIR", "TEMP", "TMP", "TORCH_CPP_LOG_LEVEL", "_", "PWD", "OLDPWD",
                      "SHLVL"}) | CREDENTIALS


def value_digest(value: str | None) -> str | None:
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


class _WatchedEnviron(os._Environ):
    """os.environ, noting each variable the job reads on its own. A copy of the whole
    environment (`dict(os.environ)`, `os.environ.copy()`, `{**os.environ}`, a loop over
    its items: what a subprocess launch does) reads every key in iteration order right
    after asking for the keys; those reads are not inputs, and are told apart by that
    order. A variable the job set before reading it is not an input either."""

    def __iter__(self) -> Iterator[str]:
        keys = list(super().__iter__())
        RECORDER.bulk = keys[::-1]  # popped from the end as the copy reads them
        return iter(keys)

    def __getitem__(self, key: str) -> str:
        try:
            value = super().__getitem__(key)
        except KeyError:
            self._note(key, None)
            raise
        self._note(key, value)
        return value

    def __setitem__(self, key: str, value: str) -> None:
        RECORDER.written.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        RECORDER.written.add(key)
        super().__delitem__(key)

    @staticmethod
    def _note(key: Any, value: str | None) -> None:
        bulk = RECORDER.bulk
        if bulk and bulk[-1] == key:
            bulk.pop()
            return
        RECORDER.bulk = []
        if RECORDER.active and isinstance(key, str) and key not in POOL_SET \
                and key not in RECORDER.written and STARTING_ENVIRON.get(key) == value:
            RECORDER.environ.setdefault(key, value_digest(value))


def _excluded(exclude: Iterable[Path]) -> list[Path]:
    import sysconfig

    stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
    # Never whole prefixes: a checkout at /usr/src/app lies under a system Python's prefix.
    roots = [*map(Path, stdlib), Path(tempfile.gettempdir()),
             Path(__file__).resolve().parent.parent, Path("/proc"), Path("/sys"), Path("/dev"),
             *exclude]
    return sorted({r.resolve() for r in roots if str(r)})


def _kwarg_paths(value: Any, base: Path) -> Iterator[Path]:
    """Files a factory keyword argument names (a string or a list of them), folders walked
    for weight files."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _kwarg_paths(v, base)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _kwarg_paths(v, base)
    elif isinstance(value, str) and 0 < len(value) < 4096 and "\n" not in value:
        path = (base / value) if not os.path.isabs(value) else Path(value)
        try:
            if path.is_file():
                yield path
            elif path.is_dir():
                found = (p for p in path.rglob("*") if p.suffix in WEIGHT_SUFFIXES)
                yield from (p for _, p in zip(range(_MAX_WALK), found, strict=False))
        except OSError:
            return


def _beside(files: Iterable[str]) -> Iterator[Path]:
    """Weight files in each folder the factory opened a file in."""
    for folder in {Path(f).parent for f in files}:
        try:
            yield from (p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)
        except OSError:
            continue


def class_files(module: Any) -> set[str]:
    """The source file of every class the module is built from (not installed ones)."""
    import inspect

    out = set()
    for m in module.modules():
        for cls in type(m).__mro__:
            try:
                file = inspect.getsourcefile(cls)
            except (TypeError, OSError):
                continue
            if file:
                out.add(os.path.abspath(file))
    return out


def job_inputs(job: Any, extra: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Every file the job's results depend on (see the module docstring), each with its
    SHA-256, size and mtime; paths under the job's folder are kept relative to it (another
    checkout of the same repository is the same input)."""
    RECORDER.active = False  # hashing below opens files too
    base = Path(job.base_dir).resolve()
    skip = _excluded([Path(job.cache_dir)] if job.cache_dir else [])
    names: set[Path] = {Path(p) for p in [*RECORDER.read, *extra]}
    names |= set(_beside(RECORDER.built))
    names |= set(_kwarg_paths(job.module.kwargs, base))
    names |= set(user_files([*job.python_path, base]))
    out = []
    for path in sorted({p.resolve() for p in names}):
        if any(path.is_relative_to(r) for r in skip) or installed(path) or not path.is_file():
            continue
        out.append(describe(path, base))
    return out


def environ_read() -> dict[str, str | None]:
    """The environment variables the job read, each with its value's digest."""
    return dict(sorted(RECORDER.environ.items()))


def describe(path: Path, base: Path) -> dict[str, Any]:
    """One input's record (what engine.replay checks it against)."""
    st = path.stat()
    return {"path": str(path),
            "rel": path.relative_to(base).as_posix() if path.is_relative_to(base) else None,
            "sha256": file_sha256(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "hashed_ns": time.time_ns()}
