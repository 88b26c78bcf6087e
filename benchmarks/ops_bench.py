"""Benchmark: the op sweep vs a one-module-per-case harness on the same 200 cases.

Everything runs in this one warm process (torch imported, exporter warmed
up, one thread), through the same worker code, so only the batching
differs:

* sweep     — cases exported many to a module, one ORT session per batch,
              failures isolated by bisection (what `parity-gate ops` does);
* per-case  — one module, one `torch.onnx.export`, one session per case
              (a plain harness: the exporter rebuilds its registry per call);
* per-case+ — the same, with the sweep's export speed-ups (registry built
              once), to show what batching alone buys.

The arms are interleaved: the cases are cut into chunks (`--chunk`, 50) and
every arm runs each chunk in turn, in an order that rotates per chunk, so
load from other jobs that comes and goes is shared by all arms instead of
skewing whichever arm ran while it lasted. Prints seconds, cases/s and the
throughput ratios, and checks that the harnesses agree on every case's
outcome. Target: sweep ≥ 10x per-case.

    python benchmarks/ops_bench.py            # 200 cases
    python benchmarks/ops_bench.py --cases 50 # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity_gate.model.results import CaseResult
from parity_gate.ops import export as op_export
from parity_gate.ops.jobs import OpBatchJob, Unit
from parity_gate.ops.planner import DEFAULT_BATCH, Selection, job_for, units_of
from parity_gate.ops.registry import load_variants
from parity_gate.ops.worker import run_batch

TARGET = 10.0
SOURCES = ("parity_gate.ops.catalogue:VARIANTS",)
DTYPES = ("float32", "float16", "int64", "bfloat16")


def subset(n: int) -> list[Unit]:
    """n units spread evenly over the catalogue (every family, several dtypes)."""
    variants = load_variants(SOURCES)
    units, _ = units_of(variants.values(), Selection(dtypes=list(DTYPES)))
    units.sort(key=lambda u: (variants[u.variant].family, u.variant, u.dtype, u.input_class))
    step = max(1, len(units) // n)
    return units[::step][:n]


def run_jobs(jobs: list[OpBatchJob]) -> dict[str, str]:
    outcomes: dict[str, str] = {}

    def emit(message: Any) -> None:
        if isinstance(message, CaseResult):
            outcomes[message.id] = message.outcome.value

    for job in jobs:
        run_batch(job, emit)
    return outcomes


def batched(units: list[Unit]) -> list[OpBatchJob]:
    sel = Selection()
    by_dtype: dict[str, list[Unit]] = {}
    for u in units:
        by_dtype.setdefault(u.dtype, []).append(u)
    return [job_for(f"{d}#{i}", part[i:i + DEFAULT_BATCH], sel, SOURCES, 0)
            for d, part in by_dtype.items() for i in range(0, len(part), DEFAULT_BATCH)]


def one_per_case(units: list[Unit]) -> list[OpBatchJob]:
    sel = Selection()
    return [job_for(f"case{i}", [u], sel, SOURCES, 0) for i, u in enumerate(units)]


@contextlib.contextmanager
def plain_exporter() -> Iterator[None]:
    """What a plain harness gets: torch.onnx.export builds its registry on every call."""
    saved = op_export.cached_registry
    op_export.cached_registry = contextlib.nullcontext  # type: ignore[assignment]
    try:
        yield
    finally:
        op_export.cached_registry = saved


ARMS = ("sweep", "per-case", "per-case+")


def arm(name: str, units: list[Unit]) -> dict[str, str]:
    """One arm on some units: the sweep's batches, or one module per case."""
    if name == "sweep":
        return run_jobs(batched(units))
    if name == "per-case":
        with plain_exporter():
            return run_jobs(one_per_case(units))
    return run_jobs(one_per_case(units))


def interleaved(units: list[Unit], chunk: int) -> tuple[dict[str, float], dict[str, dict]]:
    """Every arm on each chunk of units in turn, the order rotating per chunk, so load
    that comes and goes (other jobs on the machine) falls on all arms alike."""
    seconds = dict.fromkeys(ARMS, 0.0)
    outcomes: dict[str, dict[str, str]] = {a: {} for a in ARMS}
    units = sorted(units, key=lambda u: u.dtype)  # a chunk is then one dtype: one batch
    chunks = [units[i:i + chunk] for i in range(0, len(units), chunk)]
    for n, part in enumerate(chunks):
        order = ARMS[n % len(ARMS):] + ARMS[:n % len(ARMS)]
        line = []
        for name in order:
            t0 = time.perf_counter()
            outcomes[name].update(arm(name, part))
            took = time.perf_counter() - t0
            seconds[name] += took
            line.append(f"{name} {took:.1f}s")
        print(f"  chunk {n + 1}/{len(chunks)} ({len(part)} cases): {', '.join(line)}",
              flush=True)
    return seconds, outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=50,
                        help="cases per interleaved chunk (each arm runs every chunk)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    units = subset(args.cases)
    families = Counter(load_variants(SOURCES)[u.variant].family for u in units)
    print(f"ops_bench: {len(units)} cases, {len(families)} families, dtypes "
          f"{sorted({u.dtype for u in units})}; warming up ...", flush=True)
    run_jobs(one_per_case(units[:3]))  # imports, first export, first session
    seconds, out = interleaved(units, args.chunk)
    for name in ARMS:
        print(f"  {name:<11} {len(out[name]):>4} cases  {seconds[name]:7.1f} s  "
              f"{len(out[name]) / seconds[name]:6.1f} cases/s")
    sweep, plain, fast = (out[a] for a in ARMS)
    differ = sorted(k for k in sweep if not (sweep[k] == plain.get(k) == fast.get(k)))
    print(f"ops_bench: outcomes agree on {len(sweep) - len(differ)}/{len(sweep)} cases"
          + (f" (differ: {', '.join(differ[:5])})" if differ else ""))
    ratio = seconds["per-case"] / seconds["sweep"]
    print(f"ops_bench: throughput ratio sweep / per-case  = {ratio:.1f}x (target >= "
          f"{TARGET:g}x: {'PASS' if ratio >= TARGET else 'FAIL'})")
    print(f"ops_bench: throughput ratio sweep / per-case+ = "
          f"{seconds['per-case+'] / seconds['sweep']:.1f}x (batching alone)")
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
