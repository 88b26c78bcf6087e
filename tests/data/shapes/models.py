"""Models whose dynamic dims the export makes assumptions about (issue 41): each module
is exported at one size; `shapes: auto` probes the sizes around what it assumed."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn


class AdaptivePool(nn.Module):
    """AdaptiveAvgPool2d(4) exported at 20x20: torch 2.13's decomposition writes an
    AveragePool with a fixed window, right only when h and w are 16..19 + 4k... (h % 4 == 0
    and h // 4 == 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x)).flatten(1)


class ViewSixteen(nn.Module):
    """The pitfall guides' `view(-1, 16)`: every size is fine while batch * n is a
    multiple of 16; eager rejects the rest."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(-1, 16).sum(-1)


class Square(nn.Module):
    """`x + x.transpose(2, 3)` needs h == w: the export merges the two dims."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.transpose(2, 3)


class Windowed(nn.Module):
    """Windowed attention whose window must divide the length (torch._check)."""

    def __init__(self, window: int = 4, dim: int = 8) -> None:
        super().__init__()
        self.window = window
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        torch._check(t % self.window == 0)
        q, k, v = self.qkv(x).reshape(b, t // self.window, self.window, 3, c).unbind(3)
        att = (q @ k.transpose(-1, -2) / c ** 0.5).softmax(-1)
        return (att @ v).reshape(b, t, c)


class Interp(nn.Module):
    """interpolate with a scale factor, then a stride-2 conv back."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=1.5, mode="nearest"))


class CheckedEven(nn.Module):
    """A size check eager makes and the ONNX graph drops: odd lengths are refused by eager
    and silently served by the export."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.shape[1] % 2 == 0)
        return x * 2


class CrashOnNine(nn.Module):
    """Kills its process at length 9 in eager (never while exporting): a probe that
    crashes the worker must still be reported."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_exporting() and x.shape[1] == 9:
            os._exit(3)
        return x + 1


class StridedSkip(nn.Module):
    """A stride-2 nn.Conv2d added to x halved by F.interpolate: the conv assumes a non-empty
    input; the add, that the two halves agree in size ((h - 1) // 2 + 1 == h // 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, 3, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.down(x)
        half = F.interpolate(x, scale_factor=0.5, mode="nearest")
        return y + half


class FunctionalConv(nn.Module):
    """F.conv2d called directly (no module): the call itself is the op."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 3, 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, stride=2, padding=1)


class Unshuffle(nn.Module):
    """F.pixel_unshuffle(x, 2) needs even h and w."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pixel_unshuffle(x, 2)


class HalfAndBack(nn.Module):
    """F.interpolate down by 2 and up again, added to x: the add assumes h and w even."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.interpolate(x, scale_factor=0.5, mode="nearest")
        return F.interpolate(y, scale_factor=2.0, mode="nearest") + x


def build(name: str) -> nn.Module:
    return globals()[name]().eval()
