"""Statistics read from the scan's summaries: the decade histogram of
``|diff|``, its quantiles, and the failures' bounding region.

These describe a comparison whether or not it passes; none of them rules on
it (that is :mod:`.decide`'s job), so they can change presentation without
moving a verdict.
"""

from __future__ import annotations

import itertools
from typing import Any, overload

import numpy as np

from parity_gate.compare.scan import DECADES, EDGE_BIN, FINE_SHIFT, Scan

__all__ = ["HIST_LABELS", "decade_hist", "find_region", "quantiles", "unravel"]

_MAX_RUNS = 64  # index runs kept per region axis
_REGION_DENSITY = 0.5


def _hist_labels() -> list[str]:
    """Bucket names: exact zero, below 1e-9, each decade, at least 1e2, non-finite."""
    labels = ["0", f"<1e{DECADES[0]}"]
    labels += [f"1e{a}..1e{b}" for a, b in itertools.pairwise(DECADES)]
    labels += [f">=1e{DECADES[-1]}", "nonfinite"]
    return labels


HIST_LABELS = _hist_labels()


@overload
def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]: ...
@overload
def unravel(flat: None, shape: tuple[int, ...]) -> None: ...
@overload
def unravel(flat: int | None, shape: tuple[int, ...]) -> tuple[int, ...] | None: ...
def unravel(flat: int | None, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Flat index -> index tuple as plain ints (reports are JSON); None stays None."""
    if flat is None:
        return None
    return tuple(int(i) for i in np.unravel_index(int(flat), shape)) if shape else ()


def _fine_sparse(sc: Scan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Occupied fine bins, their counts (one-sided non-finite pairs, zeroed
    during the scan, taken out of bin 0) and the running total."""
    keys = np.flatnonzero(sc.fine[sc.fine_lo: sc.fine_hi]) + min(sc.fine_lo, sc.fine_hi)
    cnt = sc.fine[keys]
    if keys.size and keys[0] == 0:
        cnt[0] -= sc.nf_count
    return keys, cnt, np.cumsum(cnt)


def decade_hist(sc: Scan) -> dict[str, int]:
    """Exact count of ``|diff|`` per decade, from the fine bins plus the scan's
    per-edge corrections."""
    keys, cnt, cum = _fine_sparse(sc)
    total = int(cum[-1]) if cum.size else 0
    zero = int(cnt[0]) if keys.size and keys[0] == 0 else 0
    pos = np.searchsorted(keys, EDGE_BIN)
    below = [(int(cum[p - 1]) if p else 0) + int(sc.below_edge[k]) for k, p in enumerate(pos)]
    counts = [zero, below[0] - zero]
    counts += [b - a for a, b in itertools.pairwise(below)]
    counts += [total - below[-1], sc.nf_count]
    return dict(zip(HIST_LABELS, counts, strict=True))


def quantiles(sc: Scan, qs: tuple[float, ...]) -> list[float | None]:
    """Quantiles of |diff|, interpolated inside one 1/32-octave bin (~1 %)."""
    keys, cnt, cum = _fine_sparse(sc)
    n = int(cum[-1]) if cum.size else 0
    out: list[float | None] = []
    for q in qs:
        if n == 0:
            out.append(None)
            continue
        rank = q * (n - 1)
        i = int(np.searchsorted(cum, rank, side="right"))
        j = int(keys[i])
        if j == 0:
            out.append(0.0)
            continue
        lo = float(np.int64(j << FINE_SHIFT).view(np.float64))
        hi = float(np.int64((j + 1) << FINE_SHIFT).view(np.float64))
        before = int(cum[i - 1]) if i else 0
        frac = (rank - before + 0.5) / max(int(cnt[i]), 1)
        out.append(lo + (hi - lo) * min(max(frac, 0.0), 1.0))
    return out


def _ranges(idx: np.ndarray) -> list[list[int]]:
    """Sorted indices -> inclusive [lo, hi] runs."""
    if idx.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) != 1)
    starts = np.concatenate(([idx[0]], idx[breaks + 1]))
    ends = np.concatenate((idx[breaks], [idx[-1]]))
    return [[int(a), int(b)] for a, b in zip(starts, ends, strict=True)]


def find_region(shape: tuple[int, ...], sc: Scan, nfail: int) -> dict[str, Any] | None:
    """Bounding box of the failures, if it is a dense proper part."""
    if not shape or nfail < 2:
        return None
    axes, volume, truncated = [], 1, False
    for k, pres in enumerate(sc.presence):
        if isinstance(pres, np.ndarray):
            idx = np.flatnonzero(pres)
            size = int(idx.size)
            runs = _ranges(idx)
        else:
            size = pres[1] - pres[0] + 1 if pres[1] >= 0 else 0
            runs = [[pres[0], pres[1]]] if size else []
        volume *= size
        if size < shape[k]:
            truncated |= len(runs) > _MAX_RUNS
            axes.append([k, runs[:_MAX_RUNS]])
    total = int(np.prod(shape, dtype=np.int64))
    if not axes or volume >= total or nfail < _REGION_DENSITY * volume:
        return None
    return {"axes": axes, "wrong": int(nfail), "size": int(volume), "truncated": truncated}
