"""The vision zoo's models: torchvision and timm architectures with seeded random
weights, built in code (no download: `weights=None`, `pretrained=False`).

Needs the vision extra (`pip install 'parity-gate[vision]'`: torchvision and timm,
with a torch that torchvision supports). Small input sizes keep the zoo fast; every
model here accepts them (adaptive pooling, or an image size passed to the model).
"""

from __future__ import annotations

from typing import Any

import torch


class DictOut(torch.nn.Module):
    """A segmentation model's `{"out": ..., "aux": ...}` as named outputs: the gate
    names a dict output's leaves by their keys (`out`, `aux`)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(self.model(x))


def torchvision_model(name: str, **kwargs: Any) -> torch.nn.Module:
    """`torchvision.models.get_model(name, weights=None, **kwargs)`, in eval mode; a
    segmentation model's OrderedDict output as a plain dict."""
    import torchvision

    models = torchvision.models
    segmentation = name in models.list_models(module=models.segmentation)
    if segmentation or name in models.list_models(module=models.detection):
        kwargs.setdefault("weights_backbone", None)  # its default downloads the backbone
    model = models.get_model(name, weights=None, **kwargs)
    return (DictOut(model) if segmentation else model).eval()


def timm_model(name: str, **kwargs: Any) -> torch.nn.Module:
    """`timm.create_model(name, pretrained=False, **kwargs)`, in eval mode."""
    import timm

    return timm.create_model(name, pretrained=False, **kwargs).eval()
