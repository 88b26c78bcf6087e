"""Small float models the quantized tests quantize (seeded weights; calibrated on
generated data in the test)."""

from __future__ import annotations

import torch


class SmallCNN(torch.nn.Module):
    """Two convolutions and a classifier head: the QLinearConv / QGemm path."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 * 6 * 6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.head(y.flatten(1))


class SmallBlock(torch.nn.Module):
    """A transformer block's feed-forward half behind a self-attention projection: the
    QGemm / QLinearMatMul path."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.up = torch.nn.Linear(dim, 2 * dim)
        self.down = torch.nn.Linear(2 * dim, dim)
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(self.dim, dim=-1)
        attn = torch.softmax(q @ k.transpose(-1, -2) / self.dim ** 0.5, dim=-1)
        x = x + self.proj(attn @ v)
        return x + self.down(torch.relu(self.up(x)))


def cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return SmallCNN()


def block() -> torch.nn.Module:
    torch.manual_seed(0)
    return SmallBlock()
