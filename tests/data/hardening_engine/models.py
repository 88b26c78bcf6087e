"""Modules for tests/test_hardening_engine.py: each ends its job its own way, for real."""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


def _exporting() -> bool:
    return bool(torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting())


def small() -> nn.Module:
    return Small().eval()


def exit_factory() -> nn.Module:
    """A library that calls sys.exit on a config it does not like, with status 0."""
    sys.exit(0)


class ExitForward(Small):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise SystemExit(3)


def exit_forward() -> nn.Module:
    return ExitForward().eval()


class InterruptForward(Small):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt


def interrupt_forward() -> nn.Module:
    return InterruptForward().eval()


class ExitExport(Small):
    """Fine in eager; exits while the exporter traces it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _exporting():
            sys.exit()
        return super().forward(x)


def exit_export() -> nn.Module:
    return ExitExport().eval()


class OsExit0(Small):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os._exit(0)


def os_exit0() -> nn.Module:
    return OsExit0().eval()


def _write_everywhere(data: bytes) -> None:
    """Write `data` into every descriptor 3..255 this process has open."""
    for fd in range(3, 256):
        with contextlib.suppress(OSError):
            os.write(fd, data)


class StrayGarbage(Small):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _exporting():
            _write_everywhere(b"\x00stray bytes from model code\n" * 4)
        return super().forward(x)


def stray_garbage() -> nn.Module:
    return StrayGarbage().eval()


class CreatesFile:
    """Unpickling this creates the file HARDENING_PWNED names."""

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (os.environ["HARDENING_PWNED"], "w"))


class StrayPickle(Small):
    """Writes a multiprocessing-framed pickle (4-byte length, payload) everywhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _exporting():
            payload = pickle.dumps(CreatesFile())
            _write_everywhere(struct.pack("!i", len(payload)) + payload)
        return super().forward(x)


def stray_pickle() -> nn.Module:
    return StrayPickle().eval()


def stray_child() -> nn.Module:
    """A helper process the module starts keeps every descriptor it may inherit
    (close_fds=False) and writes garbage into all of them: none is the gate's channel."""
    code = ("import os\nfor fd in range(3, 256):\n    try: os.write(fd, b'\\x00child garbage')\n"
            "    except OSError: pass\n")
    subprocess.run([sys.executable, "-c", code], close_fds=False, check=True)
    return Small().eval()


class ExitInFloat64(Small):
    """Exports wrong (+1 in the graph), and exits when run in float64, which only the
    mismatch's re-check against float64 does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float64:
            sys.exit(5)
        y = super().forward(x)
        return y + 1 if _exporting() else y


def exit_in_recheck() -> nn.Module:
    return ExitInFloat64().eval()


class ExitInSecondFloat64(Small):
    """Exports wrong (+1 in the graph); its first float64 run (the gate's re-check) works,
    the next one (localisation's conditioning check, a follow-up job) exits."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float64:
            seen = Path(os.environ["HARDENING_PWNED"]).with_name("float64-ran")
            if seen.exists():
                sys.exit(6)
            seen.touch()
        y = super().forward(x)
        return y + 1 if _exporting() else y


def exit_in_localise() -> nn.Module:
    return ExitInSecondFloat64().eval()
