"""Speed and memory of the gate on the model zoo (issue 18), measured side by side.

Every part runs its contenders alternately (A B A B ...) as child processes of
this one, so they see the same machine state, and prints the medians and one
line per ratio: `name: ratio X (target ≤ Y) PASS/MISS`.

- cache: a warm cache (a --cache-dir filled by one untimed run first) vs a cold
  one (a fresh empty --cache-dir each round). Target warm ≤ 0.30× cold. Every module
  is built, run eagerly and captured in both; the warm run reuses the ONNX
  translations. Each is broken down (build, eager, capture, translation, hazards, check,
  session, runs, compare: worker-seconds, summed over the parallel workers; start-up and
  reports: the wall time outside the run's own clock) so what bounds a warm run shows.
- jobs:  `--jobs 2` vs `--jobs 1`, both --no-cache. Target ≤ 0.6×.
- plain: the gate (--jobs 1, and the default jobs) vs benchmarks/plain_zoo.py,
  a hand-written script doing the same exports, ORT runs and allclose in a
  naive loop, all --no-cache. Target ≤ 1.0×.
- rss:   peak memory of the gate (parent + workers) on the largest zoo model, as
  a multiple of its parameter bytes (float32), reported; with the same figure
  for the smallest model, so the fixed cost (torch, onnxruntime) and what grows
  with the model are told apart.
- grow:  the same on a plain MLP at 64 and 256 MiB of weights (the zoo's models are
  tiny): the peak per extra parameter byte, reported.

Every gate run uses --no-localise (the follow-up checks of failing cases are
timed by localise_overhead.py) and HF_HUB_OFFLINE=1. The cache flags are the
export cache's; a gate without them gets "cache flags not available" for the
cache part and runs the others without --no-cache.

    python benchmarks/zoo_speed.py [--rounds 3] [--manifest examples/zoo/bench.yml]
                                   [--only cache|jobs|plain|rss]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from parity_gate.engine.sandbox import descendants

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "examples" / "zoo"
FULL_ZOO = ZOO / "parity.yml"  # where the largest and smallest models are looked up
TARGETS = {"cache": 0.30, "jobs": 0.6, "plain": 1.0}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def gate_cmd(manifest: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "parity_gate", "run", str(manifest), "--quiet", "--out",
            str(out), "--no-localise", "--providers", "cpu", *extra]


def has_cache_flags() -> bool:
    text = subprocess.run([sys.executable, "-m", "parity_gate", "run", "--help"], cwd=ROOT,
                          capture_output=True, text=True, env=ENV).stdout
    return "--cache-dir" in text and "--no-cache" in text


def timed(cmd: list[str], out: Path | None = None) -> float:
    """Wall time of one run; a run that did not finish its cases is an error, not a time."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=ENV)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1: blocking cases, still a full run
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    if out is not None:
        doc = json.loads((out / "results.json").read_text())
        if doc.get("interrupted") or not doc["cases"]:
            raise SystemExit(f"{' '.join(cmd)}: no complete run in {out}")
    return took


def alternate(contenders: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Run each contender once per round, in turn; print the runs; return the medians."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            times[name].append(run())
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    width = max(len(n) for n in contenders) + 2
    print(f"  {'':{width}}{'median':>9}  runs")
    for name, ts in times.items():
        print(f"  {name:{width}}{medians[name]:8.2f}s  " + " ".join(f"{t:.2f}" for t in ts))
    return medians


def verdict(name: str, ratio: float, target: float) -> None:
    print(f"{name}: ratio {ratio:.3f} (target ≤ {target}) {'PASS' if ratio <= target else 'MISS'}",
          flush=True)


def part_cache(manifest: Path, rounds: int, cache: bool, scratch: Path) -> None:
    print("cache: warm --cache-dir vs a fresh empty one each round", flush=True)
    if not cache:
        print("cache: cache flags not available (`parity-gate run --help` has no "
              "--cache-dir/--no-cache); skipped")
        return
    warm_dir = scratch / "warm-cache"
    outs = {"cold": scratch / "out-cold", "warm": scratch / "out-warm"}
    timed(gate_cmd(manifest, outs["warm"], "--cache-dir", str(warm_dir)), outs["warm"])
    walls: dict[str, list[float]] = {"cold": [], "warm": []}

    def cold() -> float:
        fresh = Path(tempfile.mkdtemp(prefix="cold-cache-", dir=scratch))
        try:
            took = timed(gate_cmd(manifest, outs["cold"], "--cache-dir", str(fresh)),
                         outs["cold"])
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
        walls["cold"].append(took)
        return took

    def warm() -> float:
        took = timed(gate_cmd(manifest, outs["warm"], "--cache-dir", str(warm_dir)),
                     outs["warm"])
        walls["warm"].append(took)
        return took

    medians = alternate({"cold": cold, "warm": warm}, rounds)
    verdict("cache warm / cold", medians["warm"] / medians["cold"], TARGETS["cache"])
    parts = {name: breakdown(outs[name] / "results.json", walls[name][-1]) for name in outs}
    print("  where the time goes (last round; stages in worker-seconds):")
    for stage in parts["cold"]:
        print(f"  {stage:<24}{parts['cold'][stage]:8.2f}s cold {parts['warm'][stage]:8.2f}s "
              "warm", flush=True)


def breakdown(results: Path, wall: float) -> dict[str, float]:
    """Seconds per stage of one run, each shared figure counted once (an export's per
    module and dtype, a session's per provider, an eager reference's per fixture set and
    batch), from the timings results.json records."""
    doc = json.loads(results.read_text())
    once: dict[tuple[str, ...], float] = {}
    out = dict.fromkeys(("build", "eager", "capture", "translation", "hazards and the rest "
                         "of the export", "check", "session", "runs", "compare"), 0.0)
    for case in doc["cases"]:
        t = case.get("timings") or {}
        module, dtype, fixture, batch, provider = case["id"].split("/")[:5]
        rest = t.get("export_s", 0.0) - t.get("capture_s", 0.0) - t.get("translate_s", 0.0)
        for stage, key, value in (
                ("build", (module,), t.get("build_s", 0.0)),
                ("capture", (module, dtype), t.get("capture_s", 0.0)),
                ("translation", (module, dtype), t.get("translate_s", 0.0)),
                ("hazards and the rest of the export", (module, dtype), rest),
                ("check", (module, dtype), t.get("check_s", 0.0)),
                ("session", (module, dtype, provider), t.get("session_s", 0.0)),
                ("eager", (module, dtype, fixture, batch), t.get("eager_s", 0.0))):
            once[(stage, *key)] = max(once.get((stage, *key), 0.0), value)
        out["runs"] += t.get("run_s", 0.0)
        out["compare"] += t.get("compare_s", 0.0)
    for (stage, *_), value in once.items():
        out[stage] += value
    out["the run (its own clock)"] = float(doc.get("duration_s") or 0.0)
    out["start-up and reports"] = wall - out["the run (its own clock)"]
    out["wall"] = wall
    return out


def part_jobs(manifest: Path, rounds: int, cache: bool, scratch: Path) -> None:
    print("jobs: --jobs 2 vs --jobs 1" + (", --no-cache" if cache else ""), flush=True)
    off = ("--no-cache",) if cache else ()
    out = scratch / "out"
    medians = alternate({f"--jobs {n}": (lambda n=n: timed(
        gate_cmd(manifest, out, "--jobs", str(n), *off), out)) for n in (1, 2)}, rounds)
    verdict("jobs 2 / jobs 1", medians["--jobs 2"] / medians["--jobs 1"], TARGETS["jobs"])


def part_plain(manifest: Path, rounds: int, cache: bool, scratch: Path) -> None:
    print("plain: the gate vs benchmarks/plain_zoo.py (same exports, ORT runs, allclose)"
          + (", --no-cache" if cache else ""), flush=True)
    off = ("--no-cache",) if cache else ()
    out = scratch / "out"
    plain = [sys.executable, str(ROOT / "benchmarks" / "plain_zoo.py"), "--manifest",
             str(manifest)]
    medians = alternate({
        "gate --jobs 1": lambda: timed(gate_cmd(manifest, out, "--jobs", "1", *off), out),
        "gate (default jobs)": lambda: timed(gate_cmd(manifest, out, *off), out),
        "plain script": lambda: timed(plain)}, rounds)
    for name in ("gate --jobs 1", "gate (default jobs)"):
        verdict(f"plain: {name} / plain script", medians[name] / medians["plain script"],
                TARGETS["plain"])


# Run in a child: the zoo's parameter bytes (float32) per module of parity.yml.
_PARAM_BYTES = """
import json, sys, yaml, torch
sys.path.insert(0, sys.argv[1])
import zoo_models
doc = yaml.safe_load(open(sys.argv[2]))
sizes = {}
for m in doc["modules"]:
    torch.manual_seed(0)
    model = zoo_models.build(**m.get("kwargs", {}))
    sizes[m["name"]] = sum(p.numel() for p in model.parameters()) * 4
print(json.dumps(sizes))
"""

# Run in a child that runs the gate: the largest single process's peak (ru_maxrss of
# every waited-for descendant, in KiB on Linux).
_MAXRSS = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code)
"""


def pss_bytes(pid: int) -> int:
    """Proportional set size (shared pages split between the processes sharing them), so
    the workers' common torch pages are not counted once per process."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_memory(cmd: list[str]) -> tuple[int, int]:
    """(peak PSS of the whole process tree, sampled every 50 ms; peak RSS of its largest
    single process, exact) in bytes."""
    proc = subprocess.Popen([sys.executable, "-c", _MAXRSS, *cmd], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, sum(pss_bytes(p) for p in descendants(proc.pid)))  # not the wrapper
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, _ = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}")
    return peak, int(stdout.split()[-1]) * 1024


def part_rss(rounds: int, cache: bool, scratch: Path) -> None:
    print("rss: peak memory of the gate (parent + workers, --jobs 1) per parameter byte",
          flush=True)
    sizes: dict[str, int] = json.loads(subprocess.run(
        [sys.executable, "-c", _PARAM_BYTES, str(ZOO), str(FULL_ZOO)], cwd=ROOT, env=ENV,
        capture_output=True, text=True, check=True).stdout)
    largest, smallest = max(sizes, key=sizes.__getitem__), min(sizes, key=sizes.__getitem__)
    off = ("--no-cache",) if cache else ()
    mib = 2.0**20
    peaks: dict[str, tuple[float, float]] = {}
    for name in (smallest, largest):
        runs = [peak_memory(gate_cmd(FULL_ZOO, scratch / "out", "--select", f"{name}/*",
                                     "--jobs", "1", *off)) for _ in range(rounds)]
        tree_peak = statistics.median(r[0] for r in runs)
        single = statistics.median(r[1] for r in runs)
        peaks[name] = (tree_peak, single)
        params = sizes[name]
        print(f"  {name}: {params / mib:.2f} MiB of parameters; peak PSS of the gate and "
              f"its workers {tree_peak / mib:.0f} MiB ({tree_peak / params:.0f}× the "
              f"parameter bytes); largest single process {single / mib:.0f} MiB")
    grown = peaks[largest][0] - peaks[smallest][0]
    more = sizes[largest] - sizes[smallest]
    print(f"rss: {largest} (largest zoo model): peak {peaks[largest][0] / sizes[largest]:.0f}× "
          f"its parameter bytes, of which {peaks[smallest][0] / mib:.0f} MiB is the fixed "
          f"cost of a run ({smallest}, the smallest); above it "
          f"{grown / mib:+.1f} MiB for {more / mib:+.2f} MiB more parameters "
          f"({grown / more:.1f}× the extra parameter bytes; reported, no target)", flush=True)


_GROW_MODEL = """
import torch


def build(layers):
    return torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(layers)]).eval()
"""

_GROW_MANIFEST = """
version: 1
python_path: [.]
defaults: {{batch_sizes: [2], dtypes: [float32], timeout_s: 1200}}
providers: {{cpu: {{required: true}}}}
fixtures:
  x: {{kind: random, inputs: {{input: {{shape: [batch, 2048]}}}}}}
modules:
  - name: mlp
    factory: grow:build
    kwargs: {{layers: {layers}}}
    inputs: [{{name: input, dynamic: {{0: batch}}}}]
    fixtures: [x]
"""


def part_grow(rounds: int, cache: bool, scratch: Path) -> None:
    """The zoo's models are tiny (the largest has 1.5 MiB of weights), so growth is
    measured on a plain MLP at 64 and 256 MiB of float32 weights: what a run holds per
    byte of weights once the fixed cost (torch, onnxruntime) is set aside."""
    print("grow: peak memory per parameter byte as a model grows (MLP, --jobs 1)", flush=True)
    folder = scratch / "grow"
    folder.mkdir(exist_ok=True)
    (folder / "grow.py").write_text(_GROW_MODEL)
    off = ("--no-cache",) if cache else ()
    mib = 2.0**20
    points = []
    for layers in (4, 16):
        manifest = folder / f"grow{layers}.yml"
        manifest.write_text(_GROW_MANIFEST.format(layers=layers))
        params = layers * (2048 * 2048 + 2048) * 4
        runs = [peak_memory(gate_cmd(manifest, scratch / "out", "--jobs", "1", *off))
                for _ in range(rounds)]
        outcomes = [c["outcome"] for c in json.loads(
            (scratch / "out" / "results.json").read_text())["cases"]]
        if outcomes != ["pass"]:  # a peak of a run that did not export proves nothing
            raise SystemExit(f"grow: the {layers}-layer MLP did not pass: {outcomes}")
        peak = statistics.median(r[0] for r in runs)
        points.append((params, peak))
        print(f"  {params / mib:.0f} MiB of parameters: peak PSS {peak / mib:.0f} MiB "
              f"({peak / params:.1f}× the parameter bytes)", flush=True)
    (p0, m0), (p1, m1) = points
    print(f"grow: +{(m1 - m0) / mib:.0f} MiB of peak for +{(p1 - p0) / mib:.0f} MiB of "
          f"parameters: {(m1 - m0) / (p1 - p0):.1f}× each extra parameter byte (the eager "
          "module, the exporter's model and its serialized bytes, one ONNX Runtime session; "
          "reported, no target)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--manifest", type=Path, default=ZOO / "bench.yml")
    parser.add_argument("--only", choices=("cache", "jobs", "plain", "rss", "grow"),
                        action="append",
                        help="run only this part (repeatable); default: all")
    args = parser.parse_args()
    parts = args.only or ["cache", "jobs", "plain", "rss", "grow"]
    cache = has_cache_flags()
    manifest = args.manifest.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="zoo-speed-"))
    print(f"zoo_speed: {manifest.relative_to(ROOT) if manifest.is_relative_to(ROOT) else manifest}"
          f", {args.rounds} round(s), {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    try:
        for part in parts:
            if part in ("rss", "grow"):
                {"rss": part_rss, "grow": part_grow}[part](args.rounds, cache, scratch)
            else:
                {"cache": part_cache, "jobs": part_jobs, "plain": part_plain}[part](
                    manifest, args.rounds, cache, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
