"""The GPU check's text summary: what ran where, read from the runs' results.json.

    python benchmarks/gpu_summary.py OUT [--seconds N]

`benchmarks/gpu_check.sh` calls it on its results folder: OUT/env.json (what the script
found: driver CUDA, the packages it picked, what torch and onnxruntime see), OUT/tensorrt.txt
(the TensorRT probe), OUT/runs.txt (each run's exit code) and OUT/<run>/results.json. It
writes OUT/summary.txt and prints it. Exit 1 when a run crashed (an exit code that is no
verdict) or the runs did not use the GPU: a "CUDA
pass" whose session fell back to the CPU, or a run whose CUDA cases were all skipped,
proves nothing about the GPU lane, and a person reading a green check must not take it
for one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from parity_gate.model.outcomes import Outcome
from parity_gate.model.performance import figure
from parity_gate.model.results import CaseResult, RunResult

GPU_PROVIDERS = ("cuda", "tensorrt")
EP = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
BUDGET_S = 480  # the 8 minutes on one modern GPU
FELL_BACK = "fell back to"  # runtime.ProviderFallback's wording


def ran_on_gpu(case: CaseResult) -> bool:
    """A GPU-provider case whose ONNX Runtime outputs were compared, on a session that kept
    its provider, with at least one node there where placement was read."""
    if case.key.provider not in GPU_PROVIDERS or not case.comparisons \
            or FELL_BACK in case.reason:
        return False
    placement = case.performance.placement if case.performance else None
    return placement is None or placement.by_provider.get(EP[case.key.provider], 0) > 0


def gpu_use(runs: dict[str, RunResult]) -> list[str]:
    """Why the runs did not use the GPU, one line each; empty when they did."""
    cases = [c for run in runs.values() for c in run.cases if c.key.provider == "cuda"]
    if not runs:
        return ["did not use the GPU: no results.json was written"]
    if not cases:
        return ["did not use the GPU: no CUDA case was planned"]
    if not any(ran_on_gpu(c) for c in cases):
        why = sorted({c.reason[:160] for c in cases if c.reason})[:3]
        return [f"did not use the GPU: none of {len(cases)} CUDA case(s) ran on the CUDA "
                f"provider (skipped, failed before running or fell back to the CPU)"
                + (": " + " | ".join(why) if why else "")]
    return []


def _row(case: CaseResult) -> str:
    k = case.key
    return f"{k.module}/{k.dtype}/{k.inputs}" + ("" if k.batch_size is None
                                                   else f"/b{k.batch_size}")


def _outcome(case: CaseResult) -> str:
    if case.outcome is Outcome.PASS and case.key.provider in GPU_PROVIDERS \
            and not ran_on_gpu(case):
        return "pass(not on GPU)"
    return case.outcome.value


def run_lines(name: str, run: RunResult, rc: str) -> list[str]:
    """One run: its verdict, every case per provider, fallbacks, latency, skips."""
    providers = sorted({c.key.provider for c in run.cases},
                       key=lambda p: ("cpu", "cuda", "tensorrt").index(p)
                       if p in ("cpu", "cuda", "tensorrt") else 9)
    devices = sorted({c.provenance.reference_device for c in run.cases if c.comparisons})
    lines = [f"== {name}: exit {rc}, {run.verdict.result} ({run.verdict.why}); "
             f"{len(run.cases)} cases in {run.duration_s:.0f} s; eager reference on "
             f"{', '.join(devices) or '-'}"]
    table: dict[str, dict[str, str]] = defaultdict(dict)
    for c in run.cases:
        table[_row(c)][c.key.provider] = _outcome(c)
    width = max([len(r) for r in table] + [4])
    lines.append(f"  {'case':<{width}}  "
                 + "  ".join(f"{p:<16}" for p in providers).rstrip())
    for row, by in table.items():
        lines.append(f"  {row:<{width}}  "
                     + "  ".join(f"{by.get(p, '-'):<16}" for p in providers).rstrip())
    lines += _placements(run) + _startups(run) + _latencies(run)
    skips: dict[tuple[str, str], int] = defaultdict(int)
    for c in run.cases:
        if c.outcome is Outcome.SKIPPED:
            skips[(c.key.provider, c.reason)] += 1
    if skips:
        lines.append("  skipped:")
        lines += [f"    {n} x {p}: {why}" for (p, why), n in skips.items()]
    failing = [c for c in run.cases if c.failed]
    if failing:
        lines.append("  failing:")
        lines += [f"    {c.id}: {c.outcome.value}: {c.reason[:200]}" for c in failing[:40]]
        if len(failing) > 40:
            lines.append(f"    and {len(failing) - 40} more (results.json)")
    return lines


def _placements(run: RunResult) -> list[str]:
    """Per module, dtype and provider (one profiled session each): nodes per provider, the
    nodes that left the requested provider with the copies around each (bytes, µs), and
    the inserted copies' total."""
    seen: dict[tuple[str, str, str], str] = {}
    for c in run.cases:
        p = c.performance.placement if c.performance else None
        key = (c.key.module, c.key.dtype, c.key.provider)
        if p is not None and key not in seen and c.key.provider in GPU_PROVIDERS:
            seen[key] = p.describe()
    if not seen:
        return ["  placement on the GPU: none read"]
    return ["  placement on the GPU:"] + [f"    {m}/{d} on {p}: {text}"
                                          for (m, d, p), text in seen.items()]


def _startups(run: RunResult) -> list[str]:
    """Per module, dtype and GPU provider: creating the session and its first run (where
    TensorRT builds or loads its engine), which the latency figures leave out."""
    seen: dict[tuple[str, str, str], str] = {}
    for c in run.cases:
        s = c.performance.startup if c.performance else None
        key = (c.key.module, c.key.dtype, c.key.provider)
        if s is not None and key not in seen and c.key.provider in GPU_PROVIDERS:
            seen[key] = s.describe() + (f"; engine cache {s.cache_path}" if s.cache_path
                                        else "")
    if not seen:
        return ["  session start-up on the GPU: none measured"]
    return ["  session start-up on the GPU (TensorRT engine build included):"] + [
        f"    {m}/{d} on {p}: {text}" for (m, d, p), text in seen.items()]


def _latencies(run: RunResult) -> list[str]:
    """ONNX/eager time ratios on the GPU providers as measured (a case reusing another's
    timing is not repeated; the CPU's are in results.json)."""
    out = []
    for c in run.cases:
        lat = c.performance.latency if c.performance else None
        if lat is None or lat.timed_on or c.key.provider not in GPU_PROVIDERS:
            continue
        interval = f"95% {figure(lat.low)}-{figure(lat.high)}"
        out.append(f"    {c.id}: {figure(lat.ratio)}x ({interval}, {lat.pairs} pairs"
                   f"{'' if lat.stable else ', unstable'}; ONNX {lat.onnx_ms:.3g} ms, "
                   f"eager {lat.eager_ms:.3g} ms; "
                   f"{'IOBinding' if lat.io_binding else 'session.run, copies timed'})")
    return ["  latency ONNX/eager on the GPU:", *out] if out else [
        "  latency ONNX/eager on the GPU: none measured"]


def _read(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else ""


def summary(out: Path, seconds: float | None = None) -> tuple[str, bool]:
    """The summary's text, and whether the runs used the GPU."""
    env: dict[str, Any] = json.loads(_read(out / "env.json") or "{}")
    codes = dict(line.split(maxsplit=1) for line in _read(out / "runs.txt").splitlines()
                 if " " in line)
    names = list(codes) or sorted(p.parent.name for p in out.glob("*/results.json"))
    runs = {n: RunResult.from_dict(json.loads((out / n / "results.json").read_text()),
                                   str(out / n / "results.json"))
            for n in names if (out / n / "results.json").is_file()}
    first = next(iter(runs.values()), None)
    versions = first.versions if first else {}
    gpu = versions.get("gpu") or {}
    lines = ["parity-gate GPU check" + (f", {seconds:.0f} s" if seconds is not None else "")
             + (f" (over the {BUDGET_S} s budget)" if seconds and seconds > BUDGET_S else "")]
    lines.append(f"GPU: {gpu.get('name') or env.get('device') or 'none seen'}"
                 + (f" (x{gpu['count']})" if gpu.get("count") else "")
                 + f", driver {gpu.get('driver', '?')}, driver CUDA "
                 f"{gpu.get('cuda') or env.get('driver_cuda', '?')}")
    lines.append("versions: " + ", ".join(
        f"{k} {versions[k]}" for k in ("torch", "onnxruntime", "onnxruntime-gpu", "onnx",
                                       "onnxscript", "numpy", "python") if k in versions)
        + (f"; torch built for CUDA {env['torch_cuda']}" if env.get("torch_cuda") else ""))
    lines.append(f"providers offered: {', '.join(versions.get('providers_available', []))}")
    lines.append(f"TensorRT provider: {_read(out / 'tensorrt.txt') or 'not probed'}")
    for name in names:
        if name not in runs:
            lines.append(f"== {name}: exit {codes.get(name, '?')}, no results.json "
                         f"(see {name}.log)")
            continue
        lines += run_lines(name, runs[name], codes.get(name, "?"))
    crashed = [n for n, rc in codes.items() if rc not in ("0", "1")]
    problems = gpu_use(runs) + [f"run {n} exited {codes[n]} (not a verdict: see {n}.log)"
                                for n in crashed]
    used = [c for r in runs.values() for c in r.cases if ran_on_gpu(c)]
    lines.append(f"GPU use: {len(used)} case(s) ran on a GPU provider"
                 + (f" ({', '.join(sorted({c.key.provider for c in used}))})" if used else ""))
    lines += [f"FAILED: {p}" for p in problems]
    return "\n".join(lines) + "\n", not problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the GPU check's results folder")
    parser.add_argument("--seconds", type=float, default=None, help="the check's wall time")
    args = parser.parse_args(argv)
    text, ok = summary(args.out, args.seconds)
    (args.out / "summary.txt").write_text(text)
    sys.stdout.write(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
