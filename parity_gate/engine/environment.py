"""Versions and hardware a run used, so a result can be reproduced or explained."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from typing import Any

_PACKAGES = ("torch", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu", "numpy")


def package_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def gpu_info() -> dict[str, str] | None:
    """GPU name, driver and CUDA version from nvidia-smi; None on machines without one."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        query = subprocess.run(
            [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip().splitlines()
        banner = subprocess.run([smi], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    if not query:
        return None
    name, _, driver = query[0].partition(",")
    cuda = ""
    if "CUDA Version:" in banner:
        cuda = banner.split("CUDA Version:")[1].split()[0]
    return {"name": name.strip(), "driver": driver.strip(), "cuda": cuda, "count": str(len(query))}


def versions(providers_available: list[str]) -> dict[str, Any]:
    info: dict[str, Any] = {
        **package_versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "providers_available": providers_available,
    }
    gpu = gpu_info()
    if gpu:
        info["gpu"] = gpu
    return info


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, as in a container or under
    `taskset`), else every core: the default --jobs."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return os.cpu_count() or 1
