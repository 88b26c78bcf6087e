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
    Evidence,
    Top1,
    decide_verdict,
    pattern_of,
    shape_reason,
    top1_agreement,
)
from parity_gate.compare.scan import Ctx, Plan, Scan, release_scratch, scale_of, scan_tensor
from parity_gate.compare.stats import HIST_LABELS, decade_hist, find_region, quantiles, unravel
from parity_gate.compare.tolerance import needed_tolerance
from parity_gate.compare.ulp import bits_hex, dtype_name, kind_of, ulp_distance
from parity_gate.model.comparison import Comparison, Tolerance, Verdict

__all__ = ["Comparison", "Tolerance", "Verdict", "compare", "release_scratch", "ulp_distance"]


def _head(ref: np.ndarray, got: np.ndarray, tolerance: Tolerance, name: str,
          task: str | None, min_top1_agreement: float) -> dict[str, Any]:
    """The fields every Comparison carries, whatever its verdict; rejects a bad
    task or a negative (or NaN) tolerance before anything is computed."""
    if task not in (None, "classification"):
        raise ValueError(f"unknown task {task!r}; expected None or 'classification'")
    atol, rtol = float(tolerance.atol), float(tolerance.rtol)
    if not (atol >= 0 and rtol >= 0):  # also rejects NaN
        raise ValueError(f"tolerance must be non-negative, got atol={atol}, rtol={rtol}")
    return dict(
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


def _structural(ref: np.ndarray, got: np.ndarray, head: dict[str, Any]) -> Comparison | None:
    """Rule 1 and the empty pair: the outcomes decided before any number is read."""
    if ref.shape != got.shape:
        return Comparison(passed=False, verdict=Verdict.SHAPE,
                          reason=shape_reason(ref.shape, got.shape), **head)
    if ref.dtype != got.dtype:
        reason = f"dtype: reference {head['dtype_ref']} vs got {head['dtype_got']}"
        return Comparison(passed=False, verdict=Verdict.DTYPE, reason=reason, **head)
    if ref.size == 0:
        return Comparison(passed=True, verdict=Verdict.PASS, reason="pass: empty tensors",
                          total=0, histogram=dict.fromkeys(HIST_LABELS, 0),
                          needed_atol=0.0, needed_rtol=0.0, **head)
    return None


def _worst(ctx: Ctx, sc: Scan, shape: tuple[int, ...]) -> dict[str, Any]:
    """The one element a reviewer is shown: the first non-finite one, else (exact
    dtypes) the first mismatch, else the one that sets needed_atol, else the
    largest error; with its values, bit patterns and ULP distance for floats."""
    if sc.nf_count:
        worst = min(idx[1][0] for idx in sc.nf.values())
    elif ctx.kind != "float":
        worst = sc.first_bad
    elif sc.max_excess > 0:  # the element that sets needed_atol
        worst = sc.excess_at
    else:  # everything passes at atol=0: show the largest error
        worst = sc.max_abs_at
    if worst is None:
        return dict(worst_index=None, ref_value=None, got_value=None, ref_bits=None,
                    got_bits=None, ulp=None)
    rv, gv = ctx.ref[worst: worst + 1], ctx.got[worst: worst + 1]
    is_float = ctx.kind == "float"
    return dict(
        worst_index=unravel(worst, shape),
        ref_value=float(rv[0]), got_value=float(gv[0]),
        ref_bits=bits_hex(rv) if is_float else None,
        got_bits=bits_hex(gv) if is_float else None,
        ulp=ulp_distance(rv[0], gv[0], ctx.ref.dtype) if is_float else None,
    )


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
    ref = np.asarray(reference)
    got = np.asarray(actual)
    head = _head(ref, got, tolerance, name, task, min_top1_agreement)
    early = _structural(ref, got, head)
    if early is not None:
        return early
    kind = kind_of(ref.dtype)
    dname = head["dtype_ref"]
    ref_flat = np.ascontiguousarray(ref).reshape(-1)
    got_flat = np.ascontiguousarray(got).reshape(-1)
    ctx = Ctx(ref=ref_flat, got=got_flat, kind=kind, atol=head["atol"], rtol=head["rtol"],
              scale=scale_of(ref_flat), roundoff=ROUNDOFF.get(dname, 0.0), plan=Plan(ref.shape),
              strict_zeros=strict_signed_zeros and kind == "float")
    sc = scan_tensor(ctx)
    shape = tuple(ref.shape)
    ev = Evidence(
        dname=dname, shape=shape,
        region=find_region(shape, sc, sc.nbad) if sc.nbad else None,
        top1=top1_agreement(ref, got, dname) if task == "classification"
        else Top1(None, [], 0, [], 0),
        min_top1=min_top1_agreement, worst=_worst(ctx, sc, shape),
        need=needed_tolerance(ctx, sc),
    )
    verdict, reason = decide_verdict(ctx, sc, ev)
    return _record(ctx, sc, ev, verdict, reason, head)


def _record(ctx: Ctx, sc: Scan, ev: Evidence, verdict: Verdict, reason: str,
            head: dict[str, Any]) -> Comparison:
    """Assemble the Comparison from the scan summary and the evidence the verdict read;
    the statistics only a report shows (histogram, quantiles) are computed here."""
    shape = ev.shape
    region = ev.region
    if region is not None:
        region = {**region, "pattern": pattern_of(sc, tensor_wide=False)}
    med, p99 = quantiles(sc, (0.5, 0.99))
    need_a, need_r = ev.need
    return Comparison(
        passed=verdict == Verdict.PASS,
        verdict=verdict,
        reason=reason,
        max_abs=sc.max_abs,
        max_rel=sc.max_rel,
        mismatch_count=sc.nbad,
        total=sc.total,
        mismatch_fraction=sc.nbad / sc.total,
        first_index=unravel(sc.first_bad, shape),
        needed_atol=need_a,
        needed_rtol=need_r,
        histogram=decade_hist(sc),
        median_abs=med,
        p99_abs=p99,
        nonfinite={cat: {"count": c, "first": [list(unravel(i, shape)) for i in idx]}
                   for cat, (c, idx) in sc.nf.items()},
        signed_zeros=sc.sz_count if ctx.strict_zeros else None,
        region=region,
        top1_agreement=ev.top1.agreement,
        flipped=ev.top1.flipped,
        flipped_count=ev.top1.flips,
        tied=ev.top1.tied,
        tie_count=ev.top1.ties,
        **ev.worst,
        **head,
    )
