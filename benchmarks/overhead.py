"""parity-gate's overhead over a hand-written script doing the same exports and ORT runs.

Runs `parity-gate run parity_gate/example/parity.yml` and `benchmarks/plain_example.py`
alternately (A B A B ...) as child processes of this one, so both see the same
machine state, and prints the ratio of the medians. Target: <= 1.15.
`--shapes auto` runs the example with `shapes: auto` on (its probe cases included).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.15


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", choices=("declared", "auto"), default="declared",
                        help="the example's `shapes` (auto: with its probe cases)")
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="overhead-")
    manifest = ROOT / "parity_gate" / "example" / "parity.yml"
    if args.shapes == "auto":  # beside the original: its python_path and files are relative
        text = manifest.read_text().replace("\ndefaults:\n", "\ndefaults:\n  shapes: auto\n", 1)
        manifest = manifest.with_name(".overhead-auto.yml")
        manifest.write_text(text)
    gate = [sys.executable, "-m", "parity_gate", "run", str(manifest), "--quiet",
            "--no-cache", "--out", out, "--providers", "cpu"]  # every round exports
    plain = [sys.executable, str(ROOT / "benchmarks" / "plain_example.py")]
    timed(plain)  # warm the page cache for both (same libraries)
    gate_times, plain_times = [], []
    try:
        for _ in range(args.rounds):
            gate_times.append(timed(gate))
            plain_times.append(timed(plain))
    finally:
        if args.shapes == "auto":
            manifest.unlink()
    g, p = statistics.median(gate_times), statistics.median(plain_times)
    ratio = g / p
    print(f"{'':14}{'median':>9}  runs")
    print(f"{'parity-gate':14}{g:8.2f}s  " + " ".join(f"{t:.2f}" for t in gate_times))
    print(f"{'plain script':14}{p:8.2f}s  " + " ".join(f"{t:.2f}" for t in plain_times))
    print(f"ratio parity-gate / plain = {ratio:.3f} (target <= {TARGET}) "
          f"{'OK' if ratio <= TARGET else 'ABOVE TARGET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
