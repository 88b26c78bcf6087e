"""Needed tolerance: the smallest float64 atol (at the given rtol) and the
smallest rtol (at the given atol) for which the same elementwise test passes.

Found by bisection on the float64 bit pattern, over only the elements that
can bind (picked from the scan's per-chunk maxima), so the figure passes and
its float64 predecessor fails -- a reviewer can paste it into the manifest.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from parity_gate.compare.scan import Ctx, Scan

__all__ = ["close", "needed_tolerance"]


# The elementwise pass rule as source, over float64 arrays `e` (expected) and `o` (got):
# the generated repro scripts carry it verbatim (they import numpy only); `close` computes
# the same, and a test holds the two together.
CLOSE_RULE = ("(np.isfinite(e) & np.isfinite(o) & (np.abs(o - e) <= atol + rtol * np.abs(e)))"
              " | (e == o) | (np.isnan(e) & np.isnan(o))")


def close(expected: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Elementwise `|got - expected| <= atol + rtol * |expected|` where both are finite; a
    non-finite value matches only itself (NaN matches NaN). Without the finiteness guard an
    infinite expected value makes the bound infinite, and FLT_MAX "matches" inf."""
    with np.errstate(all="ignore"):
        e, o = np.asarray(expected, np.float64), np.asarray(got, np.float64)
        within = np.isfinite(e) & np.isfinite(o) & (np.abs(o - e) <= atol + rtol * np.abs(e))
        return np.asarray(within | (e == o) | (np.isnan(e) & np.isnan(o)), bool)


def _min_passing(pred: Callable[[float], bool], hi: float) -> float:
    """Smallest non-negative float64 x with pred(x) true, given pred(hi) and
    pred monotone (non-negative floats order like their bit patterns)."""
    if pred(0.0):
        return 0.0
    while not pred(hi):
        hi = hi * 2 if hi > 0 else 5e-324
        if math.isinf(hi):
            return math.inf
    lo_b, hi_b = 0, int(np.float64(hi).view(np.int64))  # pred(lo) false
    while hi_b - lo_b > 1:
        mid = (lo_b + hi_b) // 2
        if pred(float(np.int64(mid).view(np.float64))):
            hi_b = mid
        else:
            lo_b = mid
    return float(np.int64(hi_b).view(np.float64))


def needed_tolerance(ctx: Ctx, sc: Scan) -> tuple[float | None, float | None]:
    """``(needed_atol, needed_rtol)``; None for both when no tolerance can pass
    (a one-sided NaN/Inf, or any mismatch of an exact integer/bool comparison)."""
    if ctx.kind != "float":
        return (0.0, 0.0) if sc.nbad == 0 else (None, None)
    if sc.nf_count:
        return None, None
    eps = 2.0**-50  # generous bound on the rounding of the per-element figures
    top_e, top_q = sc.max_excess, sc.max_q
    # atol = 0 passes iff every |d| <= rtol|r|, i.e. every excess <= 0 (the
    # sign of a float64 difference is exact); likewise rtol = 0 iff |d| <= atol
    want_e, want_q = top_e > 0 and math.isfinite(top_e), top_q > 0 and math.isfinite(top_q)
    top_mag = max((mad + ctx.rtol * mar for _, _, ex, _, mad, mar in sc.parts_excess
                   if ex == top_e), default=0.0)
    ad_l, t_l, ar_l = [], [], []
    for s, e, ex, q, mad, mar in sc.parts_excess:
        slack_e = 8 * eps * (mad + ctx.rtol * mar + top_mag)
        cand_e = want_e and ex >= top_e - slack_e
        cand_q = want_q and q >= top_q * (1 - 1e-9)
        if not (cand_e or cand_q):
            continue
        for s2 in range(s, e, 1 << 15):  # small pieces: little extra memory
            r = ctx.ref[s2: min(e, s2 + (1 << 15))].astype(np.float64)
            ad = np.abs(ctx.got[s2: s2 + r.shape[0]].astype(np.float64) - r)
            ar = np.abs(r, out=r)
            t = ar * ctx.rtol
            sel = np.zeros(ad.shape, bool)
            if cand_e:
                sel |= ad - t >= top_e - slack_e - 8 * eps * (ad + t)
            if cand_q:
                sel |= (ad - ctx.atol) / ar >= top_q * (1 - 1e-9)
            ad_l.append(ad[sel])
            t_l.append(t[sel])
            ar_l.append(ar[sel])
    ad_c = np.concatenate(ad_l) if ad_l else np.zeros(0)
    t_c = np.concatenate(t_l) if t_l else np.zeros(0)
    ar_c = np.concatenate(ar_l) if ar_l else np.zeros(0)

    def pass_atol(a: float) -> bool:
        return bool(np.all(ad_c <= t_c + a))

    def pass_rtol(r: float) -> bool:
        return bool(np.all(ad_c <= ctx.atol + ar_c * r))

    need_a = _min_passing(pass_atol, top_e) if want_e else max(top_e, 0.0)
    need_r = _min_passing(pass_rtol, top_q) if want_q else max(top_q, 0.0)
    return need_a, need_r
