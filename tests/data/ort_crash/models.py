"""One float16 attention layer: ONNX Runtime 1.32's CPU provider segfaults while loading
its dynamo export at the highest graph optimization level (fine at the others)."""

from __future__ import annotations

import torch


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def attention() -> torch.nn.Module:
    return Attention()
