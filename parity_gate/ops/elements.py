"""The fewest elements that show a defect: one output element and the inputs that feed it.

An elementwise computation (every input broadcasts to the output, whose shape is their
broadcast) gives output element `i` from each input's element at `i`; a repro fed those
elements alone shows the same wrong value, deterministically, in a line a maintainer
reads. Whether a cut really is elementwise is not decided here: the drafting side runs
the one-element repro and keeps it only where it prints the same eager and ONNX Runtime
values as the full one did at `i`. Pure: arrays in, arrays and text out.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

import numpy as np


def one_element(arrays: Mapping[str, np.ndarray], shape: tuple[int, ...],
                index: tuple[int, ...]) -> dict[str, np.ndarray] | None:
    """Each array's element feeding output element `index` (its rank kept, every dim 1);
    None where the arrays do not broadcast to `shape` as their own broadcast, or it is one
    element already (nothing to shrink)."""
    if len(index) != len(shape) or int(np.prod(shape, dtype=np.int64)) <= 1 or not arrays:
        return None
    try:
        if tuple(np.broadcast_shapes(*(a.shape for a in arrays.values()))) != tuple(shape):
            return None
    except ValueError:
        return None
    out: dict[str, np.ndarray] = {}
    for name, a in arrays.items():
        offset = len(shape) - a.ndim
        at = tuple(0 if a.shape[k] == 1 else index[k + offset] for k in range(a.ndim))
        out[name] = np.asarray(a[at]).reshape((1,) * a.ndim).astype(a.dtype)
    return out


def whole(text: str) -> bool:
    """A boolean, NaN, ±inf, zero or a whole number (at most a million): a value no random
    draw gives."""
    if text in ("True", "False"):
        return True
    try:
        v = float(text)
    except ValueError:
        return False
    return v != v or v in (float("inf"), -float("inf")) or (v == int(v) and abs(v) <= 1e6)


def plain(text: str) -> bool:
    """A value a title may quote as a trigger or a result: `whole`, or a short decimal (at
    most 4 significant digits: `0.5`, `-2.25`); not a value of random data (`-0.3896045`)."""
    if whole(text):
        return True
    try:
        v = float(text)
    except ValueError:
        return False
    return float(f"{v:.4g}") == v


_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?")


def call_text(call: str, values: Mapping[str, str], room: int = 60) -> str | None:
    """The culprit's eager call as a title names it, on one element: the op's short name
    and its arguments, tensors by their one value (`atan2(0.0, -2.0)`), long literals in 4
    significant digits (`scalar_tensor(-1.798e+308, dtype=torch.float64)`); None where it
    does not parse, an argument is not in `values`, or it is longer than `room`."""
    head = call.split("(", 1)[0]
    name = head.split(".")[3] if head.startswith("torch.ops.") and head.count(".") >= 3 \
        else ""
    try:
        tree = ast.parse(call, mode="eval").body
    except SyntaxError:
        return None
    if not name or not isinstance(tree, ast.Call):
        return None

    def arg(node: ast.expr) -> str | None:
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return values.get(str(node.slice.value))
        text = ast.unparse(node)
        return _FLOAT.sub(lambda m: f"{float(m.group(0)):.4g}", text)

    parts = [arg(a) for a in tree.args]
    parts += [None if (v := arg(k.value)) is None else f"{k.arg}={v}" for k in tree.keywords]
    if any(p is None for p in parts):
        return None
    text = f"{name}({', '.join(p for p in parts if p is not None)})"
    return text if len(text) <= room else None


def rounded(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """Each float value that is not plain rounded to one significant digit (`-0.357` →
    `-0.4`, `3663.7` → `4000`), so a one-element repro reads as chosen, not sampled; None
    where nothing changes. Whether the defect still shows is the caller's to check."""
    out: dict[str, np.ndarray] = {}
    changed = False
    for name, a in arrays.items():
        if a.dtype.kind != "f":
            out[name] = a
            continue
        flat = a.astype(np.float64).ravel()
        new = np.array([v if not np.isfinite(v) or v == 0 or plain(repr(float(v)))
                        else float(f"{v:.1g}") for v in flat]).astype(a.dtype).reshape(a.shape)
        changed = changed or not np.array_equal(new, a, equal_nan=True)
        out[name] = new
    return out if changed else None


def unmasked(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The arrays with every fully masked row let through: a boolean mask's row of all
    False set True, an additive float mask's row of all -inf set 0 (rows along the last
    axis); None where no array has such a row. Where the defect vanishes on these, a fully
    masked row is its trigger (the caller runs both)."""
    out: dict[str, np.ndarray] = {}
    changed = False
    for name, a in arrays.items():
        rows = None
        if a.ndim >= 1 and a.shape[-1] > 0 and a.dtype.kind == "b":
            rows = ~a.any(axis=-1)
        elif a.ndim >= 1 and a.shape[-1] > 0 and a.dtype.kind == "f":
            rows = np.isneginf(a).all(axis=-1)
        if rows is None or not rows.any():
            out[name] = a
            continue
        opened = a.copy()
        opened[rows] = True if a.dtype.kind == "b" else 0.0
        out[name] = opened
        changed = True
    return out if changed else None
