"""A small image classifier whose pooling uses divisor_override (a planted exporter defect)."""
import torch
import torch.nn.functional as F
from torch import nn


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = F.avg_pool2d(x, 2, divisor_override=3)
        return self.head(x.flatten(1))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_tinynet() -> nn.Module:
    torch.manual_seed(0)
    return TinyNet().eval()


def build_mlp() -> nn.Module:
    torch.manual_seed(0)
    return Mlp().eval()
