"""Task-metric cases, worker side: the module's labelled slice through eager and through
ONNX Runtime, batch by batch, reduced to per-sample predictions and judged by
compare.task.

The slice is read a batch at a time (a folder of `.npy` files by memory map, an `.npz`
key by key, or the manifest's loader), so thousands of samples never sit whole in memory:
only the per-sample predictions are kept. Eager's predictions are made once per dtype and
shared by every provider's case.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate.compare import task as stats
from parity_gate.engine.fixtures import NUMPY_DTYPES
from parity_gate.engine.tensors import leaves, to_numpy, to_torch
from parity_gate.model.findings import Stage
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.model.task import FLIPPED_IDS, ClassFlips, TaskResult


class SliceError(Exception):
    """The slice cannot be read as the manifest declares it (said where and why)."""


def batches(spec: Any, names: list[str], base: Path) -> Iterator[tuple[dict[str, np.ndarray],
                                                                      np.ndarray]]:
    """(inputs by name, labels) batches of `spec.batch_size`, at most `spec.samples`."""
    limit = spec.samples or None
    if spec.loader is not None:
        module, _, attr = spec.loader.partition(":")
        source = getattr(importlib.import_module(module), attr)(spec.batch_size)
        yield from _capped(((dict(x), np.asarray(y)) for x, y in source), limit)
        return
    path = base / spec.data
    keys = {n: spec.keys.get(n, n) for n in names}
    if path.is_dir():
        arrays = {k: np.load(path / f"{k}.npy", mmap_mode="r")
                  for k in [*keys.values(), spec.labels] if (path / f"{k}.npy").is_file()}
    elif path.is_file():
        with np.load(path) as npz:
            arrays = {k: npz[k] for k in [*keys.values(), spec.labels] if k in npz.files}
    else:
        raise SliceError(f"task.data: {spec.data} is neither a file nor a folder "
                         f"(relative to {base})")
    missing = [k for k in [*keys.values(), spec.labels] if k not in arrays]
    if missing:
        raise SliceError(f"task.data: {spec.data} has no array {missing[0]!r} (has: "
                         f"{', '.join(sorted(arrays)) or 'none'})")
    total = len(arrays[spec.labels])
    total = min(total, limit) if limit else total
    for start in range(0, total, spec.batch_size):
        stop = min(total, start + spec.batch_size)
        yield ({n: np.asarray(arrays[k][start:stop]) for n, k in keys.items()},
               np.asarray(arrays[spec.labels][start:stop]))


def _capped(source: Iterator[tuple[dict[str, np.ndarray], np.ndarray]], limit: int | None
            ) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    seen = 0
    for inputs, labels in source:
        if limit is not None and seen + len(labels) > limit:
            keep = limit - seen
            yield {k: v[:keep] for k, v in inputs.items()}, labels[:keep]
            return
        seen += len(labels)
        yield inputs, labels
        if limit is not None and seen >= limit:
            return


def _typed(inputs: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Floating inputs in the module's dtype, as the fixtures make them."""
    return {k: np.ascontiguousarray(v.astype(NUMPY_DTYPES[dtype], copy=False))
            if v.dtype.kind == "f" else np.ascontiguousarray(v) for k, v in inputs.items()}


class _Side:
    """One side's per-sample predictions, accumulated batch by batch."""

    def __init__(self) -> None:
        self.preds: list[np.ndarray] = []
        self.hits: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []

    def add(self, spec: Any, output: np.ndarray, labels: np.ndarray) -> None:
        pred, hit = stats.predictions(spec.metric, output, labels, spec.k)
        self.preds.append(pred)
        self.labels.append(labels)
        if hit is not None:
            self.hits.append(hit)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        return (np.concatenate(self.labels), np.concatenate(self.preds),
                np.concatenate(self.hits) if self.hits else None)


def run_cases(ctx: Any, mod: Any, exported: Any, cached: bool, keys: list[Any],
              open_session: Callable[..., Any]) -> None:
    """Every task case of one dtype on the module's export, provider by provider."""
    import torch

    from parity_gate.engine.binding import output_names
    from parity_gate.engine.stages import StageFailure
    from parity_gate.engine.stages import run as ort_run

    job, spec = ctx.job, ctx.job.module.task
    provenance = ctx.provenance(mod.device, exported, cached)
    eager: _Side | None = None
    problem = ""
    for provider in dict.fromkeys(k.provider for k in keys):
        pkeys = [k for k in keys if k.provider == provider]
        opened = open_session(ctx, exported, mod.dtype, provider, pkeys, provenance)
        if opened is None:
            continue
        session = opened[0]
        feed_names = {i.name for i in session.get_inputs()}
        out_names = [o.name for o in session.get_outputs()]
        for key in pkeys:
            ctx.step(Stage.RUNNING, key.id, f"task metric {spec.metric} on {spec.name}")
            t0 = time.perf_counter()
            side, names = _Side(), list(mod.binding.order)
            first, wanted = eager is None, 0
            if first:
                eager = _Side()
            try:
                for inputs, labels in batches(spec, names, job.base_dir):
                    inputs = _typed(inputs, mod.dtype)
                    if first:
                        with torch.inference_mode():
                            out = mod.binding.call(mod.typed, {
                                n: to_torch(inputs[n], mod.device) for n in names})
                        flat = [to_numpy(t) for t in leaves(out)]
                        got_names, _ = output_names(out, job.module)
                        wanted = got_names.index(spec.output) if spec.output in got_names \
                            else 0
                        assert eager is not None
                        eager.add(spec, flat[wanted], labels)
                    got = ort_run(session, {n: inputs[n] for n in names if n in feed_names},
                                  batch_size=None, label="onnxruntime run: ")
                    index = out_names.index(spec.output) if spec.output in out_names else \
                        wanted
                    side.add(spec, got[index], labels)
            except StageFailure as failure:
                ctx.result(CaseResult(key, failure.outcome, failure.reason, failure.detail,
                                      provenance=provenance))
                if first:
                    eager = None
                continue
            except (SliceError, OSError, ValueError, KeyError, TypeError) as exc:
                problem = f"{type(exc).__name__}: {exc}" if not isinstance(exc, SliceError) \
                    else str(exc)
                ctx.result(CaseResult(key, Outcome.EAGER_ERROR,
                                      f"task slice {spec.name}: {problem}"[:500],
                                      provenance=provenance))
                if first:
                    eager = None
                continue
            assert eager is not None
            ctx.result(_judged(key, spec, eager, side, provenance,
                               time.perf_counter() - t0))


def _judged(key: Any, spec: Any, eager: _Side, onnx: _Side, provenance: Any,
            seconds: float) -> CaseResult:
    labels, e_pred, e_hit = eager.arrays()
    _, o_pred, o_hit = onnx.arrays()
    found = stats.paired_stats(spec.metric, stats.Paired(labels, e_pred, o_pred, e_hit, o_hit),
                               spec.max_drop, level=spec.level, resamples=spec.resamples,
                               seed=spec.seed)
    record = TaskResult(
        found.metric, found.samples, found.eager, found.onnx, found.delta, found.low,
        found.high, found.level, found.budget, found.verdict, found.eager_only,
        found.onnx_only, found.p_value,
        [ClassFlips(c, a, b) for c, (a, b) in sorted((found.flips or {}).items())],
        list(found.flipped[:FLIPPED_IDS]), found.settle, found.describe())
    outcome = Outcome.PASS if found.verdict == "pass" else Outcome.METRIC_DROP
    return CaseResult(key, outcome, found.describe(), provenance=provenance, task=record,
                      samples=found.samples, timings={"run_s": round(seconds, 4)})
