"""The chunked scan: one pass over both tensors, in fixed-size chunks, that
leaves only small per-chunk summaries behind.

Everything after the scan (needed tolerance, statistics, verdict) reads the
merged :class:`Scan` and never the whole tensor again, so the gate's extra
memory stays ~10 MiB per thread whatever the tensor size. The float64 bit
binning of the error (``FINE_SHIFT``, decade edges) is defined here because
the scan is what fills the bins; :mod:`.stats` only reads them.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "CHUNK",
    "DECADES",
    "EDGE_BIN",
    "FINE_SHIFT",
    "MAX_LISTED",
    "Ctx",
    "Plan",
    "Scan",
    "release_scratch",
    "scale_of",
    "scan_tensor",
]

CHUNK = 1 << 18  # elements per chunk: 2 MiB float64 buffers stay in L2/L3
FINE_SHIFT = 47  # float64 bits >> 47: exponent + 5 mantissa bits (1/32 octave)
_FINE_BINS = 1 << (63 - FINE_SHIFT)
DECADES = tuple(range(-9, 3))  # histogram edges 1e-9 .. 1e2
_EDGES = np.array([10.0**k for k in DECADES])
_EDGE_BITS = _EDGES.view(np.int64)
EDGE_BIN = _EDGE_BITS >> FINE_SHIFT
_EDGE_ALIGNED = (_EDGE_BITS & ((1 << FINE_SHIFT) - 1)) == 0
_PRESENCE_MAX = 1 << 20  # axes longer than this keep only a [min, max] interval
MAX_LISTED = 20  # flipped samples / first indices kept
_THREADS = max(1, min(2, os.cpu_count() or 1))


@dataclass(kw_only=True)
class _Tally:
    """Counts a chunk keeps and the whole scan adds up: non-finite and signed-zero
    elements, and the moments of the failing finite errors (rounding/sign/offset)."""

    nf: dict[str, list] = field(default_factory=dict)  # cat -> [count, [flat idx]]
    nf_count: int = 0
    sz_count: int = 0
    sz_first: int | None = None
    f_n: int = 0
    f_sd: float = 0.0
    f_sd2: float = 0.0
    f_sp2: float = 0.0
    f_sr2: float = 0.0
    f_norm: float = 0.0

    def absorb(self, other: _Tally) -> None:
        for cat, (cnt, idx) in other.nf.items():
            have = self.nf.setdefault(cat, [0, []])
            have[0] += cnt
            have[1].extend(idx[: MAX_LISTED - len(have[1])])
        self.nf_count += other.nf_count
        self.sz_count += other.sz_count
        if self.sz_first is None:
            self.sz_first = other.sz_first
        self.f_n += other.f_n
        self.f_sd += other.f_sd
        self.f_sd2 += other.f_sd2
        self.f_sp2 += other.f_sp2
        self.f_sr2 += other.f_sr2
        self.f_norm = max(self.f_norm, other.f_norm)


@dataclass
class _Part(_Tally):
    """Summary of one chunk; merged in order by :func:`scan_tensor`."""

    start: int
    n: int
    nbad: int = 0  # out of tolerance, including one-sided non-finite
    first_bad: int | None = None
    max_abs: float = 0.0
    max_abs_at: int = 0
    max_rel: float = 0.0
    max_ar: float = 0.0
    max_excess: float = -math.inf  # max |d| - rtol|r|  (sets needed_atol)
    excess_at: int | None = None
    max_q: float = -math.inf  # max (|d| - atol)/|r|  (sets needed_rtol)
    sum_d: float = 0.0  # signed sum over the chunk, if it has failures
    fine: tuple[np.ndarray, np.ndarray] | None = None  # occupied bins, counts
    below_edge: np.ndarray | None = None  # per decade edge, count in its bin below it
    presence: list | None = None  # per axis: (axis, indices holding a failure)


class Plan:
    """Chunk layout aligned to whole trailing blocks, so per-axis failure
    presence can be taken by reshaping the chunk's mask."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.ndim = len(shape)
        j, inner = self.ndim, 1
        while j > 0 and inner * shape[j - 1] <= CHUNK:
            j -= 1
            inner *= shape[j]
        self.j, self.inner = j, inner
        self.rows = max(1, CHUNK // inner)
        self.outer = int(np.prod(shape[:j], dtype=np.int64)) if j else 1

    def ranges(self) -> list[tuple[int, int]]:
        """Flat ``(start, end)`` of each chunk, in order."""
        step = self.rows * self.inner
        total = self.outer * self.inner
        return [(s, min(s + step, total)) for s in range(0, total, step)]


# Per-thread scratch arrays, kept between calls: a fresh multi-MiB array per
# chunk (or per call) page-faults and costs more than the arithmetic. At most
# ~10.5 MiB per thread that ever scanned; release_scratch() drops them.
_SCRATCH: dict[int, tuple[np.ndarray, ...]] = {}
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _scratch(n: int) -> tuple[np.ndarray, ...]:
    """This thread's five float64 and two bool buffers, cut to ``n``."""
    key = threading.get_ident()
    bufs = _SCRATCH.get(key)
    if bufs is None or bufs[0].shape[0] < n:
        floats = [np.empty(n) for _ in range(5)]
        masks = [np.empty(n, bool) for _ in range(2)]
        _SCRATCH[key] = bufs = (*floats, *masks)
    return tuple(b[:n] for b in bufs)


def release_scratch() -> None:
    """Free the cached scratch arrays (benchmarks, memory-tight callers)."""
    _SCRATCH.clear()


def _pool() -> ThreadPoolExecutor:
    """The shared scan pool, started on first use (most runs compare small tensors)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(_THREADS, thread_name_prefix="parity-compare")
        return _POOL


def _after_fork() -> None:
    """A forked child has none of the parent's threads: start afresh."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()
    _SCRATCH.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


@dataclass(frozen=True)
class Ctx:
    """One comparison's inputs and settings, shared read-only by the chunk scans."""

    ref: np.ndarray  # flat
    got: np.ndarray  # flat
    kind: str
    atol: float
    rtol: float
    scale: float
    roundoff: float
    plan: Plan
    strict_zeros: bool


def _scan_chunk(ctx: Ctx, s: int, e: int) -> _Part:
    # errstate is per thread: inf/nan are data here, never a warning
    with np.errstate(all="ignore"):
        return _scan_chunk_body(ctx, s, e)


def _scan_chunk_body(ctx: Ctx, s: int, e: int) -> _Part:
    """Every per-element figure of chunk ``[s, e)``, computed in scratch buffers."""
    n = e - s
    p = _Part(start=s, n=n)
    rc, gc = ctx.ref[s:e], ctx.got[s:e]
    bufs = _scratch(n)
    ar, d, ad, t, w, ok, m = bufs
    _upcast_diff(ctx, rc, gc, bufs)
    peek, nf_bad = _largest_error(ctx, rc, gc, bufs, p)
    p.max_ar = float(ar.max())
    _tolerance_test(ctx, rc, gc, bufs, nf_bad)
    p.nbad = n - int(np.count_nonzero(ok))
    _needed_figures(ctx, bufs, peek, p)
    _histogram(ad, t, m, p)
    if ctx.strict_zeros:
        _signed_zeros(rc, gc, ar, ad, s, p)
    if p.nbad:
        p.sum_d = float(d.sum())  # only failing chunks: is a shift tensor-wide?
        bad = np.logical_not(ok, out=m)
        p.first_bad = s + int(np.argmax(bad))
        p.presence = _presence(ctx.plan, bad, s)
        if nf_bad is not None:
            bad[nf_bad] = False
        _failing_stats(ctx, rc, gc, (ar, d, ad, t, w, ok, bad), p, clean=nf_bad is None)
    return p


def _upcast_diff(ctx: Ctx, rc: np.ndarray, gc: np.ndarray, bufs: tuple[np.ndarray, ...]) -> None:
    """Fill ``ar = |ref|``, ``d = got - ref`` and ``ad = |d|`` in float64, so the
    difference is exact for every narrower input; each input is read once."""
    ar, d, ad, t, w, _ok, _m = bufs
    if rc.dtype == np.float32 or rc.dtype == np.float64:
        np.abs(rc, out=ar, dtype=np.float64)
        np.subtract(gc, rc, out=d, dtype=np.float64)  # exact for narrower inputs
    elif ctx.kind == "float":  # half types: convert each input once only
        np.copyto(t, rc)
        np.copyto(w, gc)
        np.subtract(w, t, out=d)
        np.abs(t, out=ar)
    else:
        np.copyto(ar, rc, casting="unsafe")
        np.copyto(d, gc, casting="unsafe")
        np.subtract(d, ar, out=d)
        np.abs(ar, out=ar)
    np.abs(d, out=ad)


def _largest_error(ctx: Ctx, rc: np.ndarray, gc: np.ndarray, bufs: tuple[np.ndarray, ...],
                   p: _Part) -> tuple[float, np.ndarray | None]:
    """Record the largest finite ``|d|`` and where; returns it and the one-sided
    non-finite positions (None when the chunk is all finite, the common case).

    The argmax finds a NaN first, so one reduction both answers the common case
    and detects the rare one; only then are NaN/Inf pairs classified and zeroed,
    so the statistics that follow describe the finite pairs only."""
    ar, d, ad = bufs[0], bufs[1], bufs[2]
    i = int(ad.argmax())  # a NaN, if any, is found first
    peek = float(ad[i])
    nf_bad = None
    if ctx.kind == "float" and not math.isfinite(peek):
        nf_bad, nonfin = _nonfinite(rc, gc, ad, p.start, p)
        for buf in (ad, d, ar):
            buf[nonfin] = 0.0
        i = int(ad.argmax())
        peek = float(ad[i])
    p.max_abs, p.max_abs_at = peek, p.start + i
    return peek, nf_bad


def _tolerance_test(ctx: Ctx, rc: np.ndarray, gc: np.ndarray, bufs: tuple[np.ndarray, ...],
                    nf_bad: np.ndarray | None) -> None:
    """Fill ``ok`` with the pass test exactly as torch.isclose (``atol + rtol*|ref| >=
    |diff|``; exact equality for integers and booleans); leaves ``t = rtol*|ref|``
    for the needed-atol figure. A one-sided NaN/Inf, or a float64 overflow of
    ``got - ref``, is never close."""
    ar, _d, ad, t, w, ok, _m = bufs
    np.multiply(ar, ctx.rtol, out=t)
    np.add(t, ctx.atol, out=w)
    if ctx.kind == "float":
        np.less_equal(ad, w, out=ok)
        if nf_bad is not None:
            ok[nf_bad] = False
            ok &= np.isfinite(ad)  # float64 overflow of g - r: never close
    else:
        np.equal(rc, gc, out=ok)


def _needed_figures(ctx: Ctx, bufs: tuple[np.ndarray, ...], peek: float, p: _Part) -> None:
    """The chunk's inputs to the needed tolerance and the max relative error:
    max ``|d| - rtol|r|`` (its argmax is the "worst" element) and max
    ``(|d| - atol)/|r|`` over the elements beyond atol (gathered when they are few)."""
    ar, _d, ad, t, w, _ok, m = bufs
    s, n = p.start, p.n
    np.subtract(ad, t, out=w)
    i = int(w.argmax())
    p.max_excess, p.excess_at = float(w[i]), s + i
    np.divide(ad, ar, out=w)
    p.max_rel = float(np.fmax.reduce(w))  # 0/0 (both zero) is NaN: ignored
    nover = 0
    if peek > ctx.atol:
        np.greater(ad, ctx.atol, out=m)
        nover = int(np.count_nonzero(m))
    if nover and nover * 16 < n:
        idx = np.flatnonzero(m)
        p.max_q = float(np.max((ad[idx] - ctx.atol) / ar[idx]))
    elif nover:
        np.subtract(ad, ctx.atol, out=w)
        np.divide(w, ar, out=w)
        p.max_q = float(np.fmax.reduce(w))


def _nonfinite(rc: np.ndarray, gc: np.ndarray, ad: np.ndarray, s: int,
               p: _Part) -> tuple[np.ndarray, np.ndarray]:
    """Classify one-sided NaN/Inf. Any NaN or Inf input makes |g - r| NaN or
    Inf, so only those few positions are inspected. Returns the chunk indices
    of one-sided ones and of every pair with a non-finite side."""
    cand = np.flatnonzero(~np.isfinite(ad))
    r = rc[cand].astype(np.float64)
    g = gc[cand].astype(np.float64)
    nr, ng = np.isnan(r), np.isnan(g)
    ir, ig = np.isinf(r), np.isinf(g)
    cats = {
        "nan_got_only": ng & ~nr,
        "nan_ref_only": nr & ~ng,
        "inf_got_only": ig & ~ir & ~nr,
        "inf_ref_only": ir & ~ig & ~ng,
        "inf_sign": ir & ig & (r != g),
    }
    bad_all = np.zeros(cand.size, bool)
    for cat, mask in cats.items():
        idx = cand[mask]
        if idx.size:
            p.nf[cat] = [int(idx.size), [s + int(k) for k in idx[:MAX_LISTED]]]
            bad_all |= mask
    p.nf_count = int(np.count_nonzero(bad_all))
    # float64 overflow of g - r (both finite) stays in: an infinite error
    return cand[bad_all], cand[nr | ng | ir | ig]


def _histogram(ad: np.ndarray, scratch: np.ndarray, mask: np.ndarray, p: _Part) -> None:
    """Counts per 1/32 octave of |diff| (the float64 bit patterns order like
    the values, so bits >> 47 is a log-scale bin), plus, for each decade edge
    inside an occupied bin, how many of that bin lie below the edge -- which
    makes the decade counts exact."""
    keys = scratch.view(np.int64)
    np.right_shift(ad.view(np.int64), FINE_SHIFT, out=keys)
    if keys.size <= 4096:  # small tensors: no 64K-bin array per call
        occupied, counts = np.unique(keys, return_counts=True)
    else:
        dense = np.bincount(keys)
        occupied = np.flatnonzero(dense)
        counts = dense[occupied]
    p.fine = (occupied, counts)
    below = np.zeros(len(_EDGES), np.int64)
    pos = np.searchsorted(occupied, EDGE_BIN)
    for k, i in enumerate(pos):
        if i < occupied.size and occupied[i] == EDGE_BIN[k] and not _EDGE_ALIGNED[k]:
            np.less(ad, _EDGES[k], out=mask)
            below[k] = np.count_nonzero(mask) - int(counts[:i].sum())
    p.below_edge = below


def _signed_zeros(rc: np.ndarray, gc: np.ndarray, ar: np.ndarray, ad: np.ndarray, s: int,
                  p: _Part) -> None:
    """Count pairs equal but for the sign of zero (only asked for under strict)."""
    z = np.flatnonzero((ar == 0.0) & (ad == 0.0))
    if z.size:
        rz = rc[z].astype(np.float32)
        gz = gc[z].astype(np.float32)
        diff = np.flatnonzero(np.signbit(rz) != np.signbit(gz))
        if diff.size:
            p.sz_count = int(diff.size)
            p.sz_first = s + int(z[diff[0]])


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Inner product without BLAS: BLAS would start its own threads inside
    our worker threads and oversubscribe the cores."""
    return float(np.einsum("i,i->", a, b))


def _failing_stats(ctx: Ctx, rc: np.ndarray, gc: np.ndarray, bufs: tuple[np.ndarray, ...],
                   p: _Part, clean: bool) -> None:
    """Sums over the failing finite elements (``bad``): they decide rounding
    vs sign flip vs constant shift. Up to half the chunk failing: gather the
    failures; more: whole-chunk sums minus the few passing elements (no
    per-chunk allocation). ``clean``: the chunk has no NaN/Inf."""
    ar, d, ad, t, w, ok, bad = bufs
    nf = int(np.count_nonzero(bad))
    if not nf:
        return
    p.f_n = nf
    if nf * 2 <= bad.shape[0] or not clean:
        idx = np.flatnonzero(bad)
        r = rc[idx].astype(np.float64)
        dd = gc[idx].astype(np.float64) - r
        sp = dd + 2 * r  # g + r
        p.f_sd, p.f_sd2 = float(dd.sum()), _dot(dd, dd)
        p.f_sp2, p.f_sr2 = _dot(sp, sp), _dot(r, r)
        if ctx.kind == "float":
            p.f_norm = float(np.max(np.abs(dd) / np.maximum(np.abs(r), ctx.scale)))
            p.f_norm /= ctx.roundoff
        return
    np.copyto(t, rc, casting="unsafe")  # signed ref, float64
    sd, sd2, sdr, sr2 = p.sum_d, _dot(d, d), _dot(d, t), _dot(t, t)
    keep = np.logical_not(bad, out=ok)  # the passing elements, taken back out
    idx = np.flatnonzero(keep)
    if idx.size:
        dd, r = d[idx], t[idx]
        sd -= float(dd.sum())
        sd2 -= _dot(dd, dd)
        sdr -= _dot(dd, r)
        sr2 -= _dot(r, r)
    p.f_sd, p.f_sd2, p.f_sr2 = sd, sd2, sr2
    p.f_sp2 = max(sd2 + 4 * sdr + 4 * sr2, 0.0)  # sum (g + r)^2 = sum (d + 2r)^2
    if ctx.kind == "float":
        np.maximum(ar, ctx.scale, out=w)
        np.divide(ad, w, out=w)
        i = int(w.argmax())
        if not bad[i]:  # the largest is a passing element: mask, then look again
            np.copyto(w, 0.0, where=keep)
            i = int(w.argmax())
        p.f_norm = float(w[i]) / ctx.roundoff


def _presence(plan: Plan, bad: np.ndarray, s: int) -> list:
    """Per axis, which indices hold at least one failure in this chunk."""
    if plan.ndim == 0:
        return []
    out = []
    o0 = s // plan.inner
    rows = bad.shape[0] // plan.inner
    tail = plan.shape[plan.j:]
    if plan.j < plan.ndim:
        m = bad.reshape((rows, *tail))
        for k in range(plan.j, plan.ndim):
            other = tuple(a for a in range(m.ndim) if a != k - plan.j + 1)
            out.append((k, np.flatnonzero(m.any(axis=other))))
        rowany = m.reshape(rows, -1).any(axis=1)
    else:
        rowany = bad
    if plan.j > 0:
        ridx = np.flatnonzero(rowany) + o0
        coords = np.unravel_index(ridx, plan.shape[: plan.j])
        for k in range(plan.j):
            out.append((k, np.unique(coords[k])))
    return out


@dataclass
class Scan(_Tally):
    """The merged chunk summaries: all that the later stages read."""

    total: int
    nbad: int = 0
    first_bad: int | None = None
    max_abs: float = -1.0
    max_abs_at: int = 0
    max_rel: float = 0.0
    max_excess: float = -math.inf
    excess_at: int | None = None
    max_q: float = -math.inf
    sum_d: float = 0.0  # over the chunks that hold failures
    sum_n: int = 0
    parts_excess: list = field(default_factory=list)  # (start, end, excess, q, max_abs, max_ar)
    fine: np.ndarray = field(default_factory=lambda: np.zeros(_FINE_BINS, np.int64))
    fine_lo: int = _FINE_BINS  # occupied key range of `fine`
    fine_hi: int = 0
    below_edge: np.ndarray = field(default_factory=lambda: np.zeros(len(_EDGES), np.int64))
    presence: list = field(default_factory=list)  # per axis: bool array or [lo, hi]


def scan_tensor(ctx: Ctx) -> Scan:
    """Scan every chunk (on the pool when there are enough) and merge them in order,
    so the result does not depend on the thread count."""
    plan = ctx.plan
    sc = Scan(total=ctx.ref.shape[0])
    for n_k in plan.shape:
        sc.presence.append(np.zeros(n_k, bool) if n_k <= _PRESENCE_MAX else [n_k, -1])
    ranges = plan.ranges()
    if _THREADS > 1 and len(ranges) > 2:
        for part in _pool().map(lambda r: _scan_chunk(ctx, *r), ranges):
            _merge(sc, part)
    else:
        for r in ranges:
            _merge(sc, _scan_chunk(ctx, *r))
    return sc


def _merge(sc: Scan, p: _Part) -> None:
    """Fold one chunk into the running summary (chunks arrive in order)."""
    sc.nbad += p.nbad
    if sc.first_bad is None and p.first_bad is not None:
        sc.first_bad = p.first_bad
    if p.max_abs > sc.max_abs:
        sc.max_abs, sc.max_abs_at = p.max_abs, p.max_abs_at
    sc.max_rel = max(sc.max_rel, p.max_rel) if not math.isnan(p.max_rel) else sc.max_rel
    if p.max_excess > sc.max_excess:
        sc.max_excess, sc.excess_at = p.max_excess, p.excess_at
    sc.max_q = max(sc.max_q, p.max_q)
    if p.nbad:
        sc.sum_d += p.sum_d
        sc.sum_n += p.n
    sc.parts_excess.append((p.start, p.start + p.n, p.max_excess, p.max_q, p.max_abs, p.max_ar))
    assert p.fine is not None  # every scanned chunk has its histogram
    keys, counts = p.fine
    if keys.size:
        sc.fine[keys] += counts
        sc.fine_lo = min(sc.fine_lo, int(keys[0]))
        sc.fine_hi = max(sc.fine_hi, int(keys[-1]) + 1)
    sc.below_edge += p.below_edge
    sc.absorb(p)
    if p.presence:
        for k, idx in p.presence:
            pres = sc.presence[k]
            if isinstance(pres, np.ndarray):
                pres[idx] = True
            elif idx.size:
                pres[0] = min(pres[0], int(idx.min()))
                pres[1] = max(pres[1], int(idx.max()))


def scale_of(flat: np.ndarray) -> float:
    """Mean |ref| on an evenly strided sample: the magnitude against which
    near-zero elements' rounding error is judged."""
    step = max(1, flat.shape[0] // 65536)
    sample = np.abs(flat[::step].astype(np.float64))
    sample = sample[np.isfinite(sample)]
    m = float(sample.mean()) if sample.size else 0.0
    return m if m > 0 else np.finfo(np.float64).tiny
