"""Small real modules, one per false-alarm class of issue 10 (tests/test_false_alarms.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class TwinHead(nn.Module):
    """A classifier whose classes 0 and 1 are one score computed two ways (a matmul and
    a multiply-and-sum). Mathematically a tie on every sample; in float16 the two round
    apart by an ulp, differently in eager and in ONNX Runtime, so top-1 "flips" between
    them although neither side is wrong. Classes 2, 3 are far below (never the top)."""

    def __init__(self, features: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, features), nn.Tanh())
        self.w = nn.Parameter(torch.randn(features, 1))
        self.rest = nn.Linear(features, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        a = h @ self.w
        b = (h * self.w[:, 0]).sum(-1, keepdim=True)
        return torch.cat([a, b, self.rest(h) - 10.0], dim=-1)


def twin_head() -> nn.Module:
    return TwinHead()


class MaskedAttention(nn.Module):
    """The 15-line repro: self-attention (SDPA) with a batched float mask (the padding
    mask plus a per-head bias, as T5 and Swin build it), its output made contiguous and
    reshaped back to (batch, seq, dim). The exporter's decomposition turns that reshape
    into a view the symbolic strides forbid: "Cannot view a tensor with shape ..."."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        self.bias = nn.Parameter(torch.randn(1, heads, 1, 1))
        self.head_dim = dim // heads

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        shape = (*x.shape[:-1], -1, self.head_dim)
        q, k, v = (p(x).view(shape).transpose(1, 2) for p in (self.q, self.k, self.v))
        padding = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=padding + self.bias)
        return out.transpose(1, 2).contiguous().reshape(*x.shape[:-1], -1)


def masked_attention() -> nn.Module:
    return MaskedAttention()


class Embedder(nn.Module):
    """Token ids and a padding mask, by name, as BERT takes them. The mask also picks a
    segment embedding of two rows (like BERT's token types), so a mask handed over in
    the ids' place fails loudly in eager instead of passing with the wrong inputs."""

    def __init__(self, vocab: int = 50, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.segment = nn.Embedding(2, dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, object]:
        h = self.embed(input_ids) + self.segment(attention_mask)
        h = h * attention_mask[..., None].to(h.dtype)
        return {"pooled": h.sum(1), "parts": (h.mean(1), attention_mask.sum(-1))}


def embedder() -> nn.Module:
    return Embedder()
