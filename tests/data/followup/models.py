"""A follow-up check that meets an exporter defect of its own: a bias-less `Conv3d`
exported with `optimize: false` gets a bias ONNX Runtime rejects (onnxscript 0.7.2;
microsoft/onnxscript#2931), and the module mismatches for another reason (the wrongly
exported `scatter_reduce(reduce="mean", include_self=False)`), so the gate re-exports it
with the optimizer off to see whether the optimizer caused the mismatch."""

from __future__ import annotations

import torch


class VideoPool(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv3d(2, 4, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).flatten(1)
        idx = (torch.arange(h.shape[-1]) % 4).expand_as(h)
        return torch.zeros(h.shape[0], 4, dtype=h.dtype).scatter_reduce(
            1, idx, h, reduce="mean", include_self=False)


def video_pool() -> torch.nn.Module:
    return VideoPool()
