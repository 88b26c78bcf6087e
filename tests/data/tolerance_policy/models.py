"""Modules for the default tolerance policy: correct exports whose float32 outputs
differ from eager at rounding level, and a real defect beside them."""

from __future__ import annotations

import torch


class Cancellation(torch.nn.Module):
    """The difference of two nearly equal wide Linear layers, beside one of them.

    Each difference is the rounding of two terms of size ~50, so eager and ONNX
    Runtime (another summation order) land up to ~3e-5 apart on values near zero:
    past the default atol of 1e-5, yet both as close to a float64 run as float32
    allows. No correct float32 implementation can do better."""

    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.a = torch.nn.Linear(64, width)
        self.b = torch.nn.Linear(64, width)
        with torch.no_grad():
            self.a.weight.mul_(50)
            self.b.weight.copy_(self.a.weight * (1 + 1e-6))
            self.b.bias.copy_(self.a.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.a(x) - self.b(x), self.a(x)], -1)


def cancellation() -> torch.nn.Module:
    return Cancellation()


class Shifted(Cancellation):
    """The same layers with a real defect in the export only: a value pattern no
    rounding explains (one block of outputs shifted by 0.01 under torch.export)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        if torch.compiler.is_exporting():
            out = torch.cat([out[..., :32] + 0.01, out[..., 32:]], -1)
        return out


def shifted() -> torch.nn.Module:
    return Shifted()


class Noisy(torch.nn.Module):
    """Draws random numbers in forward: a float64 run is one more draw, no truth."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)


def noisy() -> torch.nn.Module:
    return Noisy()


class Overflow(torch.nn.Module):
    """In float16 every value overflows to inf, in eager and in ONNX Runtime alike: inf
    equals inf, so the case passes having compared no number. (`big - big` no longer
    serves: the exporter's optimizer folds it to 0 where eager is NaN, a mismatch that
    only a float64 run, which does not overflow, excused.)"""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.abs() + 1) * 60000 * 60000


def overflow() -> torch.nn.Module:
    return Overflow()
