#!/usr/bin/env python3
"""Task-metric parity (compare.task): its error rates and its cost, side by side in one run.

1. False alarms: exports with no real drop, over repeated 2,000-sample slices at the
   default level (0.95) and budget (max_drop 0.5 points). Two kinds: lossless (both sides
   predict alike: the float32 export) and noisy but unbiased (0.5 % of samples go from
   right to wrong and as many from wrong to right, as float16 near-ties do). A false alarm is any
   verdict but pass (a drop or an inconclusive interval both block). Target ≤ 5 %.
2. Power: a planted 1-point top-1 drop (20 of 2,000 correct samples made wrong, plus the
   unbiased noise) on each slice; detected when the verdict is not pass. Target ≥ 80 %.
3. Cost: on the digits classifier (tests/data/task, trained at build on scikit-learn's
   digits) and its ONNX export, the task pass (eager and ONNX Runtime over the slice, then
   the paired statistics) against the tensor pass on the same slice (the same two runs,
   then the gate's tensor comparison of the logits), interleaved rounds. Target ≤ 1.2×.

    python benchmarks/task_metric.py [--slices 400] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from parity_gate.compare import Tolerance, compare  # noqa: E402
from parity_gate.compare.task import Paired, paired_stats, predictions  # noqa: E402


def _slice(rng: np.random.Generator, n: int, noise: float, drop: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = rng.integers(0, 10, n)
    eager = np.where(rng.random(n) < 0.9, y, (y + 1 + rng.integers(0, 9, n)) % 10)
    onnx = eager.copy()
    right, wrong = np.flatnonzero(eager == y), np.flatnonzero(eager != y)
    k = rng.binomial(n, noise)  # as many right→wrong as wrong→right: no drop on average
    lose = rng.choice(right, k, replace=False)
    gain = rng.choice(wrong, min(k, len(wrong)), replace=False)
    onnx[lose] = (y[lose] + 1) % 10
    onnx[gain] = y[gain]
    if drop:
        moved = np.zeros(n, bool)
        moved[lose] = moved[gain] = True
        keep = np.flatnonzero((onnx == y) & ~moved)
        hit = rng.choice(keep, drop, replace=False)
        onnx[hit] = (y[hit] + 1) % 10
    return y, eager, onnx


def error_rates(slices: int, n: int = 2000) -> None:
    rng = np.random.default_rng(0)
    for label, noise, drop in (("lossless", 0.0, 0), ("unbiased noise 0.5 %", 0.005, 0),
                               ("planted 1-point drop", 0.005, n // 100)):
        verdicts = [paired_stats("top1", Paired(*_slice(rng, n, noise, drop)), 0.5,
                                 resamples=1000, seed=i).verdict for i in range(slices)]
        blocked = sum(v != "pass" for v in verdicts) / slices
        what = "power" if drop else "false alarms"
        target = "≥ 0.80" if drop else "≤ 0.05"
        print(f"{label:24s} {what}: {blocked:.3f} ({target}) over {slices} slices of {n} "
              f"(drop {verdicts.count('drop')}, inconclusive {verdicts.count('inconclusive')})")


def cost(rounds: int) -> None:
    import io

    import onnxruntime as ort
    import torch

    sys.path.insert(0, str(ROOT / "tests" / "data" / "task"))
    import task_models

    model = task_models.classifier()
    images, labels = task_models.digits()
    buffer = io.BytesIO()
    torch.onnx.export(model, (torch.from_numpy(images[:4]),), buffer, dynamo=True,
                      input_names=["x"], dynamic_shapes=({0: torch.export.Dim("batch")},))
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    batch = 512

    def both() -> tuple[list[np.ndarray], list[np.ndarray]]:
        eager, onnx = [], []
        for start in range(0, len(images), batch):
            x = images[start:start + batch]
            with torch.inference_mode():
                eager.append(model(torch.from_numpy(x)).numpy())
            onnx.append(session.run(None, {"x": x})[0])
        return eager, onnx

    def task_pass() -> None:
        eager, onnx = both()
        e = np.concatenate([predictions("top1", a, labels)[0] for a in eager])
        o = np.concatenate([predictions("top1", a, labels)[0] for a in onnx])
        paired_stats("top1", Paired(labels, e, o), 0.5)

    def tensor_pass() -> None:
        eager, onnx = both()
        compare(np.concatenate(eager), np.concatenate(onnx), Tolerance(1e-5, 1e-3))

    times: dict[str, list[float]] = {"task": [], "tensor": []}
    for i in range(rounds):
        for name, fn in ((("task", task_pass), ("tensor", tensor_pass)) if i % 2 == 0 else
                         (("tensor", tensor_pass), ("task", task_pass))):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    task, tensor = statistics.median(times["task"]), statistics.median(times["tensor"])
    print(f"cost: task pass {task * 1e3:.1f} ms vs tensor pass {tensor * 1e3:.1f} ms on "
          f"{len(images)} samples: {task / tensor:.2f}× (≤ 1.2×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    error_rates(args.slices)
    cost(args.rounds)


if __name__ == "__main__":
    main()
