"""Modules whose low-precision mismatch a float64 run must not excuse (issue 34)."""

from __future__ import annotations

import torch


class Overflow(torch.nn.Module):
    """float32 overflows to inf at the second multiply, where float64 holds 1e39; the
    exported clamp turns inf into FLT_MAX, so every large element differs. In float64
    nothing overflows: that run computes another function and cannot referee."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(x)
        big = (h * 1e38) * 10
        c = torch.clamp(big, min=0.25)
        return torch.exp(-c * 1e-39) * h


def overflow() -> torch.nn.Module:
    return Overflow()


class Scaled(torch.nn.Module):
    """The same shape of computation with no overflow: nothing for the range check."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * 3.0


def scaled() -> torch.nn.Module:
    return Scaled()


class Trunc(torch.nn.Module):
    """Truncating division in float16: eager rounds the quotient to float16 before it
    truncates, ONNX Runtime truncates the wider quotient; a whole unit apart where the
    quotient sits within one float16 rounding of an integer."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.div(x, y, rounding_mode="trunc")


def trunc() -> torch.nn.Module:
    return Trunc()


class Stepped(Trunc):
    """A real defect on a discrete output: the export adds one to a block of quotients."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = super().forward(x, y)
        if torch.compiler.is_exporting():
            out = torch.cat([out[..., :64] + 1, out[..., 64:]], -1)
        return out


def stepped() -> torch.nn.Module:
    return Stepped()
