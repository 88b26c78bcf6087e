"""Twenty-odd small models with dynamic spatial or sequence dims whose export assumes
something about those sizes (issue 41). Each is exported at the manifest's first size;
`compare.py` runs the declared sizes alone, then `shapes: auto`, and counts what each
finds."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class AdaptivePool4(nn.Module):  # AdaptiveAvgPool2d(4) at 20x20 (the defect)
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x))


class AdaptivePool7(nn.Module):  # ResNet's head size, exported at 14x14
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, 7)


class AdaptiveMax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_max_pool2d(x, 4)


class AdaptivePool1d(nn.Module):  # a sequence pooled to 8 steps
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool1d(x.transpose(1, 2), 8)


class ViewSixteen(nn.Module):  # the pitfall guides' view(-1, 16)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(-1, 16).mean(-1)


class WindowAttention(nn.Module):  # the window must divide the length
    def __init__(self, window: int = 4, dim: int = 8) -> None:
        super().__init__()
        self.window = window
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        torch._check(t % self.window == 0)
        q, k, v = self.qkv(x).reshape(b, t // self.window, self.window, 3, c).unbind(3)
        att = (q @ k.transpose(-1, -2) / c ** 0.5).softmax(-1)
        return (att @ v).reshape(b, t, c)


class PaddedWindows(nn.Module):  # Swin-style: pad to a multiple of the window, crop back
    def __init__(self, window: int = 4) -> None:
        super().__init__()
        self.window = window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        pad = (-t) % self.window
        y = F.pad(x, (0, 0, 0, pad)).reshape(b, -1, self.window, c)
        return (y - y.mean(2, keepdim=True)).reshape(b, -1, c)[:, :t]


class InterpScale(nn.Module):  # nearest x1.5, then a stride-2 conv back
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=1.5, mode="nearest"))


class InterpHalf(nn.Module):  # bilinear x0.5
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False)


class InterpSize(nn.Module):  # an explicit computed size
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        return F.interpolate(x, size=(h * 2 - 1, w // 2 + 1), mode="bilinear")


class PixelShuffle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 12, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pixel_shuffle(self.conv(x), 2)


class PixelUnshuffle(nn.Module):  # needs even h and w
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pixel_unshuffle(x, 2)


class UnfoldFold(nn.Module):  # patches out and back
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        patches = F.unfold(x, kernel_size=2, stride=2)
        return F.fold(patches * 2, output_size=(h, w), kernel_size=2, stride=2)


class StridedUNet(nn.Module):  # down by 2, up by 2, skip add: odd sizes do not line up
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(6, 3, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(self.down(x))


class StridedConv(nn.Module):  # computed output sizes, flattened
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 5, stride=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).flatten(2).softmax(-1)


class CeilMaxPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, 2, ceil_mode=True)


class CeilAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 3, stride=2, ceil_mode=True, count_include_pad=False)


class Patchify(nn.Module):  # view with computed sizes (ViT patches by reshape)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = x.reshape(b, c, h // 4, 4, w // 4, 4).permute(0, 2, 4, 1, 3, 5)
        return p.reshape(b, (h // 4) * (w // 4), c * 16)


class PatchEmbed(nn.Module):  # conv with kernel = stride = 4
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 4, stride=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class SquareOnly(nn.Module):  # x + x^T: h must equal w
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.transpose(2, 3)


class UpsampleCrop(nn.Module):  # x2 then crop back to the input size
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        return F.interpolate(x, scale_factor=2, mode="nearest")[..., 1:h + 1, 1:w + 1]


class Conv1dUNet(nn.Module):  # a sequence down and up by 2, skip add
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv1d(8, 8, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose1d(8, 8, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.transpose(1, 2)
        return (y + self.up(self.down(y))).transpose(1, 2)


class PositionTable(nn.Module):  # learned positions up to 64: longer is eager's error
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 64, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pos[:, : x.shape[1]]


class ChunkMix(nn.Module):  # chunk the length in 4 and mix the chunks
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, c, d = x.chunk(4, dim=1)
        return torch.cat([d, c, b, a], dim=1)


class SplitHalves(nn.Module):  # split the length in halves of size t // 2
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        return x[:, : t // 2] * x[:, t // 2: 2 * (t // 2)]


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    return globals()[name]().eval()
