"""Modules for the robustness tests: each misbehaves for real (processes, output, hangs)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


class Hang(Small):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3600)
        return x


def small() -> nn.Module:
    return Small().eval()


def _record_pid(pid: int) -> None:
    """Writes the pid whole or not at all: the tests poll for the file and read it."""
    path = Path(os.environ["ROBUST_CHILD_PID_FILE"])
    part = path.with_name(path.name + ".part")
    part.write_text(str(pid))
    os.replace(part, path)


def slow() -> nn.Module:
    """Builds for a few seconds: the window in which the tests send their signals. With
    ROBUST_CHILD_PID_FILE set, it first starts a child in a session of its own."""
    if os.environ.get("ROBUST_CHILD_PID_FILE"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"],
                                 start_new_session=True)
        _record_pid(child.pid)
    time.sleep(float(os.environ.get("ROBUST_SLOW_S", "6")))
    return Small().eval()


def spawner() -> nn.Module:
    """Starts a child process of its own in a new session (out of the worker's process
    group, as a daemon-like helper would be), records its pid, then hangs."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"],
                             start_new_session=True)
    _record_pid(child.pid)
    return Hang().eval()


def chatty() -> nn.Module:
    """Prints a value without a newline (block-buffered unless flushed) and passes."""
    print(f"chatty says {os.environ.get('ROBUST_LEAK_VALUE', '')}", end="")
    return Small().eval()


def crasher() -> nn.Module:
    """Prints a token it should not, then segfaults. The gate's $ROBUST_TEST_TOKEN never
    reaches a worker (no credential does); the model knows the same value another way
    ($ROBUST_SECRET_COPY), and the gate still masks it in what it records."""
    assert "ROBUST_TEST_TOKEN" not in os.environ, "a credential reached the model"
    print(f"crasher holds {os.environ.get('ROBUST_SECRET_COPY', '')}", flush=True)
    ctypes.string_at(0)
    return Small().eval()
