"""How much of torchlib the op sweep exercises, measured from its results.

    python benchmarks/ops_coverage.py parity-reports/ops/results.json [more.json ...]
    python benchmarks/ops_coverage.py shard-*/results.json --unreached

Reads one or more `parity-gate ops` results (the shards of one sweep, or the
catalogue's and OpInfo's runs side by side), collects the ATen overloads in
the exported graphs of the cases that exported (`ops/coverage.py`), and
prints how many of the ATen ops and overloads registered in the installed
exporter's torchlib registry they reach, with the unreached ones on
`--unreached`. Target: at least 90 % of registered ATen ops.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from parity_gate.gate.merge import read_results  # noqa: E402
from parity_gate.ops.coverage import coverage, registered  # noqa: E402

TARGET = 90.0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=Path)
    p.add_argument("--unreached", action="store_true", help="list the unreached ops")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    runs = [read_results(path)[1] for path in args.results]  # (path, run)
    cov = coverage(runs, registered())
    for line in cov.lines():
        print(line)
    print(f"target: {TARGET:.0f}% of registered ATen ops: "
          f"{'met' if cov.percent() >= TARGET else 'NOT met'}")
    if args.unreached:
        print(f"unreached ATen ops ({len(cov.unreached_ops)}):")
        for name in cov.unreached_ops:
            print(f"  {name}")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "registered_ops": len(cov.registered_ops), "reached_ops": len(cov.reached_ops),
            "percent": round(cov.percent(), 2),
            "registered_overloads": len(cov.registered),
            "reached_overloads": len(cov.reached_overloads),
            "unreached_ops": cov.unreached_ops,
            "unreached_overloads": cov.unreached_overloads}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
