"""What the performance check costs: the bundled example with it (the default) and without.

Both arms run `parity-gate run` on `parity_gate/example/parity.yml` in a subprocess, alternating
which goes first each round, so load that comes and goes hits both; the "without" arm
is the same manifest with `defaults.performance.measure: false`. Every round exports
(`--no-cache`) and localises nothing (the example passes). The figure is the ratio of
the medians, and each round's own ratio beside it. Target: <= 1.2.

With `--stability N`, it also runs the slow-vs-control manifest of
tests/test_performance.py (F.unfold against two Linear layers, `max_slowdown: 1.5`)
N times and prints each run's ratios, intervals and the gate's flags: the decision
must not flap.

With `--warm`, the two arms are measured again from a warm export cache (translations
reused, every module built, captured and run: the shortest run that still times, where the
check weighs the most).

    python benchmarks/performance_overhead.py --rounds 3 --warm --stability 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "performance"


def manifests(folder: Path) -> tuple[Path, Path]:
    doc = yaml.safe_load((ROOT / "parity_gate" / "example" / "parity.yml").read_text())
    doc["python_path"] = [str(ROOT / "parity_gate" / "example")]
    for fixture in doc["fixtures"].values():
        if "path" in fixture:
            fixture["path"] = str(ROOT / "parity_gate" / "example" / fixture["path"])
    with_path, without_path = folder / "with.yml", folder / "without.yml"
    with_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    doc["defaults"]["performance"] = {"measure": False}
    without_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return with_path, without_path


def once(path: Path, out: Path, *extra: str, cache: Path | None = None) -> tuple[float, int]:
    cache_args = ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    cmd = [sys.executable, "-m", "parity_gate", "run", str(path), "--out", str(out), "--quiet",
           *cache_args, *extra]
    t0 = time.perf_counter()
    code = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - t0, code


def overhead(tmp: Path, rounds: int, warm: bool = False) -> None:
    """`warm`: both arms from a warm export cache (exports filled by one untimed run
    each), where the run is short and the check's cost weighs the most."""
    with_path, without_path = manifests(tmp)
    cache = tmp / "cache" if warm else None
    if warm:
        for path in (with_path, without_path):
            once(path, tmp / "fill", cache=cache)
    print("warm export cache" if warm else "every round exports (--no-cache)")
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        pair = {}
        for arm in ((False, True) if r % 2 == 0 else (True, False)):
            seconds, code = once(with_path if arm else without_path, tmp / f"r{r}{arm}",
                                 cache=cache)
            assert code == 0, f"the bundled example should pass, got exit {code}"
            times[arm].append(seconds)
            pair[arm] = seconds
        print(f"round {r + 1}: with {pair[True]:.1f}s, without {pair[False]:.1f}s, "
              f"ratio {pair[True] / pair[False]:.2f}", flush=True)
    with_s, without_s = statistics.median(times[True]), statistics.median(times[False])
    print(f"median with {with_s:.1f}s, without {without_s:.1f}s: ratio {with_s / without_s:.2f}")
    out = tmp / f"r{rounds - 1}True" / "results.json"
    doc = json.loads(out.read_text())
    print("bundled example, per case (ratio ONNX/eager [95%], pairs):")
    for case in doc["cases"]:
        lat = (case.get("performance") or {}).get("latency")
        if lat:
            print(f"  {case['id']}: {lat['ratio']:.2f} [{lat['low']:.2f}, {lat['high']:.2f}] "
                  f"n={lat['pairs']}{'' if lat['stable'] else ' (not stable)'}")


def stability(tmp: Path, runs: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_performance import SLOW_MANIFEST

    path = tmp / "slow.yml"
    path.write_text(SLOW_MANIFEST.format(models=DATA))
    decisions = []
    for r in range(runs):
        _, code = once(path, tmp / f"s{r}", "--no-localise")
        doc = json.loads((tmp / f"s{r}" / "results.json").read_text())
        flagged = sorted(f["id"].split("/")[0] for f in doc["gate"]["performance"])
        decisions.append(flagged)
        figures = ", ".join(
            f"{c['id'].split('/')[0]} {lat['ratio']:.2f} [{lat['low']:.2f}, {lat['high']:.2f}] "
            f"n={lat['pairs']}" for c in doc["cases"]
            if (lat := (c.get("performance") or {}).get("latency")))
        print(f"stability run {r + 1}: exit {code}, flagged {flagged}: {figures}", flush=True)
    print("decision " + ("held in every run" if all(d == decisions[0] for d in decisions)
                         else "FLAPPED") + f": {decisions[0]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stability", type=int, default=0)
    parser.add_argument("--warm", action="store_true",
                        help="also measure both arms with a warm export cache")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.rounds:
            overhead(Path(tmp), args.rounds)
            if args.warm:
                overhead(Path(tmp), args.rounds, warm=True)
        if args.stability:
            stability(Path(tmp), args.stability)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
