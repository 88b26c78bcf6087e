"""A genuinely slow export and a control (tests/test_performance.py, benchmarks).

`Patches` is `F.unfold` (im2col): the exporter writes it as Pad, Gather and Reshape
over precomputed index tensors, which ONNX Runtime runs several times slower than
torch's own im2col kernel (about 5x on one CPU thread, measured side by side).
`MLP` is two Linear layers: ONNX Runtime is as fast as eager or faster.
"""

from __future__ import annotations

import torch


class Patches(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.unfold(x, 3)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(256, 256)
        self.b = torch.nn.Linear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))
