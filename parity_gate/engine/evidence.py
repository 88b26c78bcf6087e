"""Evidence a crash is replayed from (localise.crash): written before the step that may kill
the worker (the export call as data and its example, the model ORT loads, a case's feeds)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate.engine.binding import Binding
from parity_gate.engine.exporting import ExportedModel
from parity_gate.engine.fixtures import derive_seed
from parity_gate.engine.state import EagerRef, TypedModule
from parity_gate.model.keys import CaseKey
from parity_gate.plan.cases import ModuleJob

EVIDENCE_MAX_BYTES = 64 << 20  # inputs larger than this are not kept for a crash repro


def export_call(job: ModuleJob, dtype: str, device: str, binding: Binding, names: list[str],
                settings: Any) -> dict[str, Any]:
    """The export call as data: what a repro script needs to build the module as the gate
    did (factory, seed, dtype, binding) and call torch.onnx.export with its arguments."""
    return {
        "factory": job.module.factory, "kwargs": job.module.kwargs,
        "python_path": [str(p) for p in job.python_path],
        "seed": derive_seed(job.seed, job.name) % (2**32), "dtype": dtype,
        "device": device, "order": list(binding.order), "keyword": binding.keyword,
        "dynamic": {i.name: {str(d): sym for d, sym in i.dynamic.items()}
                    for i in job.module.inputs},
        "output_names": names, "exporter": settings.exporter or "dynamo",
        "optimize": settings.optimize, "opset": settings.opset,
        "options": dict(settings.options),
    }


def export_evidence(job: ModuleJob, mod: TypedModule, example: dict[str, np.ndarray],
                    names: list[str], settings: Any) -> dict[str, str]:
    """What an export that kills the worker is replayed from (localise.crash): the call
    as data (`export_call`) and the example, written before the export starts. Nothing
    when the example is too large or the call's options are not plain data."""
    if sum(a.nbytes for a in example.values()) > EVIDENCE_MAX_BYTES:
        return {}
    folder = Path(tempfile.gettempdir()) / "evidence"
    stem = f"{job.name}-{mod.dtype}-export".replace("/", "_")
    call = export_call(job, mod.dtype, mod.device, mod.binding, names, settings)
    try:
        folder.mkdir(exist_ok=True)
        text = json.dumps(call, indent=1)
        (folder / f"{stem}.json").write_text(text)
        np.savez(folder / f"{stem}.npz", **example)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError):
        return {}
    return {"export": str(folder / f"{stem}.json"), "inputs": str(folder / f"{stem}.npz")}


def evidence_model(job: ModuleJob, dtype: str, exported: ExportedModel) -> str:
    """A file holding the model ONNX Runtime is about to load, for a repro should it crash
    the worker: the export's own file when it has one, else a copy in the worker's
    temporary folder (the pool's, removed with it)."""
    if isinstance(exported.source, str):
        return exported.source
    path = Path(tempfile.gettempdir()) / "evidence" / f"{job.name}-{dtype}.onnx"
    try:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(exported.source)
    except OSError:
        return ""
    return str(path)


def evidence_inputs(evidence: dict[str, str], key: CaseKey, ref: EagerRef,
                     feed_names: set[str]) -> dict[str, str]:
    """The LOADING evidence plus the first sample's feeds, saved for a crash while running
    (not when they pass EVIDENCE_MAX_BYTES: the repro then loads the model only). One file
    per reference (module, dtype, fixture, batch), written once: every provider's case of
    it reuses the file instead of writing the same feeds again."""
    feeds = {k: v for k, v in ref.inputs[0].items() if k in feed_names} if ref.inputs else {}
    if not evidence.get("model") or not feeds \
            or sum(a.nbytes for a in feeds.values()) > EVIDENCE_MAX_BYTES:
        return evidence
    name = f"{key.module}-{key.dtype}-{key.inputs}-b{key.batch_size}.npz".replace("/", "_")
    path = Path(tempfile.gettempdir()) / "evidence" / name
    try:
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            np.savez(path, **feeds)  # type: ignore[arg-type]
    except (OSError, ValueError):
        return evidence
    return {**evidence, "inputs": str(path)}
