"""A warm run's shortcut: a module whose cases all passed, with nothing they depend on
changed since, is not run again; its results are replayed from the cache.

A module job's results are a function of: the job as planned (the manifest entry, its cases,
settings, fixtures, providers, seed), parity-gate's own code, the interpreter and every
installed package, the processor and the worker's thread share, and the files the job read
(engine.inputs: the factory's source and helpers, checkpoints, fixture files). All but the
files make the key; the files are checked on lookup, each against its SHA-256 (one whose size
and mtime are unchanged since it was hashed is not read again, as git's index does), so an
edited helper or a retrained checkpoint is a miss, never a stale hit. No torch import, no
worker: a warm run of an unchanged zoo costs its start-up and its reports.

Only a module whose every case passed, with no blocking finding, is stored: a failure runs
again, with its localisation and artefacts. A replayed case keeps the figures of the run that
measured them, and says when (`provenance.replayed`). `--no-cache` runs everything.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pydantic_core

from parity_gate.engine.cache import ExportCache, file_sha256, key_of
from parity_gate.engine.environment import usable_cores
from parity_gate.engine.inputs import value_digest
from parity_gate.engine.protocol import Inputs
from parity_gate.model.findings import Finding
from parity_gate.model.results import CaseResult
from parity_gate.plan.cases import ModuleJob

KIND = "results"
_ENV_PREFIXES = ("OMP_", "MKL_", "ORT_", "ONNXRUNTIME", "CUDA_", "TORCH", "PYTORCH_",
                 "CUBLAS", "NVIDIA_", "TRANSFORMERS_", "HF_", "PYTHONHASHSEED")
_RACY_NS = 2_000_000_000  # a file changed this close to its hashing is hashed again


@functools.cache
def environment(providers: tuple[str, ...], jobs: int) -> str:
    """Everything outside the job that its results depend on, as one digest."""
    from importlib import metadata

    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    env = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES))
    return key_of("environment", sys.version, platform.platform(), dists, _own_code(),
                  _processor(), list(providers), max(1, usable_cores() // max(1, jobs)), env)


def _own_code() -> str:
    """parity-gate's own files (the bundled example's data too: engine.inputs leaves the
    package out): a changed check changes results without a version bump."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()
                       and "__pycache__" not in p.parts and p.suffix != ".pyc"):
        h.update(f"{path.relative_to(root).as_posix()}|".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _processor() -> str:
    """The processor model and its instruction sets, and the GPUs the driver lists: a
    kernel picks its code path by them, and float results follow."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = platform.processor() or platform.machine()
    keep = [line for line in text.splitlines()
            if line.startswith(("model name", "flags", "Features", "CPU part"))] or [text]
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        with contextlib.suppress(OSError):
            keep += [line for line in info.read_text().splitlines() if line.startswith("Model")]
    return "\n".join(dict.fromkeys(keep))


def job_key(job: ModuleJob, environment_digest: str) -> str:
    """The job as planned, its folder written as `$BASE` (the same checkout elsewhere is the
    same job), without the cache's own folder."""
    data = pydantic_core.to_jsonable_python(job, fallback=repr)
    data.pop("cache_dir", None)
    text = json.dumps(data, sort_keys=True).replace(str(Path(job.base_dir).resolve()), "$BASE")
    return key_of(KIND, text, environment_digest)


def unchanged(record: dict[str, Any], base: Path) -> bool:
    """Whether one input still holds what it held when the job read it."""
    path = base / record["rel"] if record.get("rel") else Path(record["path"])
    try:
        st = path.stat()
        if st.st_size != record["size"]:
            return False
        settled = record["mtime_ns"] < record.get("hashed_ns", 0) - _RACY_NS
        if st.st_mtime_ns == record["mtime_ns"] and settled:
            return True
        return bool(file_sha256(path) == record["sha256"])
    except (OSError, KeyError, TypeError):
        return False


@dataclass
class Replayer:
    """The run's side of the results cache: looks jobs up, stores the ones that passed."""

    store: ExportCache
    environment: str
    reuse: bool = True  # False (--rerun): run everything, store afresh
    replayed: list[str] = field(default_factory=list)   # modules replayed
    stored: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)      # an input changed: run again

    @classmethod
    def open(cls, folder: Path | None, providers: Sequence[str], jobs: int,
             reuse: bool = True) -> Replayer | None:
        if folder is None:
            return None
        store = ExportCache(folder)
        if store.usable():
            return None
        return cls(store, environment(tuple(providers), jobs), reuse)

    def lookup(self, job: ModuleJob) -> list[CaseResult | Finding] | None:
        """The job's results as last measured, or None (run it)."""
        key = job_key(job, self.environment)
        entry = self.store.get(KIND, key) if self.reuse else None
        if entry is None:
            return None
        info = entry.meta.get("info", {})
        base = Path(job.base_dir).resolve()
        try:
            fresh = all(unchanged(r, base) for r in info["inputs"]) and all(
                value_digest(os.environ.get(k)) == v for k, v in info["environ"].items())
            events = [_event(e, info["measured"]) for e in info["events"]] if fresh else None
        except (KeyError, TypeError, ValueError):
            fresh, events = False, None
        if events is None or not fresh:
            self.stale.append(job.name)
            self.store.drop(KIND, key)
            return None
        self.replayed.append(job.name)
        return events

    def remember(self, job: ModuleJob, events: Iterable[CaseResult | Finding | Inputs],
                 measured: str) -> None:
        """Store the job's results when every planned case passed and its inputs came."""
        got = list(events)
        inputs = next((e for e in got if isinstance(e, Inputs)), None)
        cases = [e for e in got if isinstance(e, CaseResult)]
        findings = [e for e in got if isinstance(e, Finding)]
        planned = {k.id for k in job.cases}
        if inputs is None or not planned <= {c.id for c in cases} or any(
                c.outcome.failed or c.lost is not None for c in cases) or any(
                f.severity == "error" for f in findings):
            return
        info = {"inputs": inputs.files, "environ": inputs.environ, "measured": measured,
                "events": [{"case": c.to_dict()} for c in cases]
                + [{"finding": f.to_dict()} for f in findings]}
        key = job_key(job, self.environment)
        self.store.drop(KIND, key)  # an older record of the same job: this one is newer
        if self.store.put(KIND, key, {}, info) is not None:
            self.stored.append(job.name)

    def summary(self) -> str:
        """One line for the run's progress output ('' when nothing was replayed or stored)."""
        parts = []
        if self.replayed:
            more = ", …" if len(self.replayed) > 5 else ""
            parts.append(f"{len(self.replayed)} module(s) replayed unchanged "
                         f"({', '.join(self.replayed[:5])}{more})")
        if self.stale:
            parts.append(f"{len(self.stale)} run again (an input changed)")
        if self.stored:
            parts.append(f"{len(self.stored)} stored for the next run")
        return "results cache: " + "; ".join(parts) if parts else ""


def _event(data: dict[str, Any], measured: str) -> CaseResult | Finding:
    if "case" in data:
        case = CaseResult.from_dict(data["case"])
        return replace(case, provenance=replace(case.provenance, replayed=measured))
    return Finding.from_dict(data["finding"])
