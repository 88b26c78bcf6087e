"""Modules whose forward() takes structured inputs: a list of images of different sizes
(a detector's input) and a dict of tensors, declared in the manifest by dotted names."""

from __future__ import annotations

import torch


class ImageList(torch.nn.Module):
    """A detector-style head over a list of images of different sizes: each image is
    pooled to one vector, scaled by a per-image factor from a dict input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, images: list[torch.Tensor], extra: dict[str, torch.Tensor]
                ) -> dict[str, torch.Tensor]:
        pooled = [self.conv(img[None]).amax(dim=(2, 3)) for img in images]
        feats = torch.cat(pooled) * extra["scale"][:, None]
        return {"logits": self.head(feats), "bias": extra["offset"] + feats.mean()}


def image_list() -> torch.nn.Module:
    return ImageList().eval()
