"""What localisation costs: the bundled example plus several planted defects, with and without.

The example manifest gets tests/data/localise's planted modules (a block's own
code, a defect two levels down, the root's own code, a module called twice, a
NaN-only divergence), so several modules mismatch and each gets the full checks
(the blame rule, the owner, both repros, each repro run). Target: ratio <= 1.5.
Both arms run `parity-gate run` in a subprocess, alternating, so
load that comes and goes hits both; the figure is the ratio of medians. Peak
RSS is the largest process of each run (the worker that localised, for the
"with" arm), read from the kernel's accounting of the waited-for children.

    python benchmarks/localise_overhead.py --rounds 3
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
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ("ten_blocks", "two_deep", "root_code", "called_twice", "nan_sign")


def manifest(folder: Path) -> Path:
    doc = yaml.safe_load((ROOT / "parity_gate" / "example" / "parity.yml").read_text())
    # the planted models under their own name: the example's `models` would shadow them
    shutil.copy(ROOT / "tests" / "data" / "localise" / "models.py", folder / "planted.py")
    doc["python_path"] = [str(ROOT / "parity_gate" / "example"), str(folder)]
    doc["providers"] = {"cpu": {"required": True}}
    for module in doc["modules"]:  # data files stay where the example keeps them
        for name in module.get("fixtures", []):
            fixture = doc["fixtures"][name]
            if "path" in fixture:
                fixture["path"] = str(ROOT / "parity_gate" / "example" / fixture["path"])
    doc["fixtures"]["vec16"] = {"kind": "random", "samples": 1,
                                "inputs": {"x": {"shape": ["batch", 16]}}}
    for name in PLANTED:
        doc["modules"].append({"name": name, "factory": f"planted:{name}",
                               "fixtures": ["vec16"], "dtypes": ["float32"],
                               "inputs": [{"name": "x", "dynamic": {0: "batch"}}]})
    path = folder / "parity.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def once(path: Path, out: Path, localise: bool) -> tuple[float, float, int]:
    cmd = [sys.executable, "-m", "parity_gate", "run", str(path), "--out", str(out), "--quiet",
           "--no-cache"]  # every round exports
    if not localise:
        cmd.append("--no-localise")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    return seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def culprits(results: Path) -> dict[str, str]:
    """Per module, the culprit localisation named (so the "with" arm is known to have done
    the work it is timed for): scope, ATen overload, source line, owner."""
    out: dict[str, str] = {}
    for case in json.loads(results.read_text())["cases"]:
        found = (case.get("localisation") or {}).get("culprit")
        if found:
            out[case["key"]["module"]] = (f"{found['scope']}: {found['aten']} at "
                                          f"{found.get('source', '?')}, owner "
                                          f"{found.get('owner') or 'unknown'}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = manifest(Path(tmp))
        times: dict[bool, list[float]] = {True: [], False: []}
        rss: dict[bool, float] = {True: 0.0, False: 0.0}
        for r in range(args.rounds):
            for arm in ((False, True) if r % 2 == 0 else (True, False)):
                seconds, peak, code = once(path, Path(tmp) / f"r{r}{arm}", arm)
                assert code == 1, f"expected the planted defects to fail the run, got {code}"
                if arm:
                    named = culprits(Path(tmp) / f"r{r}{arm}" / "results.json")
                    missing = [m for m in PLANTED if m not in named]
                    assert not missing, f"localisation named no culprit in {missing}"
                    if r == 0:
                        for module, what in sorted(named.items()):
                            print(f"  {module}: {what}")
                times[arm].append(seconds)
                rss[arm] = max(rss[arm], peak)
                print(f"round {r + 1} {'with' if arm else 'without'} localisation: "
                      f"{seconds:.1f}s, peak RSS {peak:.0f} MiB", flush=True)
    with_s, without_s = statistics.median(times[True]), statistics.median(times[False])
    print(f"median with {with_s:.1f}s, without {without_s:.1f}s: ratio {with_s / without_s:.2f}")
    print(f"peak RSS with {rss[True]:.0f} MiB, without {rss[False]:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
