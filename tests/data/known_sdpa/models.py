"""Attention with one fully masked query row, the two ways a mask can say it.

The mask is a buffer, so the exported graph holds it exactly as eager does; only
`F.scaled_dot_product_attention` on that row differs. The op sweep knows both: a float
mask of -inf (ORT gives NaN, eager does not) and a bool mask of False (ORT gives the mean
of V where eager gives zeros). A localised culprit must cite the finding of its own mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class MaskedAttention(torch.nn.Module):
    def __init__(self, mask: torch.Tensor) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.proj(x).reshape(x.shape[0], 2, 4, 2)  # (batch, heads, tokens, dim)
        return F.scaled_dot_product_attention(qkv, qkv, qkv, attn_mask=self.mask)


def float_mask_row() -> torch.nn.Module:
    """Row 1 of the additive mask is all -inf."""
    torch.manual_seed(0)
    mask = torch.zeros(4, 4)
    mask[1] = float("-inf")
    return MaskedAttention(mask).eval()


def bool_mask_row() -> torch.nn.Module:
    """Row 2 of the boolean mask is all False (nothing may be attended)."""
    torch.manual_seed(0)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    return MaskedAttention(mask).eval()
