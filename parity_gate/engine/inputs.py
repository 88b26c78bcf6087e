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
cache and temporary folders and the kernel's pseudo-files are left out. A factory that
reads its inputs another way (the network, an environment variable) is not seen:
`--no-cache` runs everything (docs/explanation/export-cache.md).
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

from parity_gate.engine.cache import installed, user_files

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
        self.installed = False

    def start(self) -> None:
        if not self.installed:
            sys.addaudithook(self._hook)
            self.installed = True
        self.read, self.built, self.active = set(), set(), True

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or event != "open":
            return
        path, mode, flags = (*tuple(args), None, None, None)[:3]
        if isinstance(path, int) or path is None:
            return
        writing = (any(c in mode for c in "wax+") if isinstance(mode, str)
                   else isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
        if not writing:
            name = os.fsdecode(path) if isinstance(path, bytes | os.PathLike) else str(path)
            self.read.add(os.path.abspath(name))
            if self.building:
                self.built.add(os.path.abspath(name))


RECORDER = _Recorder()


def _excluded(exclude: Iterable[Path]) -> list[Path]:
    roots = [Path(sys.base_prefix), Path(sys.prefix), Path(tempfile.gettempdir()),
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


def describe(path: Path, base: Path) -> dict[str, Any]:
    """One input's record (what engine.replay checks it against)."""
    st = path.stat()
    return {"path": str(path),
            "rel": path.relative_to(base).as_posix() if path.is_relative_to(base) else None,
            "sha256": sha256(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "hashed_ns": time.time_ns()}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
