"""ONNX Runtime sessions per provider, and what their errors mean.

Provider availability comes from `onnxruntime.get_available_providers()`; a
GPU provider that silently falls back to CPU at session creation is caught
here, because a "CUDA pass" that really ran on CPU proves nothing.
"""

from __future__ import annotations

import re
from typing import Any

from parity_gate.model.outcomes import Outcome
from parity_gate.model.text import strip_control
from parity_gate.plan.providers import EXECUTION_PROVIDERS, provider_chain


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def create_session(model: bytes, provider: str, options: dict[str, Any],
                   *, optimization: str = "all") -> Any:
    """One session per (model, provider), reused for every batch size and sample."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    session = ort.InferenceSession(model, so, providers=provider_chain(provider, options))
    wanted = EXECUTION_PROVIDERS[provider]
    if wanted not in session.get_providers():
        raise ProviderFallback(
            f"{wanted} failed to initialise; the session fell back to "
            f"{', '.join(session.get_providers())}"
        )
    return session


class ProviderFallback(RuntimeError):
    """The requested EP did not come up; running would silently test the CPU instead."""


_NO_KERNEL = re.compile(r"NOT_IMPLEMENTED|Could not find an implementation for", re.I)
_BAD_DIMS = re.compile(r"Got invalid dimensions for input|invalid dimensions", re.I)


def classify_load_error(message: str) -> Outcome:
    """A session that will not load: missing kernel (runtime gap) or an invalid graph."""
    return Outcome.NO_KERNEL if _NO_KERNEL.search(message) else Outcome.INVALID_MODEL


def classify_run_error(message: str, batch_size: int | None = None,
                       export_batch: int | None = None) -> Outcome:
    """A run that fails at a batch size other than the exported one is a baked shape
    (only when both are known: the op sweep has no batch dimension)."""
    if (batch_size is not None and export_batch is not None and batch_size != export_batch
            and _BAD_DIMS.search(message)):
        return Outcome.BAKED_SHAPE
    if _NO_KERNEL.search(message):
        return Outcome.NO_KERNEL
    return Outcome.RUNTIME_ERROR


def first_line(message: str, limit: int = 300) -> str:
    text = " ".join(line.strip() for line in message.strip().splitlines() if line.strip())
    text = strip_control(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
