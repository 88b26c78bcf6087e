"""numpy ⇄ torch for references and runtime outputs, bfloat16 included (via ml_dtypes).

numpy has no bfloat16 of its own: arrays carry `ml_dtypes.bfloat16`, which
torch cannot read directly, so bfloat16 crosses as float32 (exact) and is
narrowed on the other side. Imports torch: worker side only.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch
from torch.utils._pytree import tree_leaves


def to_torch(array: np.ndarray, device: str = "cpu", requires_grad: bool = False) -> Any:
    """A tensor owning a copy of `array`; `requires_grad` applies to floating tensors only."""
    if array.dtype == ml_dtypes.bfloat16:
        t = torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    else:
        t = torch.from_numpy(array.copy())
    t = t.to(device)
    if requires_grad and t.is_floating_point():
        t.requires_grad_(True)
    return t


def to_numpy(tensor: Any) -> np.ndarray:
    """A detached host copy of `tensor` (conjugate/negative views resolved)."""
    t = tensor.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.resolve_conj().resolve_neg().numpy().copy()


def leaves(output: Any) -> list[Any]:
    """The tensors of a pytree output (tuple, list, dict, ...), in pytree order."""
    return [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)]
