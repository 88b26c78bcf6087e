"""A tiny detector: proposals in, detections of data-dependent count out (as torchvision's
detectors return them: boxes [N, 4], scores [N], labels [N], highest score first)."""

from __future__ import annotations

import torch


class TinyDetector(torch.nn.Module):
    """Scores each proposal (a row of 6 features), keeps those scoring over 0.5."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(6, 4 + 1 + 3)

    def decode(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.head(x)
        xy = out[:, :2] * 10
        wh = torch.nn.functional.softplus(out[:, 2:4]) * 5
        boxes = torch.cat([xy, xy + wh], -1)
        scores = torch.sigmoid(out[:, 4])
        labels = out[:, 5:].argmax(-1)
        keep = scores > 0.5
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        order = torch.argsort(scores, descending=True)
        return {"boxes": boxes[order], "scores": scores[order], "labels": labels[order]}

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.decode(x)


class ShiftedDetector(TinyDetector):
    """The same, with a defect in the export only: every box moved by 3."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        found = self.decode(x)
        if torch.compiler.is_exporting():
            found["boxes"] = found["boxes"] + 3
        return found


def tiny() -> torch.nn.Module:
    return TinyDetector()


def shifted() -> torch.nn.Module:
    return ShiftedDetector()


class StricterDetector(TinyDetector):
    """A defect in the export only: a higher score threshold, so fewer detections."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        found = self.decode(x)
        if torch.compiler.is_exporting():
            keep = found["scores"] > 0.6
            found = {k: v[keep] for k, v in found.items()}
        return found


def stricter() -> torch.nn.Module:
    return StricterDetector()
