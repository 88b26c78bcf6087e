"""Declared sizes alone vs `shapes: auto` on the zoo (issue 41); slow (two gate runs of
25 modules), so it lives here and not in the test suite.

    python benchmarks/shapes_zoo/compare.py [--out DIR] [--jobs N]

Prints, per module, the failing cases each run found, one repro (a probe's id and why)
for each defect only `auto` finds, the hazards probes raised, and the probes' share of
the run's time."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent


def run(manifest: Path, out: Path, jobs: int) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "parity_gate", "run", str(manifest), "--out",
                    str(out), "--no-cache", "--no-localise", "--jobs", str(jobs)],
                   capture_output=True, text=True, check=False)
    return json.loads((out / "results.json").read_text()), time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="zoo-")))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-probes", type=int, default=8)
    args = parser.parse_args()
    two = yaml.safe_load((HERE / "parity.yml").read_text())
    one = yaml.safe_load((HERE / "parity.yml").read_text())
    for fixture in one["fixtures"].values():  # a manifest listing only the export size
        fixture["dims"] = {k: v[0] for k, v in fixture["dims"].items()}
    auto = yaml.safe_load(yaml.safe_dump(one))
    auto["defaults"].update(shapes="auto", max_probes=args.max_probes)
    docs = {"one": one, "two": two, "auto": auto}
    results: dict[str, tuple[dict[str, Any], float]] = {}
    for name, doc in docs.items():
        path = HERE / f".{name}.yml"  # beside models.py: python_path is relative
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        try:
            results[name] = run(path, args.out / name, args.jobs)
        finally:
            path.unlink()
    declared, declared_s = results["one"]
    two_doc, _ = results["two"]
    auto_doc, auto_s = results["auto"]
    report(declared, two_doc, auto_doc, declared_s, auto_s)
    return 0


def failing(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for case in doc["cases"]:
        if case["outcome"] not in ("pass", "skipped"):
            out.setdefault(case["key"]["module"], []).append(case)
    return out


def report(declared: dict[str, Any], two: dict[str, Any], auto: dict[str, Any],
           declared_s: float, auto_s: float) -> None:
    """Failing cases per module: the export size alone (`one`), export size and twice it
    (`two`), and the export size with `shapes: auto` (`auto`); a repro per module where
    only the probes find the defect."""
    before, twice, after = failing(declared), failing(two), failing(auto)
    modules = [c["key"]["module"] for c in declared["cases"]]
    print(f"{'module':16} {'one':>4} {'two':>4} {'auto':>4}  repro (a failing probe)")
    found_declared = found_two = found_auto = 0
    for module in dict.fromkeys(modules):
        d, t, a = before.get(module, []), twice.get(module, []), after.get(module, [])
        found_declared += bool(d)
        found_two += bool(t)
        found_auto += bool(a)
        probes = [c for c in a if c.get("probe")]
        repro = (f"{probes[0]['id']} {probes[0]['outcome']}: {probes[0]['probe'][:100]}"
                 if probes else "")
        print(f"{module:16} {len(d):4} {len(t):4} {len(a):4}  {repro}")
    hazards = [f for f in auto["findings"] if "probe " in f.get("message", "")]
    probes = [c for c in auto["cases"] if c.get("probe")]
    probe_s = sum(sum(v for k, v in c.get("timings", {}).items() if k == "probe_s")
                  for c in probes)
    print(f"\nmodules with a failing case: export size only {found_declared}, export size "
          f"and twice it {found_two}, export size + shapes: auto {found_auto} "
          f"(of {len(set(modules))})")
    print(f"probe cases: {len(probes)} ({sum(c['outcome'] == 'pass' for c in probes)} pass, "
          f"{sum(c['outcome'] == 'skipped' for c in probes)} skipped, "
          f"{sum(c['outcome'] not in ('pass', 'skipped') for c in probes)} failing); "
          f"hazards from probes: {len(hazards)}")
    for f in hazards:
        print(f"  hazard {f['message'][:200]}")
    print(f"wall: declared {declared_s:.1f}s, auto {auto_s:.1f}s; probes' own time "
          f"{probe_s:.1f}s ({100 * probe_s / max(auto['duration_s'], 1e-9):.0f}% of the auto "
          "run)")


if __name__ == "__main__":
    sys.exit(main())
