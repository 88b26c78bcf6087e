"""Task-metric parity: does the exported model still do its job on a labelled slice?

Pure maths on per-sample records of both sides on the same samples (paired): a tensor
tolerance says whether two outputs are close; this says whether the difference matters to
the task, and how sure that is. The gate decides on the confidence bound:

- the metric for eager and for ONNX Runtime, and the delta (ONNX minus eager);
- for accuracy-like metrics, the discordant samples (eager right and ONNX wrong, and the
  reverse), an exact McNemar test on them (scipy's binomial test: the discordant pairs
  split 50/50 under "no difference"), per-class flip counts and the flipped samples' ids;
- for every metric, a paired bootstrap interval of the delta: the same resampled sample
  indices for both sides, seeded, so a run is reproducible;
- the verdict against the manifest's budget (`max_drop`), by one-sided tests at the
  level: pass when the worsening's upper bound is within it (non-inferiority), a drop
  when even its lower bound is beyond it, inconclusive otherwise (with the slice size that
  would settle it). Inconclusive blocks: the gate passes only what it can show to be
  within budget.

F1 is scikit-learn's; accuracy, top-k, MAE and MSE are means over samples, read from the
per-sample scores the bootstrap resamples anyway (the same numbers as scikit-learn's, a
test checks it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ACCURACY_LIKE = ("top1", "topk")  # a per-sample right/wrong: McNemar and flips apply
HIGHER_IS_BETTER = {"top1": True, "topk": True, "f1_macro": True, "f1_micro": True,
                    "mae": False, "mse": False}
PERCENT = ("top1", "topk", "f1_macro", "f1_micro")  # budgets and deltas in points (x100)


@dataclass(frozen=True)
class Paired:
    """Both sides on the same samples: the labels, each side's prediction (class index, or
    the regression value), and for top-k each side's per-sample hit."""

    labels: np.ndarray
    eager: np.ndarray
    onnx: np.ndarray
    eager_hit: np.ndarray | None = None  # top-k: label among the k best
    onnx_hit: np.ndarray | None = None


@dataclass(frozen=True)
class Stats:
    metric: str
    samples: int
    eager: float
    onnx: float
    delta: float                  # onnx - eager, in the metric's reporting unit
    low: float                    # the delta's paired bootstrap interval
    high: float
    level: float
    verdict: str                  # pass | drop | inconclusive
    budget: float                 # the largest tolerated worsening (reporting unit)
    worse_by: float               # the worsening's one-sided upper bound at `level`
    eager_only: int = 0           # discordant: eager right, ONNX wrong
    onnx_only: int = 0            # discordant: ONNX right, eager wrong
    p_value: float | None = None  # exact McNemar on the discordant pairs
    flips: dict[int, tuple[int, int]] | None = None  # true class -> (eager_only, onnx_only)
    flipped: tuple[int, ...] = ()  # sample ids where one side is right and the other wrong
    settle: int | None = None      # inconclusive: about how many samples would settle it

    def describe(self) -> str:
        unit = " points" if self.metric in PERCENT else ""
        head = (f"{self.metric}: eager {self.eager:.4g}, onnx {self.onnx:.4g}, "
                f"Δ {self.delta:+.3g}{unit} ({self.level:.0%} interval {self.low:+.3g} to "
                f"{self.high:+.3g}; worse by at most {max(self.worse_by, 0):.3g}{unit} at "
                f"{self.level:.0%}) on {self.samples} samples")
        if self.metric in ACCURACY_LIKE:
            head += (f"; discordant {self.eager_only} eager-only right / {self.onnx_only} "
                     f"onnx-only right (McNemar p={self.p_value:.3g})")
        if self.verdict == "pass":
            return f"{head}: within the budget of {self.budget:g}{unit}"
        if self.verdict == "drop":
            return f"{head}: worse by more than the budget of {self.budget:g}{unit}"
        more = f"; about {self.settle} samples would settle it" if self.settle else ""
        return (f"{head}: inconclusive: the slice is too small to tell a worsening of "
                f"{self.budget:g}{unit} from none{more}")


def _f1(metric: str, labels: np.ndarray, pred: np.ndarray) -> float:
    """F1 in points (macro or micro), scikit-learn's: the one metric here that is not a
    mean over samples, so it is recomputed on each resample."""
    from sklearn.metrics import f1_score  # type: ignore[import-untyped]

    average = metric.removeprefix("f1_")
    return float(f1_score(labels, pred, average=average, zero_division=0)) * 100


def paired_stats(metric: str, data: Paired, budget: float, *, level: float = 0.95,
                 resamples: int = 2000, seed: int = 0) -> Stats:
    """The paired comparison of one metric on one slice (see the module docstring)."""
    n = len(data.labels)
    if n == 0:
        raise ValueError("the slice has no samples")
    per = _per_sample(metric, data)
    if per is not None:  # a mean over samples (accuracy, MAE, MSE): the same definition
        scale = 100.0 if metric in PERCENT else 1.0
        eager, onnx = (float(np.mean(side)) * scale for side in per)
    else:
        eager, onnx = _f1(metric, data.labels, data.eager), _f1(metric, data.labels, data.onnx)
    deltas = _bootstrap(metric, data, resamples, np.random.default_rng(seed))
    alpha = 1 - level
    low, high = (float(x) for x in np.quantile(deltas, [alpha / 2, 1 - alpha / 2]))
    # the decision is a one-sided test each way at `level` (non-inferiority: the worsening
    # is at most the budget; and its converse), on the one-sided bounds
    one_low, one_high = (float(x) for x in np.quantile(deltas, [alpha, 1 - alpha]))
    delta = onnx - eager
    better = HIGHER_IS_BETTER[metric]
    worse_by = -one_low if better else one_high     # the worsening's upper bound
    best_worse = -one_high if better else one_low   # its lower bound
    verdict = "pass" if worse_by <= budget else "drop" if best_worse > budget \
        else "inconclusive"
    settle = _settle(n, low, high, delta, budget, better) if verdict == "inconclusive" \
        else None
    extra: dict[str, object] = {}
    if metric in ACCURACY_LIKE:
        extra = _discordant(metric, data)
    return Stats(metric, n, eager, onnx, delta, low, high, level, verdict, budget, worse_by,
                 settle=settle, **extra)  # type: ignore[arg-type]


def _per_sample(metric: str, data: Paired) -> tuple[np.ndarray, np.ndarray] | None:
    """Each side's per-sample score where the metric is their mean: accuracy, top-k, MAE
    and MSE as scikit-learn defines them (None: F1)."""
    if metric == "top1":
        return (data.eager == data.labels).astype(np.float64), \
            (data.onnx == data.labels).astype(np.float64)
    if metric == "topk" and data.eager_hit is not None and data.onnx_hit is not None:
        return data.eager_hit.astype(np.float64), data.onnx_hit.astype(np.float64)
    if metric in ("mae", "mse"):
        power = 1 if metric == "mae" else 2
        y = data.labels.astype(np.float64)
        return np.abs(data.eager - y) ** power, np.abs(data.onnx - y) ** power
    return None


def _bootstrap(metric: str, data: Paired, resamples: int, rng: np.random.Generator
               ) -> np.ndarray:
    """The delta on `resamples` paired resamples (the same indices for both sides)."""
    n = len(data.labels)
    scale = 100.0 if metric in PERCENT else 1.0
    per = _per_sample(metric, data)
    out = np.empty(resamples)
    if per is not None:  # a mean: resample the per-sample differences
        diff = (per[1] - per[0]) * scale
        values, counts = np.unique(diff, return_counts=True)
        if len(values) <= 64:
            # few distinct differences (right/wrong: -1, 0, +1): a resample's mean depends
            # only on how many of each it draws, a multinomial draw: the same bootstrap
            # distribution as drawing indices, at the cost of the draw, not of n per resample
            draws = rng.multinomial(n, counts / n, size=resamples)
            return np.asarray(draws @ values / n, dtype=np.float64)
        block = max(1, (1 << 22) // max(n, 1))
        for start in range(0, resamples, block):
            count = min(block, resamples - start)
            out[start:start + count] = diff[rng.integers(0, n, (count, n))].mean(axis=1)
        return out
    for i in range(resamples):
        idx = rng.integers(0, n, n)
        out[i] = _f1(metric, data.labels[idx], data.onnx[idx]) - \
            _f1(metric, data.labels[idx], data.eager[idx])
    return out


def _settle(n: int, low: float, high: float, delta: float, budget: float,
            better: bool) -> int | None:
    """The slice size at which an interval of this width (shrinking as 1/sqrt(n)) around
    the observed delta would no longer straddle the budget; None when the observed delta
    sits on the budget (no size settles it)."""
    worsening = -delta if better else delta
    gap = abs(worsening - budget)
    half = (high - low) / 2
    if gap <= 0 or half <= 0:
        return None
    return math.ceil(n * (half / gap) ** 2)


def _discordant(metric: str, data: Paired) -> dict[str, object]:
    from scipy.stats import binomtest  # type: ignore[import-untyped]

    if metric == "topk":
        assert data.eager_hit is not None and data.onnx_hit is not None
        right_e, right_o = data.eager_hit.astype(bool), data.onnx_hit.astype(bool)
    else:
        right_e, right_o = data.eager == data.labels, data.onnx == data.labels
    eager_only = right_e & ~right_o
    onnx_only = right_o & ~right_e
    b, c = int(eager_only.sum()), int(onnx_only.sum())
    p = 1.0 if b + c == 0 else float(binomtest(min(b, c), b + c, 0.5).pvalue)
    flips: dict[int, tuple[int, int]] = {}
    for cls in np.unique(data.labels[eager_only | onnx_only]):
        mask = data.labels == cls
        flips[int(cls)] = (int((eager_only & mask).sum()), int((onnx_only & mask).sum()))
    flipped = tuple(int(i) for i in np.flatnonzero(eager_only | onnx_only))
    return {"eager_only": b, "onnx_only": c, "p_value": p, "flips": flips,
            "flipped": flipped}


def predictions(metric: str, output: np.ndarray, labels: np.ndarray, k: int = 5
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """One batch's per-sample predictions: the class index (classification), the value
    (regression), and for top-k whether the label is among the k largest scores."""
    if metric in ("mae", "mse"):
        return output.reshape(len(output), -1).astype(np.float64).squeeze(-1) \
            if output.ndim > 1 and output.shape[-1] == 1 else output.astype(np.float64), None
    scores = output.reshape(len(output), -1).astype(np.float64)
    top = np.argmax(scores, axis=1)
    if metric != "topk":
        return top, None
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return top, (best == labels.reshape(-1, 1)).any(axis=1)
