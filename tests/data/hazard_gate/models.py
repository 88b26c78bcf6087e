"""A module that matches eager but comes from its factory in training mode (with dropout)."""

from __future__ import annotations

import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.fc(x)))


def training_net() -> torch.nn.Module:
    return Net()  # not .eval(): the training-mode rule fires
