"""Ages and sizes as people write them (`30d`, `2GB`, `500MiB`): one parser for the cache
CLI and the Action's inputs, one way to print a size. Stdlib only (the Action reads its
inputs before install)."""

from __future__ import annotations

import re

from parity_gate.errors import UserError

# `cache prune` with neither --older-than nor --max-size, and the Action's export_cache_max_age.
DEFAULT_PRUNE_AGE = "30d"


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_UNITS = {"": 1, "b": 1, **{f"{p}b": 1000 ** (i + 1) for i, p in enumerate("kmgt")},
               **{p: 1024 ** (i + 1) for i, p in enumerate("kmgt")},
               **{f"{p}ib": 1024 ** (i + 1) for i, p in enumerate("kmgt")}}


def parse_age(text: str, flag: str = "--older-than") -> float:
    """`7d`, `12h`, `30m`, `3600s`, `2w` → seconds. A bare number is refused: minutes or
    seconds is a guess a prune must not make."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if m is None:
        raise UserError(f"{flag}: got {text!r} (expected an age: a number and one of s, m, h, "
                        "d, w, e.g. 7d, 12h, 30m, 3600s)")
    return float(m.group(1)) * _AGE_UNITS[m.group(2)]


def parse_size(text: str, flag: str = "--max-size") -> int:
    """`2GB`, `500MB` (powers of 1000), `10G`, `500MiB` (powers of 1024: GNU coreutils'
    convention), a bare number of bytes → bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip().lower())
    if m is None or m.group(2) not in _SIZE_UNITS:
        raise UserError(f"{flag}: got {text!r} (expected a size: a number and B, kB, MB, GB, "
                        "TB (powers of 1000) or K, M, G, T, KiB, MiB, GiB, TiB (powers of "
                        "1024), e.g. 2GB, 500MiB, 10G)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def human_size(n: float) -> str:
    """`4000000000` → `3.7GiB`, `60` → `60B` (binary units, as bounds are usually written)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    raise AssertionError("unreachable")
