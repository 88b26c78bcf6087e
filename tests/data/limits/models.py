"""A module whose exported graph needs gigabytes at one batch size while eager needs none.

Eager's `expand` is a view and `amax` reduces it in place, so the reference costs no
memory; ONNX Runtime's Expand materialises K*b*b*8 floats: ~270 MB at batch 2, over
3 GiB at batch 7. Under a 2 GiB worker limit only the batch-7 case runs out of memory.
"""

from __future__ import annotations

import torch
from torch import nn

K = 2_100_000


class Expanding(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        return x.unsqueeze(0).expand(K * b, b, x.shape[1]).amax(0)


def expanding() -> nn.Module:
    return Expanding().eval()
