"""Execution providers by name: the table, availability and the session's provider chain.

Pure (no onnxruntime import): the planner decides skips from the list that
`onnxruntime.get_available_providers()` returned, which the caller passes in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parity_gate.errors import UserError
from parity_gate.model.results import ABSENT_PROVIDER

EXECUTION_PROVIDERS: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}

# Strict parity reads: TF32 off on CUDA matches eager with TF32 disabled.
DEFAULT_PROVIDER_OPTIONS: dict[str, dict[str, Any]] = {
    "cuda": {"use_tf32": 0},
    "tensorrt": {},
    "cpu": {},
}


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""


def availability(name: str, available: list[str]) -> Availability:
    """Whether provider `name` can run here, and if not, a reason a user can act on."""
    ep = EXECUTION_PROVIDERS[name]
    if ep in available:
        return Availability(True)
    hint = {
        "cuda": "install onnxruntime-gpu and run on a machine with an NVIDIA GPU",
        "tensorrt": "install onnxruntime-gpu with TensorRT libraries on a GPU machine",
    }.get(name, "reinstall onnxruntime")
    said = ABSENT_PROVIDER.removeprefix("ExecutionProvider")
    return Availability(False, f"{ep}{said}{', '.join(available)}; {hint})")


def engine_cache_options(folder: str) -> dict[str, Any]:
    """TensorRT's engine and timing caches in `folder`: an engine is built once per model,
    shape profile and GPU, then loaded by every later session (the fusion re-check's, the
    profiled one, the next run's), so a build of seconds to minutes is paid once and
    never lands in a timed call."""
    return {"trt_engine_cache_enable": True, "trt_engine_cache_path": folder,
            "trt_timing_cache_enable": True, "trt_timing_cache_path": folder}


def provider_chain(name: str, options: dict[str, Any], cache: str | None = None
                   ) -> list[Any]:
    """The providers list for a session: the EP under test, then its usual fallbacks.
    `cache`: the folder for TensorRT's engine cache (engine_cache_options); the manifest's
    own options win over it."""
    merged = {**DEFAULT_PROVIDER_OPTIONS.get(name, {}),
              **(engine_cache_options(cache) if cache and name == "tensorrt" else {}),
              **options}
    if name == "cpu":
        return [("CPUExecutionProvider", merged)]
    if name == "cuda":
        return [("CUDAExecutionProvider", merged), "CPUExecutionProvider"]
    return [
        ("TensorrtExecutionProvider", merged),
        ("CUDAExecutionProvider", DEFAULT_PROVIDER_OPTIONS["cuda"]),
        "CPUExecutionProvider",
    ]


def check_names(names: list[str], flag: str = "--providers") -> None:
    """Unknown provider names are a usage error, said once for every caller."""
    unknown = [n for n in names if n not in EXECUTION_PROVIDERS]
    if unknown:
        raise UserError(f"{flag}: unknown provider {unknown[0]!r} "
                        f"(expected a comma-separated list of {', '.join(EXECUTION_PROVIDERS)})")
