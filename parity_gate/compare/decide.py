"""The verdict: one ruling per failing comparison, and the reason line that
names its evidence.

The rules read only the scan summary and the statistics, so this module is
the whole ruling policy, kept apart from the arithmetic that feeds it.
Rule 1 (``shape`` / ``dtype``) is applied by :func:`parity_gate.compare.compare`
before any scan, with :func:`shape_reason`; :func:`decide_verdict` applies
the rest.

The verdict (why this order)
----------------------------
A failing comparison gets exactly one verdict; the first rule that matches
wins, and the reason line names the evidence:

1. ``shape`` / ``dtype``: nothing numeric is meaningful after these.
2. ``non_finite``: a NaN or Inf on one side only is never rounding, and no
   tolerance can pass it (needed tolerance is None).
3. ``label_flip`` (task="classification"): a changed top-1 label is the
   user-visible harm, whatever the tensor numbers say; it also fails a pair
   that is within tolerance. A change between two labels the dtype cannot
   order (both sides' two logits within ``TIE_ULPS`` ulp) is a tie, not a
   flip: counted apart and left out of the agreement.
4. ``rounding``: every failing element's error is at most the dtype's unit
   roundoff times a depth factor, measured against ``max(|ref|, scale)``
   where scale is the mean ``|ref|`` (so cancellation near zero, where
   reordered sums legitimately lose relative accuracy, is not an outlier).
   It comes *before* region/offset on purpose: a rounding-only pair must never
   be blamed on a region or an offset, even when larger magnitudes make its
   failures cluster in one channel.
   Never rounding: a failing element where both sides are integers a whole
   unit or more apart (a 0 -> 1 of a step output), however large the rest
   of the tensor makes the mean (``whole_unit_step``).
5. ``region``: the failures' bounding box (per axis, the set of indices that
   hold a failure) is a proper part of the tensor and at least half of it is
   wrong -- a channel, a row, a head -- while the rest matches.
6. ``sign`` / ``offset``: the failing elements equal ``-ref``, or are
   ``ref + c`` for one constant c that moves the passing elements around
   them too (a sign flip or a constant shift spread across the tensor
   rather than in one block; a few scattered elements off by the same amount
   are not an offset). Needs at least 3 failing elements.
7. ``mismatch``: anything else (scattered, large errors).

A passing comparison is ``pass``; with ``strict_signed_zeros`` a pair that
differs only in the sign of zeros fails as ``signed_zero``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from parity_gate.compare.scan import CHUNK, MAX_LISTED, Ctx, Scan
from parity_gate.compare.stats import unravel
from parity_gate.model.comparison import Verdict, fmt_number, value_format
from parity_gate.model.precision import ROUNDING_DEPTH, ROUNDOFF, rounding_level

__all__ = ["ROUNDOFF", "TIE_ULPS", "Evidence", "Top1", "decide_verdict", "pattern_of",
           "rounding_level", "shape_reason", "tie_window", "top1_agreement", "whole_unit_step"]

_MIN_PATTERN = 3  # failing elements needed before calling sign/offset
_SIGN_RATIO = 0.01  # sum (got+ref)^2 <= 1% of sum ref^2
_OFFSET_CV = 0.05  # std of the shift <= 5% of the shift


def shape_reason(a: tuple[int, ...], b: tuple[int, ...]) -> str:
    """Rule 1's reason: say which axes differ, and flag a likely transpose."""
    base = f"shape: reference {a} vs got {b}"
    if len(a) != len(b):
        return f"{base} (rank {len(a)} vs {len(b)})"
    if sorted(a) == sorted(b):
        return f"{base} (same sizes in another order: transposed axes or layout?)"
    diff = [k for k in range(len(a)) if a[k] != b[k]]
    return f"{base} (axis {', '.join(map(str, diff))} differs)"


# A top-1 change between two labels whose logits lie within this many units in the last
# place of the dtype, on both sides, is a tie: the dtype cannot order them, so neither
# side's label is wrong. The unit is taken at the larger of the two logits and the row's
# mean |logit| (a logit near zero is a cancellation of terms that size). Ties are
# counted apart and left out of the agreement (README "Tolerances").
TIE_ULPS = 4.0
_MANTISSA = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}
_TINY = {"float16": 2.0**-14, "bfloat16": 2.0**-126, "float32": 2.0**-126,
         "float64": 2.0**-1022}


class Top1(NamedTuple):
    """Rule 3's evidence: agreement over the samples that are not ties, the first
    flipped (and tied) samples and their counts."""

    agreement: float | None
    flipped: list[int]
    flips: int
    tied: list[int]
    ties: int


def tie_window(magnitude: np.ndarray, dname: str) -> np.ndarray:
    """TIE_ULPS units in the last place of `dname` at each magnitude (0 for integers)."""
    if dname not in _MANTISSA:
        return np.zeros_like(magnitude, dtype=np.float64)
    mag = np.maximum(np.abs(magnitude.astype(np.float64)), _TINY[dname])
    return TIE_ULPS * np.exp2(np.floor(np.log2(mag)) - _MANTISSA[dname])


def top1_agreement(ref: np.ndarray, got: np.ndarray, dname: str = "float64") -> Top1:
    """Argmax over the last axis on both sides, in row chunks (no full-size index array);
    a changed label is a tie when both sides' two logits are within `tie_window` of the
    larger of them and the row's mean |logit|."""
    if ref.ndim == 0 or ref.shape[-1] == 0 or ref.size == 0:
        return Top1(None, [], 0, [], 0)
    ncls = ref.shape[-1]
    r2 = ref.reshape(-1, ncls)
    g2 = got.reshape(-1, ncls)
    nrows = r2.shape[0]
    step = max(1, CHUNK // ncls)
    flipped: list[int] = []
    tied: list[int] = []
    count = ties = 0
    for s in range(0, nrows, step):
        a = np.argmax(r2[s: s + step], axis=1)  # NaN counts as the maximum, as in torch
        b = np.argmax(g2[s: s + step], axis=1)
        idx = np.flatnonzero(a != b)
        rows = s + idx
        with np.errstate(all="ignore"):
            ra, rb = (r2[rows, a[idx]].astype(np.float64), r2[rows, b[idx]].astype(np.float64))
            ga, gb = (g2[rows, a[idx]].astype(np.float64), g2[rows, b[idx]].astype(np.float64))
            scale = np.abs(r2[rows].astype(np.float64)).mean(axis=1)  # cancellation
            window = tie_window(np.maximum.reduce([abs(ra), abs(rb), abs(ga), abs(gb), scale]),
                                dname)
            tie = (np.abs(ra - rb) <= window) & (np.abs(ga - gb) <= window)
        ties += int(tie.sum())
        count += int((~tie).sum())
        flipped.extend(int(i) for i in rows[~tie][: MAX_LISTED - len(flipped)])
        tied.extend(int(i) for i in rows[tie][: MAX_LISTED - len(tied)])
    decided = nrows - ties
    return Top1(1.0 - count / decided if decided else 1.0, flipped, count, tied, ties)


def pattern_of(sc: Scan, *, tensor_wide: bool) -> str | None:
    """Sign flip or constant shift among the failing finite elements.

    A shift must also be the mean signed difference of every element (of the
    chunks holding failures) when ``tensor_wide``: a real offset moves the
    passing elements too; a few scattered elements that happen to be off by
    the same amount are not an offset.
    """
    if sc.f_n < _MIN_PATTERN:
        return None
    if sc.f_sr2 > 0 and sc.f_sp2 <= _SIGN_RATIO * sc.f_sr2:
        return "negated"
    mean = sc.f_sd / sc.f_n
    var = max(sc.f_sd2 / sc.f_n - mean * mean, 0.0)
    if mean == 0 or math.sqrt(var) > _OFFSET_CV * abs(mean):
        return None
    if tensor_wide and abs(sc.sum_d / sc.sum_n - mean) > _OFFSET_CV * abs(mean):
        return None
    return f"shifted by {mean:+.6g}"


def _describe_region(region: dict[str, Any]) -> str:
    """The region as a reviewer reads it: first index runs per axis, wrong/size."""
    bits = []
    for axis, runs in region["axes"]:
        shown = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in runs[:5])
        more = ", ..." if len(runs) > 5 else ""
        n_idx = sum(b - a + 1 for a, b in runs)
        word = "index" if n_idx == 1 else "indices"
        bits.append(f"{word} {shown}{more} of axis {axis}")
    return f"{' x '.join(bits)} ({region['wrong']}/{region['size']} elements)"


def _region_where(region: dict[str, Any] | None) -> str:
    """Region as a clause for other verdicts' reasons; empty when there is none."""
    return f"concentrated in {_describe_region(region)}" if region else ""


def whole_unit_step(ctx: Ctx, bound: float) -> int | None:
    """Rule 4's exception: the first failing element (flat index) where both sides are
    integers a whole unit or more apart, far beyond the element's own rounding.

    Rounding moves a value by a few units in the last place of the magnitudes the
    computation went through; the rule measures that against ``max(|ref|, mean
    |ref|)``, and one huge value in the tensor inflates the mean. A 0 -> 1 in a
    step output (heaviside, floor, a comparison cast to float) is another branch
    taken, never rounding, however large the rest of the tensor is.
    """
    unit = bound * ctx.roundoff
    for s in range(0, ctx.ref.shape[0], CHUNK):
        with np.errstate(all="ignore"):
            r = ctx.ref[s: s + CHUNK].astype(np.float64)
            g = ctx.got[s: s + CHUNK].astype(np.float64)
            d = np.abs(g - r)
            step = ((d > ctx.atol + ctx.rtol * np.abs(r)) & (d >= 1.0)
                    & (r == np.floor(r)) & (g == np.floor(g))
                    & (d > unit * np.maximum(np.abs(r), np.abs(g))))
        hit = np.flatnonzero(step)
        if hit.size:
            return s + int(hit[0])
    return None


@dataclass(frozen=True)
class Evidence:
    """What the rules read besides the scan: the statistics :func:`compare` derives
    from it (region, top-1, worst element, needed tolerance) and the pair's dtype and
    shape, so a rule's reason can name them."""

    dname: str
    shape: tuple[int, ...]
    region: dict[str, Any] | None
    top1: Top1
    min_top1: float
    worst: dict[str, Any]
    need: tuple[float | None, float | None]


def _need_clause(ev: Evidence) -> str:
    """The needed tolerance as a reason clause; empty when no tolerance can pass."""
    need_a, need_r = ev.need
    if need_a is None:
        return ""
    return f"needs atol>={fmt_number(need_a)} or rtol>={fmt_number(need_r)}"


def _top1_clause(ev: Evidence) -> str:
    """Rule 3's evidence as a clause (agreement, flips, ties); empty without a task."""
    top1 = ev.top1
    if top1.agreement is None:
        return ""
    clause = (f"top-1 agreement {top1.agreement:.4f} (min {ev.min_top1:g}; {top1.flips} "
              "sample(s) flipped"
              + (f", first {top1.flipped[:5]}" if top1.flipped else "") + ")")
    if top1.ties:
        clause += (f"; {top1.ties} near-tie(s) ignored (labels within {TIE_ULPS:g} ulp of "
                   f"{ev.dname}, first {(top1.tied or [])[:5]})")
    return clause


def decide_verdict(ctx: Ctx, sc: Scan, ev: Evidence) -> tuple[Verdict, str]:
    """First matching rule wins; see the module docstring for why this order."""
    pct = 100.0 * sc.nbad / sc.total
    where = f"{sc.nbad}/{sc.total} elements ({pct:.3g}%) out of tolerance"
    flip_s = _top1_clause(ev)
    if sc.nf_count:
        parts = []
        for cat, (cnt, idx) in sc.nf.items():
            parts.append(f"{cnt} {cat.replace('_', ' ')} (first at {unravel(idx[0], ev.shape)})")
        extra = f"; {region_s}" if (region_s := _region_where(ev.region)) else ""
        return Verdict.NON_FINITE, f"non_finite: {', '.join(parts)}{extra}; {where}"
    if ev.top1.agreement is not None and ev.top1.agreement < ev.min_top1:
        tail = f"; {where}" if sc.nbad else "; numbers within tolerance"
        return Verdict.LABEL_FLIP, f"label_flip: {flip_s}{tail}"
    if sc.nbad == 0:
        if ctx.strict_zeros and sc.sz_count:
            return (Verdict.SIGNED_ZERO,
                    f"signed_zero: {sc.sz_count} element(s) differ only in the sign of zero "
                    f"(first at {unravel(sc.sz_first, ev.shape)})")
        msg = (f"pass: max abs {sc.max_abs:.3g}, max rel {sc.max_rel:.3g} within "
               f"atol={ctx.atol:g}, rtol={ctx.rtol:g}")
        return Verdict.PASS, msg + (f"; {flip_s}" if flip_s else "")
    if ctx.kind != "float":
        first = unravel(sc.first_bad, ev.shape)
        rs = _region_where(ev.region)
        return (Verdict.REGION if ev.region else Verdict.MISMATCH,
                f"{'region' if ev.region else 'mismatch'}: {where} (exact {ev.dname} "
                f"comparison), first at {first}" + (f"; {rs}" if rs else ""))
    return _float_failure(ctx, sc, ev, where)


def _float_failure(ctx: Ctx, sc: Scan, ev: Evidence, where: str) -> tuple[Verdict, str]:
    """Rules 4-7 for a failing float pair, the ones that tell *how* the numbers
    differ (rounding, a region, a sign or an offset, or scattered)."""
    pct = 100.0 * sc.nbad / sc.total
    need_s = _need_clause(ev)
    dname = ev.dname
    bound = ROUNDING_DEPTH.get(dname, 0.0)
    if sc.f_n and sc.f_norm <= bound and whole_unit_step(ctx, bound) is None:
        return (Verdict.ROUNDING,
                f"rounding: {where}, largest error {sc.f_norm:.3g} unit roundoffs of "
                f"max(|ref|, mean |ref|) (rounding bound {bound:g} for {dname}); {need_s}")
    if ev.region is not None:
        pat = pattern_of(sc, tensor_wide=False)
        return (Verdict.REGION,
                f"region: {_describe_region(ev.region)} wrong, rest matches"
                + (f"; values {pat}" if pat else "") + f"; {need_s}")
    pat = pattern_of(sc, tensor_wide=True)
    if pat == "negated":
        return (Verdict.SIGN,
                f"sign: {sc.f_n} failing elements equal -reference (sign flip), "
                f"{pct:.3g}% of the tensor; {need_s}")
    if pat is not None:
        return (Verdict.OFFSET,
                f"offset: {sc.f_n} failing elements {pat} (constant, "
                f"{pct:.3g}% of the tensor); {need_s}")
    w = ev.worst
    fmt = value_format(dname)
    return (Verdict.MISMATCH,
            f"mismatch: {where}, scattered; worst at {w['worst_index']}: ref "
            f"{fmt_number(w['ref_value'], fmt)} got {fmt_number(w['got_value'], fmt)}; {need_s}")
