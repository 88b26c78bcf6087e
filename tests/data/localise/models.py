"""Modules whose localisation answer is known, for tests/test_localise.py.

- `ten_blocks`: ten Linear+ReLU blocks; the seventh (`blocks.6`) pools with
  `scatter_reduce(reduce="mean", include_self=False)`, which the pinned
  onnxscript exports wrongly (a known op-sweep finding): a real defect.
- `fused_scale`: `sin(1e4 · 0.37 · (x ⊗ w))`. ONNX Runtime's MatMulScaleFusion
  (optimization level "extended") folds the scale into the MatMul, which moves
  the last bits; the sine amplifies them: passes at "disabled"/"basic", fails
  from "extended". Ill-conditioned, so the float64 check calls it an artefact.
- `capture_only`: adds 1 only while `torch.export` traces: the exported
  program already differs from eager, so the capture owns the mismatch.
"""

from __future__ import annotations

import torch


class Block(torch.nn.Module):
    def __init__(self, d: int, pool: bool = False) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(x))
        if self.pool:
            idx = (torch.arange(h.shape[-1]) % 4).expand_as(h)
            pooled = torch.zeros(h.shape[0], 4, dtype=h.dtype).scatter_reduce(
                1, idx, h, reduce="mean", include_self=False)
            h = h + pooled.repeat(1, h.shape[-1] // 4)
        return h


class TenBlocks(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(d, pool=(i == 6)) for i in range(10)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class FusedScale(torch.nn.Module):
    """An outer product (inner dim 1: every product exact on both sides, so only the scale
    folding differs), scaled twice, through a sine that amplifies the last bits."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(torch.matmul(x.unsqueeze(-1), self.w) * 0.37 * 1e4)


class CaptureOnly(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if torch.compiler.is_exporting():
            y = y + 1.0
        return y


def ten_blocks() -> torch.nn.Module:
    return TenBlocks()


def fused_scale() -> torch.nn.Module:
    return FusedScale()


def capture_only() -> torch.nn.Module:
    return CaptureOnly()
