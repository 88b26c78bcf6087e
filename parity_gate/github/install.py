"""`container: none`: pip-install the gate from the action's own checkout. Stdlib-only."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path


def install_self(source: Path) -> int:
    """pip-install the gate from the action's checkout into this Python.

    With onnxruntime-gpu installed, the gate's `onnxruntime` requirement must not
    pull the CPU package: both install the `onnxruntime` module, and the later one
    wins, silently dropping the CUDA provider. Then the gate goes in without deps
    and its other requirements are installed by name.
    """
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    if not _installed("onnxruntime-gpu"):
        return subprocess.call([*pip, str(source)])
    rc = subprocess.call([*pip, "--no-deps", str(source)])
    if rc:
        return rc
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m, json; "
         "print(json.dumps(m.requires('parity-gate') or []))"],
        capture_output=True, text=True, check=True)
    reqs = [r for r in json.loads(probe.stdout) if not _is_extra(r) and _name(r) != "onnxruntime"]
    return subprocess.call([*pip, *reqs]) if reqs else 0


def _installed(dist: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def _is_extra(requirement: str) -> bool:
    return "extra" in requirement.partition(";")[2]


def _name(requirement: str) -> str:
    m = re.match(r"[A-Za-z0-9._-]+", requirement)
    return re.sub(r"[-_.]+", "-", m.group(0)).lower() if m else ""
