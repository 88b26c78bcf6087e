"""The worker's side of the export cache: ONNX translations of captured programs.

A translation (torch.onnx.export's decomposition and translation steps, most of an export's
time) is a pure function of the torch.export program and the export call, so it is reused
under a key that is a digest of exactly those, computed from the program captured in this
run (engine.programs), and of the exporter stack's versions. Nothing else is reused: the
module is built, run eagerly on every fixture and captured in every run, so whatever it
reads (files, the environment, the clock, native code) shows in this run's results.

A translation is never reused while the exporter stack is an editable install (its version
does not change with its code), and a failing case is run again on a fresh translation
before it is reported (module_worker): a failure never rests on a reused artefact.

Beside the entries, one record per (module, dtype) of the key's parts (engine.changes), so
that a miss can say what changed since the last export of that module; no key reads them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity_gate import __version__
from parity_gate.engine import changes
from parity_gate.engine.cache import ExportCache, key_of
from parity_gate.engine.exporting import Translated
from parity_gate.plan.cases import ModuleJob

TRANSLATION = "translation"
PARTS = "parts"  # per (module, dtype): the last export's record of its key's parts
# What a translation runs: the exporter and the libraries its steps compute with.
STACK = ("torch", "onnxscript", "onnx", "onnx-ir", "numpy", "ml_dtypes", "sympy")


@functools.cache
def stack() -> tuple[dict[str, str], list[str]]:
    """The exporter stack's versions, and the distributions of it installed editable (their
    code changes without their version)."""
    from importlib import metadata

    found, editable = {}, []
    for name in STACK:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
            continue
        found[name] = dist.version
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            direct = {}
        if direct.get("dir_info", {}).get("editable") or "+git" in dist.version:
            editable.append(name)
    return found, editable


@functools.cache
def _own_call() -> str:
    """The code that calls the exporter (engine.exporting): a change in how it calls is a
    change in what the translation is a function of, version bump or not."""
    path = Path(__file__).with_name("exporting.py")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class WorkerCache:
    """One job's view of the export cache. `refresh`: translate afresh and replace what is
    stored (the re-check of a case that failed on a reused translation). `owner`: the
    manifest's folder and the module, whose records these are (`begin`/`end`)."""

    store: ExportCache
    refresh: bool = False
    owner: tuple[str, str] = ("", "")
    _dtype: str | None = None  # the dtype between begin and end: misses are explained
    _record: dict[str, Any] | None = None  # the last key's parts
    _earlier: dict[str, Any] | None = None  # the record of the module's previous export
    _missed: str = ""  # why the last lookup missed ("" after a hit)
    _kept: bool = False  # the last key's translation is in the cache (reused or stored)

    @classmethod
    def open(cls, job: ModuleJob) -> tuple[WorkerCache | None, str]:
        """The cache for this job, or None and why (disabled: no reason; unusable: one)."""
        if job.cache_dir is None:
            return None, ""
        store = ExportCache(job.cache_dir)
        problem = store.usable()
        if problem:
            return None, f"export cache disabled for this run: {problem}"
        _, editable = stack()
        if editable:
            return None, (f"export cache not used: {', '.join(editable)} is installed "
                          "editable (its code can change without its version)")
        return cls(store, owner=(str(job.base_dir), job.name)), ""

    def key(self, program: str, call: Mapping[str, Any]) -> str | None:
        versions, _ = stack()
        key = key_of(TRANSLATION, program, dict(call), versions, __version__, _own_call())
        if self._dtype is not None:
            self._record = changes.record(key, program, call, versions, __version__,
                                          _own_call())
            self._kept = False
        return key

    def begin(self, dtype: str) -> None:
        """The gate's export of `dtype` starts: its misses are explained against the
        module's record, the parts of its last export that had an entry, which this
        export's replace at `end` if its translation is kept (a failed one never is)."""
        self._dtype, self._record, self._missed, self._earlier = dtype, None, "", None
        self._kept = False
        try:
            entry = self.store.get(PARTS, self._parts_key())
        except OSError:
            return
        self._earlier = entry.meta.get("info") if entry is not None else None

    def end(self) -> str:
        """Why the export of this dtype missed ("" after a hit, or with no earlier record),
        once its parts are recorded; advisory: a record that cannot be kept costs an
        explanation, never a result."""
        said, record, earlier, key = self._missed, self._record, self._earlier, self._parts_key()
        self._dtype, self._record, self._earlier, self._missed = None, None, None, ""
        if record is not None and self._kept and (earlier or {}).get("key") != record["key"]:
            try:
                self.store.drop(PARTS, key)
                self.store.put(PARTS, key, {}, record)
            except OSError:
                pass
        return said

    def _parts_key(self) -> str:
        return key_of(PARTS, *self.owner, self._dtype)

    def get(self, key: str) -> Translated | None:
        if self.refresh:
            return None
        entry = self.store.get(TRANSLATION, key)
        self._missed = ""
        if entry is None:
            if self._earlier is not None and self._record is not None:
                self._missed = changes.explain(self._earlier, self._record)
            return None
        info = entry.meta.get("info", {})
        try:
            path = entry.file("model.onnx")
            external = "model.onnx.data" in entry.meta["files"]
            hit = Translated(path.read_bytes(), str(path) if external else None,
                             tuple((str(c), str(t), str(f), int(n))
                                   for c, t, f, n in info["warnings"]),
                             dict(info["facts"]))
        except (KeyError, TypeError, ValueError, OSError):
            return None  # an entry of a shape this version does not read: a miss
        self._kept = True
        return hit

    def put(self, key: str, translated: Translated) -> None:
        """Store a translation; a full disk or an unwritable folder costs the next run's
        speed, never this run's result, so it is said and passed over."""
        files: dict[str, bytes | Path] = {"model.onnx": translated.model}
        if translated.path is not None:
            files["model.onnx.data"] = Path(f"{translated.path}.data")
        if self.refresh:
            self.store.drop(TRANSLATION, key)
        try:
            stored = self.store.put(TRANSLATION, key, files,
                                    {"warnings": [list(w) for w in translated.warnings],
                                     "facts": translated.facts})
        except OSError as exc:
            print(f"parity-gate: export cache: could not store a translation: {exc}",
                  file=sys.stderr)
            return
        if stored is None:  # a secret in its files, or a link in the cache: said, not stored
            print(f"parity-gate: export cache: {self.store.stats.withheld[-1]}", file=sys.stderr)
        else:
            self._kept = True

