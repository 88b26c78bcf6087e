"""A team's ranking models, each as a pull request would leave it: one bakes the batch
size into a reshape, one uses an op the exporter translates wrongly, one branches on a
tensor's value where torch.export cannot. Lines marked PLANTED are what the gate must name."""

import torch
from torch import nn


class Ranker(nn.Module):
    def __init__(self, variant: str) -> None:
        super().__init__()
        self.variant = variant
        self.embed = nn.Linear(16, 32)
        self.mix = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.embed(x))
        h = h + self.mix(h)
        if self.variant == "baked":
            n = int(h.shape[0])  # PLANTED: baked
            h = h.reshape(n, -1)
        elif self.variant == "values":
            idx = (torch.arange(h.shape[-1]) % 4).expand_as(h)
            pooled = torch.zeros(h.shape[0], 4, dtype=h.dtype).scatter_reduce(  # PLANTED: values
                1, idx, h, reduce="mean", include_self=False)
            h = h + pooled.repeat(1, h.shape[-1] // 4)
        elif self.variant == "export" and h.mean() > 0:  # PLANTED: export
            h = h * 2
        return self.head(h)


def build(variant: str) -> nn.Module:
    torch.manual_seed(0)
    return Ranker(variant).eval()
