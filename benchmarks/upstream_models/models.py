"""Small blocks a user would write, each reproducing one defect the op sweep found on
torch 2.13 / onnxscript 0.7.2 / onnxruntime 1.32 (tests/data/upstream/bundled-findings),
plus three controls that must pass.

The trigger lives where it would in a real model: a buffer (an attention mask, a pooling
divisor, a wrap period), a value the block computes (log of a ReLU, a rounded small
number), or the input (an empty token axis). Weights are seeded; nothing is downloaded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class _Seeded(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 8)


class MeanPoolHead(_Seeded):
    """Sentence embedding: the mean of token features; a batch with no tokens."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, tokens=0, 8)
        return torch.mean(self.proj(x), dim=1)


class VarianceFeature(_Seeded):
    """Per-example spread of token features (a confidence head); no tokens."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.var(self.proj(x), dim=1)


class LogSpaceCap(_Seeded):
    """Log-activations capped from above: log of a ReLU is -inf where the unit is off."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(torch.log(torch.relu(self.proj(x))), max=0.0)


class PoolWithDivisor(torch.nn.Module):
    """Conv features pooled with a fixed divisor (a 'sum-like' pool)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.pool = torch.nn.AvgPool2d(2, divisor_override=3)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(img))


class PaddedAttention(_Seeded):
    """Self-attention over 4 tokens whose mask hides everything from token 1."""

    def __init__(self, mask: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x).reshape(x.shape[0], 1, 4, 2)
        return F.scaled_dot_product_attention(h, h, h, attn_mask=self.mask)


class GridAngle(torch.nn.Module):
    """Angle of integer grid offsets (a relative-position feature)."""

    def forward(self, dy: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
        return torch.atan2(dy, dx)


class QuantisedSign(_Seeded):
    """Sign bits of quantised activations: small negatives round to -0.0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.signbit(torch.round(self.proj(x) * 0.2))


class PhaseWrap(_Seeded):
    """Wraps phases by a configured period; inf means 'no wrap'."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("period", torch.tensor(float("inf")))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.remainder(self.proj(x), self.period)


class OverflowGuard(_Seeded):
    """Flags activations that overflow when scaled in float64."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.isposinf(self.proj(x).double() * 1.7e308)


class SmoothedLoss(_Seeded):
    """A classifier that returns its training loss (label smoothing 0.1)."""

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.proj(x), target, label_smoothing=0.1)


class ScaledTail(_Seeded):
    """A Mills-ratio tail term of large scaled activations."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.erfcx(self.proj(x) * 1e4)


class SanitisedLogits(_Seeded):
    """float64 log-probabilities with -inf/inf replaced by finite defaults."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logp = torch.log(torch.relu(self.proj(x)).double()) * -1.0
        return torch.nan_to_num(logp)


def mean_pool_head() -> torch.nn.Module:
    return MeanPoolHead().eval()


def variance_feature() -> torch.nn.Module:
    return VarianceFeature().eval()


def log_space_cap() -> torch.nn.Module:
    return LogSpaceCap().eval()


def pool_with_divisor() -> torch.nn.Module:
    return PoolWithDivisor().eval()


def bool_mask_attention() -> torch.nn.Module:
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    return PaddedAttention(mask).eval()


def float_mask_attention() -> torch.nn.Module:
    mask = torch.zeros(4, 4)
    mask[1] = float("-inf")
    return PaddedAttention(mask).eval()


def grid_angle() -> torch.nn.Module:
    return GridAngle().eval()


def quantised_sign() -> torch.nn.Module:
    return QuantisedSign().eval()


def phase_wrap() -> torch.nn.Module:
    return PhaseWrap().eval()


def overflow_guard() -> torch.nn.Module:
    return OverflowGuard().eval()


def smoothed_loss() -> torch.nn.Module:
    return SmoothedLoss().eval()


def scaled_tail() -> torch.nn.Module:
    return ScaledTail().eval()


def sanitised_logits() -> torch.nn.Module:
    return SanitisedLogits().eval()


# ---- controls: ordinary blocks that must pass


class _Block(torch.nn.Module):
    def __init__(self, *layers: torch.nn.Module) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class _ConvBlock(_Block):
    def forward(self, img: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.body(img)


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return _Block(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)).eval()


def norm_block() -> torch.nn.Module:
    torch.manual_seed(0)
    return _Block(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.SiLU()).eval()


def conv_pool() -> torch.nn.Module:
    torch.manual_seed(0)
    return _ConvBlock(torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.ReLU(),
                      torch.nn.MaxPool2d(2)).eval()
