"""Compare one reference output against one exported-model output.

Pure maths: arrays in, one immutable :class:`Comparison` record out. No I/O.

Why it is built this way
------------------------
* Shape, then dtype, are checked before any number: a transposed axis or an
  fp16-vs-fp32 output is a structural fault that a looser tolerance would only
  hide, so it gets its own verdict instead of "numbers differ".
* Floats are upcast to float64 before subtracting, so the difference itself
  is exact for every narrower input dtype. The pass rule is exactly
  ``torch.testing.assert_close(..., equal_nan=True)``'s applied to the
  float64 upcast: ``|got - ref| <= atol + rtol * |ref|`` elementwise, NaN
  equals NaN, an infinity equals only itself. (torch itself evaluates that
  formula in the tensors' own dtype, so for float32/16 the two can differ
  within a rounding of the threshold; float64 is the exact answer.)
  Integers and booleans are compared exactly, in their own dtype.
* The work runs in fixed-size chunks (on two threads when available) with
  reused scratch arrays, so the extra memory is ~10 MiB per thread whatever
  the tensor size: a gate that runs on every merge must not be the slow or
  the memory-hungry step. Everything
  after the scan (verdict, needed tolerance, region) reads small per-chunk
  summaries. Median and p99 come from a 1/32-octave histogram of the error
  (within ~1 %); the decade histogram itself is exact.
* "Needed tolerance" answers the reviewer's real question -- how far off is
  it? -- as the smallest float64 atol (with the given rtol) and the smallest
  rtol (with the given atol) for which the very same float64 test passes.
  They are found by bisection on the few elements that bind, so the figure
  passes and its float64 predecessor fails.
* Why a failing pair gets the verdict it does, and in which order the rules
  are tried: :mod:`parity_gate.compare.decide`.

Layout (data flows down: each imports only modules above it)
-------------------------------------------------------------
``ulp``        dtype kinds, float bit patterns, ULP distance
``scan``       chunk plan, scratch buffers, thread pool, per-chunk scan, merge
``tolerance``  needed atol/rtol by bisection over the binding elements
``stats``      decade histogram, quantiles, failure region
``decide``     sign/offset patterns, top-1 agreement, the verdict rules
this module    :func:`compare`, the one entry point, and the public names
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parity_gate.compare.decide import (
    ROUNDOFF,
    Top1,
    decide_verdict,
    pattern_of,
    shape_reason,
    top1_agreement,
)
from parity_gate.compare.scan import Ctx, Plan, release_scratch, scale_of, scan_tensor
from parity_gate.compare.stats import HIST_LABELS, decade_hist, find_region, quantiles, unravel
from parity_gate.compare.tolerance import needed_tolerance
from parity_gate.compare.ulp import bits_hex, dtype_name, kind_of, ulp_distance
from parity_gate.model.comparison import Comparison, Tolerance, Verdict

__all__ = ["Comparison", "Tolerance", "Verdict", "compare", "release_scratch", "ulp_distance"]


@np.errstate(all="ignore")  # NaN/Inf are data here, not warnings
def compare(
    reference: np.ndarray,
    actual: np.ndarray,
    tolerance: Tolerance,
    *,
    name: str = "output",
    task: str | None = None,
    min_top1_agreement: float = 1.0,
    strict_signed_zeros: bool = False,
) -> Comparison:
    """Compare ``actual`` against ``reference`` and explain the outcome.

    ``task="classification"`` also checks top-1 agreement (argmax over the
    last axis, every leading axis is a sample) against ``min_top1_agreement``;
    near-ties in ``actual``'s dtype are counted apart (``tie_count``), not as flips.
    ``strict_signed_zeros`` fails a pair whose only difference is +0 vs -0.
    Non-contiguous inputs are copied once; contiguous ones never are.
    """
    if task not in (None, "classification"):
        raise ValueError(f"unknown task {task!r}; expected None or 'classification'")
    ref = np.asarray(reference)
    got = np.asarray(actual)
    atol, rtol = float(tolerance.atol), float(tolerance.rtol)
    if not (atol >= 0 and rtol >= 0):  # also rejects NaN
        raise ValueError(f"tolerance must be non-negative, got atol={atol}, rtol={rtol}")
    head: dict[str, Any] = dict(
        name=name,
        shape_ref=str(tuple(ref.shape)),
        shape_got=str(tuple(got.shape)),
        dtype_ref=dtype_name(ref.dtype),
        dtype_got=dtype_name(got.dtype),
        atol=atol,
        rtol=rtol,
        task=task,
        min_top1_agreement=min_top1_agreement if task else None,
    )
    if ref.shape != got.shape:
        return Comparison(passed=False, verdict=Verdict.SHAPE,
                          reason=shape_reason(ref.shape, got.shape), **head)
    if ref.dtype != got.dtype:
        reason = f"dtype: reference {head['dtype_ref']} vs got {head['dtype_got']}"
        return Comparison(passed=False, verdict=Verdict.DTYPE, reason=reason, **head)
    kind = kind_of(ref.dtype)
    total = int(ref.size)
    if total == 0:
        return Comparison(passed=True, verdict=Verdict.PASS, reason="pass: empty tensors",
                          total=0, histogram=dict.fromkeys(HIST_LABELS, 0),
                          needed_atol=0.0, needed_rtol=0.0, **head)
    dname = head["dtype_ref"]
    roundoff = ROUNDOFF.get(dname, 0.0)
    ref_flat = np.ascontiguousarray(ref).reshape(-1)
    got_flat = np.ascontiguousarray(got).reshape(-1)
    ctx = Ctx(ref=ref_flat, got=got_flat, kind=kind, atol=atol, rtol=rtol,
              scale=scale_of(ref_flat), roundoff=roundoff, plan=Plan(ref.shape),
              strict_zeros=strict_signed_zeros and kind == "float")
    sc = scan_tensor(ctx)
    need_a, need_r = needed_tolerance(ctx, sc)
    hist = decade_hist(sc)
    med, p99 = quantiles(sc, (0.5, 0.99))

    # worst element
    if sc.nf_count:
        worst = min(idx[1][0] for idx in sc.nf.values())
    elif kind != "float":
        worst = sc.first_bad
    elif sc.max_excess > 0:  # the element that sets needed_atol
        worst = sc.excess_at
    else:  # everything passes at atol=0: show the largest error
        worst = sc.max_abs_at
    shape = tuple(ref.shape)
    w: dict[str, Any] = dict(worst_index=None, ref_value=None, got_value=None, ref_bits=None,
             got_bits=None, ulp=None)
    if worst is not None:
        rv, gv = ref_flat[worst: worst + 1], got_flat[worst: worst + 1]
        w = dict(
            worst_index=unravel(worst, shape),
            ref_value=float(rv[0]), got_value=float(gv[0]),
            ref_bits=bits_hex(rv) if kind == "float" else None,
            got_bits=bits_hex(gv) if kind == "float" else None,
            ulp=ulp_distance(rv[0], gv[0], ref.dtype) if kind == "float" else None,
        )

    nfail = sc.nbad
    region = find_region(shape, sc, nfail) if nfail else None
    top1 = Top1(None, [], 0, [], 0)
    if task == "classification":
        top1 = top1_agreement(ref, got, dname)
    nonfinite = {cat: {"count": c, "first": [list(unravel(i, shape)) for i in idx]}
                 for cat, (c, idx) in sc.nf.items()}

    verdict, reason = decide_verdict(
        ctx=ctx, sc=sc, dname=dname, region=region, top1=top1.agreement, nflip=top1.flips,
        flipped=top1.flipped, min_top1=min_top1_agreement, shape=shape, w=w,
        need=(need_a, need_r), tied=top1.tied, ties=top1.ties,
    )
    if region is not None:
        region = {**region, "pattern": pattern_of(sc, tensor_wide=False)}
    return Comparison(
        passed=verdict == Verdict.PASS,
        verdict=verdict,
        reason=reason,
        max_abs=sc.max_abs,
        max_rel=sc.max_rel,
        mismatch_count=nfail,
        total=total,
        mismatch_fraction=nfail / total,
        first_index=unravel(sc.first_bad, shape),
        needed_atol=need_a,
        needed_rtol=need_r,
        histogram=hist,
        median_abs=med,
        p99_abs=p99,
        nonfinite=nonfinite,
        signed_zeros=sc.sz_count if ctx.strict_zeros else None,
        region=region,
        top1_agreement=top1.agreement,
        flipped=top1.flipped,
        flipped_count=top1.flips,
        tied=top1.tied,
        tie_count=top1.ties,
        **w,
        **head,
    )
