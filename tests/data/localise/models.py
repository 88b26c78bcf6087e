"""Modules whose localisation answer is known, for tests/test_localise.py.

A defect planted in each position the blame rule must tell apart:

- `ten_blocks`: ten Linear+ReLU blocks; the seventh (`blocks.6`) first pools in
  its own forward with `scatter_reduce(reduce="mean", include_self=False)`, which
  the pinned onnxscript exports wrongly (a known op-sweep finding), then feeds
  the result to its child `fc`: the block's own code owns it, not the Linear.
- `two_deep`: three stages of Linear → Mixer → Linear; the middle stage's Mixer
  (`stages.1.mix`, two levels down, siblings after it) pools the same way.
- `root_code`: the same pool in the root module's own forward.
- `called_twice`: one module object called at two places; its second call gets
  NaN (sqrt of negatives) and `amax` there is ONNX Runtime's: its CPU ReduceMax
  returns a number where eager (and ONNX's reference evaluator) propagate NaN.
- `nan_sign`: `sign(sqrt(...))`: torch's sign of NaN is 0, ONNX's Sign gives
  NaN, in ONNX Runtime and in ONNX's reference evaluator alike: the translation
  owns it (a NaN-only divergence).
- `maxpool_nan`: `max_pool1d` over NaN: ONNX Runtime's CPU MaxPool returns a
  number where eager propagates NaN. MaxPool's definition (the max of each
  window; the max of a set holding NaN is NaN) gives eager's answer: the graph
  is right and the runtime's kernel owns it. ONNX's reference evaluator, which
  propagates a NaN only when it comes first in a window, is not the oracle here.
- `clean`: a Linear that passes: nothing to localise.
- `fused_scale`: `sin(1e4 · 0.37 · (x ⊗ w))`. ONNX Runtime's MatMulScaleFusion
  (optimization level "extended") folds the scale into the MatMul, which moves
  the last bits; the sine amplifies them: passes at "disabled"/"basic", fails
  from "extended". Ill-conditioned, so the float64 check calls it an artefact.
- `capture_only`: adds 1 only while `torch.export` traces: the exported
  program already differs from eager, so the capture owns the mismatch.
"""

from __future__ import annotations

import torch


def mean_pool(h: torch.Tensor) -> torch.Tensor:
    """Mean of every fourth feature, spread back: the wrongly exported scatter_reduce."""
    idx = (torch.arange(h.shape[-1]) % 4).expand_as(h)
    pooled = torch.zeros(h.shape[0], 4, dtype=h.dtype).scatter_reduce(
        1, idx, h, reduce="mean", include_self=False)  # PLANTED: scatter_reduce
    return pooled.repeat(1, h.shape[-1] // 4)


class Block(torch.nn.Module):
    def __init__(self, d: int, pool: bool = False) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pool:
            x = x + mean_pool(x)
        return torch.relu(self.fc(x))


class TenBlocks(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(d, pool=(i == 6)) for i in range(10)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class FusedScale(torch.nn.Module):
    """An outer product (inner dim 1: every product exact on both sides, so only the scale
    folding differs), scaled twice, through a sine that amplifies the last bits."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(torch.matmul(x.unsqueeze(-1), self.w) * 0.37 * 1e4)


class CaptureOnly(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if torch.compiler.is_exporting():
            y = y + 1.0
        return y


class Mixer(torch.nn.Module):
    def __init__(self, pool: bool) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + mean_pool(x) if self.pool else x * 0.5


class Stage(torch.nn.Module):
    def __init__(self, d: int, pool: bool) -> None:
        super().__init__()
        self.a = torch.nn.Linear(d, d)
        self.mix = Mixer(pool)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.mix(self.a(x)))


class TwoDeep(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.stages = torch.nn.ModuleList([Stage(d, pool=(i == 1)) for i in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        return x


class RootCode(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = h + mean_pool(h)
        return self.out(h)


class Centre(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - torch.amax(x, -1, keepdim=True)  # PLANTED: amax


class CalledTwice(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.shared = Centre()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.shared(x)
        return self.shared(torch.sqrt(self.fc(h)))  # NaN where fc(h) < 0


class NanSign(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sign(torch.sqrt(self.fc(x))) + 1.0  # PLANTED: sign


class MaxPoolNan(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sqrt(self.fc(x)).unsqueeze(1)
        return torch.nn.functional.max_pool1d(h, 2, 2).squeeze(1)  # PLANTED: max_pool1d


def two_deep() -> torch.nn.Module:
    return TwoDeep()


def root_code() -> torch.nn.Module:
    return RootCode()


def called_twice() -> torch.nn.Module:
    return CalledTwice()


def nan_sign() -> torch.nn.Module:
    return NanSign()


def maxpool_nan() -> torch.nn.Module:
    return MaxPoolNan()


class Clean(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def clean() -> torch.nn.Module:
    return Clean()


def ten_blocks() -> torch.nn.Module:
    return TenBlocks()


def fused_scale() -> torch.nn.Module:
    return FusedScale()


def capture_only() -> torch.nn.Module:
    return CaptureOnly()
