"""Test modules with real, unmocked defects: each misbehaves through torch/ORT itself."""

from __future__ import annotations

import ctypes
import os
import time

import torch
from torch import nn


class Healthy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


class ExportOnlyApproximation(nn.Module):
    """Takes a "faster" tanh-GELU only while exporting, as real code guarded by
    `torch.onnx.is_in_onnx_export()` does: the graph really differs from eager."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x) * 3
        if torch.onnx.is_in_onnx_export():
            return nn.functional.gelu(h, approximate="tanh")
        return nn.functional.gelu(h)


class BakedBatch(nn.Module):
    """`int(x.shape[0])` turns the batch size into a Python constant during export."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int(x.shape[0])
        return x + torch.arange(n, dtype=x.dtype).reshape(n, 1)


class Segfault(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)  # reads address 0: SIGSEGV in the worker
        return x


class Abort(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os.abort()


class Hang(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3600)
        return x


class TrainingMode(Healthy):
    pass


def healthy() -> nn.Module:
    return Healthy().eval()


def approximated() -> nn.Module:
    return ExportOnlyApproximation().eval()


def baked() -> nn.Module:
    return BakedBatch().eval()


def segfault() -> nn.Module:
    return Segfault().eval()


def abort() -> nn.Module:
    return Abort().eval()


def hang() -> nn.Module:
    return Hang().eval()


def training() -> nn.Module:
    return TrainingMode()  # left in training mode on purpose


class OutOfMemory(nn.Module):
    """Dies by SIGKILL, exactly as the kernel's OOM killer ends a process."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
        return x


def oom() -> nn.Module:
    return OutOfMemory().eval()


class TracedView(nn.Module):
    """`x.view(int(x.size(0)), -1)`: the legacy tracer records the batch as a literal."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x).unsqueeze(1)
        return h.view(int(h.size(0)), -1)


def traced_view() -> nn.Module:
    return TracedView().eval()
