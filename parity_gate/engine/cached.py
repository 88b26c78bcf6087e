"""The worker's side of the export cache: what goes into a key, and how an export, an
export failure or an eager reference is stored and read back.

The store (`cache.py`) knows files and digests; this module knows what the module
worker computes. A hit returns exactly what the miss computed: the exported bytes
with their warnings, baked dims, opset and the hazards found on that export, or the
export's failure with its cause; eager outputs bit for bit. The hazard rules need the
live torch.export program, so their findings are stored with the export (and the
hazard settings are part of its key).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate import __version__
from parity_gate.engine.cache import (
    ExportCache,
    export_key,
    load_arrays,
    module_fingerprint,
    reference_key,
    save_arrays,
    versions,
)
from parity_gate.engine.exporting import ExportedModel, ExportFailure
from parity_gate.hazards.rules import RULE_IDS
from parity_gate.model.hazards import Hazard
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ExportCause
from parity_gate.model.secrets import Masker
from parity_gate.plan.cases import ModuleJob
from parity_gate.plan.probes import Assumption, Range

EXPORT, REFERENCE = "export", "reference"




@dataclass(frozen=True)
class ExportTarget:
    """Which export of a module: its dtype and device, what it is for (the gate's own, or
    a follow-up's), the batch it is exported at, the submodules in training mode."""

    dtype: str
    device: str
    purpose: str
    export_batch: int
    training: tuple[str, ...] = ()


@dataclass
class WorkerCache:
    """One job's view of the cache: the store and the module's fingerprint."""

    store: ExportCache
    fingerprint: str

    @classmethod
    def open(cls, job: ModuleJob, module: Any) -> tuple[WorkerCache | None, str]:
        """The cache for this job, or None and why (disabled: no reason; unusable: one)."""
        if job.cache_dir is None:
            return None, ""
        store = ExportCache(job.cache_dir)
        problem = store.usable()
        if problem:
            return None, f"export cache disabled for this run: {problem}"
        extra = {"factory": job.module.factory, "kwargs": job.module.kwargs}
        try:
            return cls(store, module_fingerprint(module, extra, job.python_path)), ""
        except Exception as exc:  # an odd module costs the cache, never its cases
            return None, (f"export cache not used for this module: its fingerprint failed "
                          f"({type(exc).__name__}: {str(exc)[:200]})")

    # -- exports ---------------------------------------------------------------------

    def export_key(self, job: ModuleJob, target: ExportTarget, example: dict[str, Any],
                   names: Sequence[str], settings: Any) -> str:
        """Everything an export and the hazard checks on it depend on."""
        return export_key(
            self.fingerprint, [i.model_dump(mode="json") for i in job.module.inputs],
            target.dtype, settings.model_dump(mode="json"), digest(example),
            {**versions(), "parity-gate": __version__},
            context=[target.purpose, target.device, list(names), target.export_batch,
                     list(job.settings.batch_sizes or []), list(target.training),
                     _dump(job.settings.hazards), _dump(job.settings.target_runtime),
                     list(RULE_IDS)])  # a new rule's findings are not in an older entry

    def load_export(self, key: str) -> tuple[ExportedModel | ExportFailure, list[Hazard]] | None:
        entry = self.store.get(EXPORT, key)
        if entry is None:
            return None
        info = entry.meta.get("info", {})
        try:
            hazards = [Hazard.from_dict(h) for h in info.get("hazards", [])]
            failure = info.get("failure")
            if failure is not None:
                cause = failure.get("cause")
                return ExportFailure(Outcome(failure["outcome"]), failure["reason"],
                                     failure["detail"],
                                     ExportCause.from_dict(cause) if cause else None), hazards
            path = entry.file("model.onnx")
            external = "model.onnx.data" in entry.meta["files"]
            return ExportedModel(path.read_bytes(), list(info["warnings"]),
                                 [tuple(b) for b in info["baked_dims"]],
                                 info["opset"], info["ir_version"],
                                 path=str(path) if external else None,
                                 assumptions=[Assumption.from_dict(a)
                                              for a in info.get("assumptions", [])],
                                 ranges={k: Range(lo, hi) for k, (lo, hi)
                                         in info.get("ranges", {}).items()}), hazards
        except (KeyError, TypeError, ValueError, OSError):
            return None  # an entry of a shape this version does not read: a miss

    def store_export(self, key: str, result: ExportedModel | ExportFailure,
                     hazards: list[Hazard]) -> None:
        info: dict[str, Any] = {"hazards": [h.to_dict() for h in hazards]}
        files: dict[str, bytes | Path] = {}
        if isinstance(result, ExportFailure):
            info["failure"] = {"outcome": result.outcome.value, "reason": result.reason,
                               "detail": result.detail,
                               "cause": result.cause.to_dict() if result.cause else None}
        else:
            info.update(warnings=result.warnings, baked_dims=result.baked_dims,
                        opset=result.opset, ir_version=result.ir_version,
                        assumptions=[a.to_dict() for a in result.assumptions],
                        ranges={k: [r.low, r.high] for k, r in result.ranges.items()})
            files["model.onnx"] = result.model
            if result.path is not None:
                files["model.onnx.data"] = Path(f"{result.path}.data")
        self._put(EXPORT, key, files, info)

    def _put(self, kind: str, key: str, files: Mapping[str, bytes | Path],
             info: Mapping[str, Any]) -> None:
        """Store an entry; a full disk or an unwritable folder costs the next run's speed,
        never this run's result, so it is said and passed over."""
        try:
            stored = self.store.put(kind, key, files, info)
        except OSError as exc:
            print(f"parity-gate: export cache: could not store an entry ({kind}): {exc}",
                  file=sys.stderr)
            return
        if stored is None:  # a secret in its files, or a link in the cache: said, not stored
            print(f"parity-gate: export cache: {self.store.stats.withheld[-1]}", file=sys.stderr)

    # -- eager references ------------------------------------------------------------

    def reference_key(self, job: ModuleJob, dtype: str, device: str,
                      inputs: list[dict[str, np.ndarray]]) -> str:
        """The module, its very inputs (file fixtures included, by content) and torch."""
        return reference_key(self.fingerprint, dtype, device,
                             [digest(sample) for sample in inputs],
                             [o.model_dump(mode="json") for o in job.module.outputs or []])

    def load_reference(self, key: str) -> tuple[list[str], list[list[np.ndarray]]] | None:
        entry = self.store.get(REFERENCE, key)
        if entry is None:
            return None
        info = entry.meta.get("info", {})
        try:
            names, dtypes = list(info["names"]), list(info["dtypes"])
            return names, load_arrays(entry.file("outputs.npz"), int(info["samples"]),
                                      len(dtypes), dtypes)
        except (KeyError, TypeError, ValueError, OSError):
            return None

    def store_reference(self, key: str, names: list[str],
                        outputs: list[list[np.ndarray]]) -> None:
        if not outputs:
            return
        dtypes = [a.dtype.name for a in outputs[0]]
        if any([a.dtype.name for a in sample] != dtypes for sample in outputs):
            return  # samples whose outputs differ in dtype: not worth a format
        if Masker().holds(" ".join(names)):  # names are data here: masked, they would not match
            print("parity-gate: export cache: reference entry not stored: an output name holds "
                  "the value of a secret", file=sys.stderr)
            return
        self._put(REFERENCE, key, {"outputs.npz": save_arrays(outputs)},
                  {"names": names, "dtypes": dtypes, "samples": len(outputs)})


def digest(arrays: dict[str, Any]) -> str:
    """SHA-256 of named arrays: names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(np.asarray(arrays[name]))
        h.update(f"{name}|{a.dtype.name}|{a.shape}|".encode())
        h.update(a.view(np.uint8).tobytes() if a.size else b"")
    return h.hexdigest()


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value
