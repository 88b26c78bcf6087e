"""A digits classifier trained at build time on scikit-learn's digits (shipped inside the
package: nothing is downloaded), and the same classifier with a planted export-only
defect that flips about 1 % of its labels."""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn


@functools.lru_cache(maxsize=1)
def digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 digits as float32 [0, 1] pixels (64 each) and their labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return (data.data / 16.0).astype(np.float32), data.target.astype(np.int64)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        self.register_buffer("shift", torch.zeros(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.body(x)
        if torch.onnx.is_in_onnx_export():  # the planted defect (zero for the clean model)
            logits = logits + self.shift
        return logits


@functools.lru_cache(maxsize=1)
def _trained() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Classifier()
    images, labels = (torch.from_numpy(a) for a in digits())
    optimiser = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(150):
        optimiser.zero_grad()
        nn.functional.cross_entropy(model.body(images), labels).backward()
        optimiser.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def classifier() -> nn.Module:
    model = Classifier()
    model.load_state_dict(_trained())
    return model.eval()


def planted(share: float = 0.01, target: int = 3) -> nn.Module:
    """Adds to class `target`'s logit, while exporting, the margin that moves about `share`
    of the digits to it (the samples nearest to it)."""
    model = classifier()
    images = torch.from_numpy(digits()[0])
    with torch.no_grad():
        logits = model.body(images)
    gap = logits.max(dim=1).values - logits[:, target]
    gap = gap[logits.argmax(dim=1) != target]
    margin = float(torch.quantile(gap, share)) + 1e-4
    model.shift[target] = margin
    return model
