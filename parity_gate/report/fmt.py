"""Number and word formatting shared by the text reports."""

from __future__ import annotations

import math
from typing import Any


def num(value: Any) -> str:
    """Compact, sortable-looking figures: 1.2e-06, 0.031, inf, n/a."""
    if value is None:
        return "n/a"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e4:
        return f"{v:.4g}"
    return f"{v:.2e}"


def seconds(value: float) -> str:
    return f"{value:.2f}s" if value < 100 else f"{value / 60:.1f}min"


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"
