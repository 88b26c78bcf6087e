"""Latency statistics: a ratio with an honest interval, when to stop timing, what is slower.

Pure functions of timings (seconds) measured elsewhere (engine.performance).

Why it is built this way
------------------------
* Eager and ONNX Runtime are timed in interleaved pairs on the same inputs, so
  load that comes and goes on a shared runner hits both sides of a pair alike;
  the statistic is the median of the per-pair ratios ONNX/eager, which that
  load largely cancels out of. (A ratio of two separate medians would not.)
* Its 95% interval is the distribution-free one for a median: order statistics
  chosen by the sign test (binomial(n, 1/2)), no normality assumed and no random
  resampling, so the same timings always give the same interval.
* Timing stops when the interval is narrow (high/low within `width`), or at a
  bounded number of pairs or seconds, whichever comes first: the cost is bounded
  whatever the machine does, and an unstable figure says so.
* The gate flags a slowdown only when the interval's *lower* bound exceeds the
  limit, so a noisy measurement of a fast export cannot fail it, and a regression
  against a baseline is an interval that no longer overlaps the recorded one:
  the noise measured in this run and in the recorded one, never a fixed
  percentage of one sample.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
MIN_PAIRS = 8  # the smallest count whose 95% sign-test interval excludes the extremes
MAX_PAIRS = 60
WIDTH = 1.15  # stop once high / low of the ratio's interval is within this
EXTRA = 20  # budgets a ratio that straddles the gate's limit may take


@dataclass(frozen=True)
class Ratio:
    """Median per-pair ratio ONNX/eager, its interval, and the two medians (seconds)."""

    ratio: float
    low: float
    high: float
    eager_s: float
    onnx_s: float
    pairs: int

    @property
    def narrow(self) -> bool:
        """A real 95% interval (enough pairs for one) within WIDTH."""
        return order_bounds(self.pairs) is not None and self.low > 0 \
            and self.high / self.low <= WIDTH


def order_bounds(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """0-based indices (lo, hi) into n sorted values that bracket the median with at
    least `confidence` (sign test); None when n is too small for any such interval."""
    alpha = 1 - confidence
    cumulative, k = 0.0, -1
    # the largest k with P(B <= k) <= alpha/2 for B ~ binomial(n, 1/2)
    for j in range(n + 1):
        cumulative += math.comb(n, j) / 2**n
        if cumulative > alpha / 2:
            break
        k = j
    if k < 0:
        return None
    return k, n - 1 - k


def paired_ratio(eager_s: Sequence[float], onnx_s: Sequence[float],
                 confidence: float = CONFIDENCE) -> Ratio:
    """The ratio statistic of interleaved pairs (eager_s[i], onnx_s[i]). With too few
    pairs for a 95% interval (under 6), the interval is the full observed range and the
    ratio is never `narrow`."""
    if len(eager_s) != len(onnx_s) or not eager_s:
        raise ValueError("paired timings need the same, non-zero number of values per side")
    ratios = sorted(o / e if e > 0 else math.inf for e, o in zip(eager_s, onnx_s, strict=True))
    bounds = order_bounds(len(ratios), confidence)
    lo, hi = bounds if bounds is not None else (0, len(ratios) - 1)
    return Ratio(statistics.median(ratios), ratios[lo], ratios[hi],
                 statistics.median(eager_s), statistics.median(onnx_s), len(ratios))


def enough(eager_s: Sequence[float], onnx_s: Sequence[float], spent_s: float,
           budget_s: float, limit: float | None = None, min_pairs: int = MIN_PAIRS,
           max_pairs: int = MAX_PAIRS) -> bool:
    """Stop timing. After `min_pairs`: when the ratio's interval is narrow, or lies wholly
    on one side of `limit` (the gate's question is answered), or the budget is spent; a
    ratio still straddling `limit` gets up to EXTRA budgets, since that is the decision
    the gate makes on it (only where latency is gated). Always at `max_pairs`, or at EXTRA
    budgets (after two pairs: a pair that alone takes them is not repeated eight times)."""
    n = len(eager_s)
    if n >= max_pairs or (n >= 2 and spent_s >= EXTRA * budget_s):
        return True
    if n < min_pairs:
        # Nothing gated on it: past the budget, stop once a 95% interval exists (6 pairs),
        # and at twice the budget in any case.
        return limit is None and n >= 2 and (spent_s >= 2 * budget_s or (
            spent_s >= budget_s and order_bounds(n) is not None))
    r = paired_ratio(eager_s, onnx_s)
    if r.narrow or (limit is not None and (r.low > limit or r.high <= limit)):
        return True
    return spent_s >= budget_s and limit is None


def instability(eager_s: Sequence[float], onnx_s: Sequence[float], width: float = WIDTH,
                ) -> str:
    """Why a ratio did not settle, in one line: which side's per-call times spread (the
    slowest sample over the fastest), or how many pairs there were. Eager spreading while
    ONNX Runtime does not is the loaded-machine signature (torch's threads wait for cores
    the other jobs hold), which the paired ratio cannot cancel."""
    if order_bounds(len(eager_s)) is None:
        return f"only {len(eager_s)} pair(s) fit the budget (too few for a 95% interval)"
    spread = {side: max(v) / min(v) if min(v) > 0 else math.inf
              for side, v in (("eager", eager_s), ("ONNX Runtime", onnx_s))}
    side = max(spread, key=lambda k: spread[k])
    values = eager_s if side == "eager" else onnx_s
    return (f"{side}'s calls took {min(values) * 1e3:.3g}–{max(values) * 1e3:.3g} ms across "
            f"{len(values)} samples ({spread[side]:.3g}× apart; the other side "
            f"{min(spread.values()):.3g}×): the machine was busy")


def inner_repeats(seconds_per_call: float, floor_s: float = 1e-3, most: int = 50) -> int:
    """Calls per timed sample so that one sample lasts at least `floor_s`: a call of a few
    microseconds is below the timer's and the scheduler's noise."""
    if seconds_per_call <= 0:
        return most
    return max(1, min(most, math.ceil(floor_s / seconds_per_call)))


def slower(low: float, max_slowdown: float | None) -> bool:
    """ONNX is slower than allowed only when even the interval's lower bound is."""
    return max_slowdown is not None and low > max_slowdown


def regressed(recorded: tuple[float, float, float], now: tuple[float, float, float]) -> bool:
    """(ratio, low, high) now against the baseline's: a regression when the intervals no
    longer overlap and the new one lies above (slower)."""
    return now[1] > recorded[2]
