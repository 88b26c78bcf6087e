"""ONNX Runtime sessions per provider, and what their errors mean.

Provider availability comes from `onnxruntime.get_available_providers()`; a
GPU provider that silently falls back to CPU at session creation is caught
here, because a "CUDA pass" that really ran on CPU proves nothing.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from parity_gate.model.outcomes import Outcome
from parity_gate.model.text import strip_control
from parity_gate.model.units import human_size
from parity_gate.plan.providers import EXECUTION_PROVIDERS, provider_chain


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


_THREADS = 0  # intra-op threads per session; 0: ONNX Runtime's default (every core)


def set_thread_budget(threads: int) -> None:
    """A worker's share of the cores: N workers with N×cores threads each would
    oversubscribe the machine and make every one of them slower."""
    global _THREADS
    _THREADS = max(0, threads)


_ENGINE_CACHE: Path | None = None  # TensorRT's engine cache folder (set_engine_cache)


def set_engine_cache(folder: Path | None) -> None:
    """Where this worker's TensorRT sessions keep their engines: the run's cache folder
    when there is one (`<cache>/tensorrt`, reused by the next run), else a temporary
    folder shared by this worker's sessions (created on first use)."""
    global _ENGINE_CACHE
    _ENGINE_CACHE = folder


def engine_cache() -> Path:
    """The TensorRT engine cache folder, created if needed."""
    global _ENGINE_CACHE
    if _ENGINE_CACHE is None:
        _ENGINE_CACHE = Path(tempfile.mkdtemp(prefix="parity-gate-tensorrt-"))
    _ENGINE_CACHE.mkdir(parents=True, exist_ok=True)
    return _ENGINE_CACHE


def create_session(model: bytes | str, provider: str, options: dict[str, Any],
                   *, optimization: str = "all", profile_prefix: str | None = None,
                   optimized_path: str | None = None) -> Any:
    """One session per (model, provider), reused for every batch size and sample; `model`
    is the serialized model or, when its weights are external, its file. `profile_prefix`:
    write ONNX Runtime's JSON profile there (the performance check's placement);
    `optimized_path`: write the optimized graph there (with the Memcpy nodes the session
    inserted; weights of 1 KiB and more in `<path>.data`, so a large model's file stays
    small)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    if optimized_path is not None:
        so.optimized_model_filepath = optimized_path
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    Path(optimized_path).name + ".data")
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    if _THREADS:
        so.intra_op_num_threads = _THREADS
        so.inter_op_num_threads = 1
    so.graph_optimization_level = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    cache = str(engine_cache()) if provider == "tensorrt" else None
    session = ort.InferenceSession(model, so, providers=provider_chain(provider, options, cache))
    wanted = EXECUTION_PROVIDERS[provider]
    if wanted not in session.get_providers():
        raise ProviderFallback(
            f"{wanted} failed to initialise; the session fell back to "
            f"{', '.join(session.get_providers())}"
        )
    return session


class ProviderFallback(RuntimeError):
    """The requested EP did not come up; running would silently test the CPU instead."""


_RAISED = re.compile(r"running (\w+) node\. Name:'([^']+)'")


def failing_node(text: str) -> tuple[str, str] | None:
    """(op type, node name) of the node ONNX Runtime names in its error, else None."""
    m = _RAISED.search(text or "")
    return (m.group(1), m.group(2)) if m else None


# ORT_ENFORCE's wording: "<file>:<line> <function> <condition> was false. <message>".
_ENFORCED = re.compile(r"^\S+\.(?:h|cc|cpp):\d+ .*? was false\.\s*")
_SOURCE = re.compile(r"^/\S+\.(?:h|cc|cpp):\d+ ")


def status_message(text: str) -> str:
    """What ONNX Runtime says went wrong in a node, as a maintainer quotes it: the status
    message without the source location and the enforced condition ("Unexpected mode of 3",
    "Tensor type mismatch. T=float ...")."""
    said = text.split("Status Message:", 1)[1].strip().split("\n", 1)[0] \
        if "Status Message:" in text else ""
    said = _ENFORCED.sub("", said) if _ENFORCED.match(said) else _SOURCE.sub("", said)
    return said.removeprefix("CPU execution provider: ").strip()


_NO_KERNEL = re.compile(r"NOT_IMPLEMENTED|Could not find an implementation for", re.I)
_BAD_DIMS = re.compile(r"Got invalid dimensions for input|invalid dimensions", re.I)


# Allocation failures as numpy (MemoryError), torch (DefaultCPUAllocator, CUDA), the C++
# runtime (std::bad_alloc) and ONNX Runtime's arena word them.
_NO_MEMORY = re.compile(
    r"MemoryError|can't allocate memory|Cannot allocate memory|bad_alloc|Unable to allocate"
    r"|Failed to allocate memory|out of memory|OutOfMemoryError|allocation failed", re.I)


def classify_load_error(message: str) -> Outcome:
    """A session that will not load: out of memory, a missing kernel (runtime gap) or an
    invalid graph."""
    if _NO_MEMORY.search(message):
        return Outcome.OUT_OF_MEMORY
    return Outcome.NO_KERNEL if _NO_KERNEL.search(message) else Outcome.INVALID_MODEL


def classify_run_error(message: str, batch_size: int | None = None,
                       export_batch: int | None = None) -> Outcome:
    """An allocation failure is out of memory; a run that fails at a batch size other than
    the exported one is a baked shape (only when both are known: the op sweep has no batch
    dimension)."""
    if _NO_MEMORY.search(message):
        return Outcome.OUT_OF_MEMORY
    if (batch_size is not None and export_batch is not None and batch_size != export_batch
            and _BAD_DIMS.search(message)):
        return Outcome.BAKED_SHAPE
    if _NO_KERNEL.search(message):
        return Outcome.NO_KERNEL
    return Outcome.RUNTIME_ERROR


def memory_failure(error: BaseException | str, input_bytes: int | None = None) -> str | None:
    """The reason of an OUT_OF_MEMORY case when `error` is an allocation failure, naming the
    worker's memory limit and the case's input size; None for any other error."""
    message = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
    if not isinstance(error, MemoryError) and not _NO_MEMORY.search(message):
        return None
    gpu = re.search(r"CUDA|cuda|GPU|device memory", message) is not None
    asked = _REQUEST.search(message) or _REQUEST_TEXT.search(message)
    request = "an allocation" if asked is None else "a request for " + (
        human_size(int(asked.group(1))) if asked.re is _REQUEST
        else asked.group(1).replace(" ", ""))
    limit = _limit()
    where = "ran out of GPU memory" if gpu else "did not fit in memory (no worker memory " \
        "limit set)" if limit is None else f"did not fit under the worker's memory limit " \
        f"of {limit}"
    size = f", with {human_size(input_bytes)} of inputs" if input_bytes is not None else ""
    fix = "a smaller case or a larger GPU" if gpu else "raise `worker_memory` or use a " \
        "smaller case"
    said = "" if asked else f": {first_line(message, 160)}"
    return f"out of memory: {request} {where}{size} ({fix}){said}"


_REQUEST = re.compile(r"(?:buffer of size|tried to allocate) (\d+)(?![\d.])")
_REQUEST_TEXT = re.compile(r"(?:[Uu]nable to allocate|[Tt]ried to allocate) ([\d.]+ ?[KMGTP]i?B)")


def _limit() -> str | None:
    """This process's RLIMIT_DATA as the pool set it (`worker_memory`), in words; None
    when there is none."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_DATA)[0]
    except (ImportError, OSError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY else human_size(soft)


def first_line(message: str, limit: int = 300) -> str:
    text = " ".join(line.strip() for line in message.strip().splitlines() if line.strip())
    text = strip_control(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
