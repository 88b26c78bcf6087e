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
from parity_gate.engine.cache import ExportCache, key_of
from parity_gate.engine.exporting import Translated
from parity_gate.plan.cases import ModuleJob

TRANSLATION = "translation"
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
    stored (the re-check of a case that failed on a reused translation)."""

    store: ExportCache
    refresh: bool = False

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
        return cls(store), ""

    def key(self, program: str, call: Mapping[str, Any]) -> str | None:
        versions, _ = stack()
        return key_of(TRANSLATION, program, dict(call), versions, __version__, _own_call())

    def get(self, key: str) -> Translated | None:
        if self.refresh:
            return None
        entry = self.store.get(TRANSLATION, key)
        if entry is None:
            return None
        info = entry.meta.get("info", {})
        try:
            path = entry.file("model.onnx")
            external = "model.onnx.data" in entry.meta["files"]
            return Translated(path.read_bytes(), str(path) if external else None,
                              tuple((str(c), str(t), str(f), int(n))
                                    for c, t, f, n in info["warnings"]),
                              dict(info["facts"]))
        except (KeyError, TypeError, ValueError, OSError):
            return None  # an entry of a shape this version does not read: a miss

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

