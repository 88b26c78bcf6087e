"""Tiny modules whose exported graph really differs from eager, by a factory kwarg.

`torch.onnx.is_in_onnx_export()` is True only while torch.onnx.export traces, so
`offset` is added to the exported graph and never to eager: the ONNX Runtime
output is off by exactly `offset`, a real, controllable eager/ONNX divergence
(offset 0 matches). `unsqueeze` gives the exported output an extra leading dim,
a worse outcome (shape_mismatch) than a value mismatch.
"""

from __future__ import annotations

import torch
from torch import nn


class ExportDrift(nn.Module):
    def __init__(self, offset: float, unsqueeze: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.offset = offset
        self.unsqueeze = unsqueeze

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if torch.onnx.is_in_onnx_export():
            y = y + self.offset
            if self.unsqueeze:
                y = y.unsqueeze(0)
        return y


def drift(offset: float = 0.0, unsqueeze: bool = False) -> nn.Module:
    torch.manual_seed(0)
    return ExportDrift(offset, unsqueeze).eval()
