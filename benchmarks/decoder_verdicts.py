"""The verdict table of issue 38: the decoders beyond the zoo (examples/zoo/decoders-more.yml:
sliding windows a generation crosses, sliding + global layers, multi-query attention, eight
more architectures), the state-space model `check` refuses (state-cache.yml), and the
planted cache defects beside their control (tests/data/decoders/defects.yml).

    HF_HUB_OFFLINE=1 python benchmarks/decoder_verdicts.py [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = [ROOT / "examples" / "zoo" / "decoders-more.yml",
        ROOT / "tests" / "data" / "decoders" / "defects.yml"]


def _cache_kind(case: dict) -> str:
    shapes = {c["name"]: c.get("shape_ref") for c in case.get("comparisons") or []}
    keys = [v for k, v in sorted(shapes.items()) if k.endswith(".key") and v]
    return ", ".join(dict.fromkeys(keys)) or "—"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", default="2")
    args = parser.parse_args()
    rows = ["| module | verdict | cached cases | generation | why |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for manifest in RUNS:
            out = Path(tmp) / manifest.stem
            subprocess.run([sys.executable, "-m", "parity_gate", "run", str(manifest), "--out",
                            str(out), "--quiet", "--no-cache", "--jobs", args.jobs,
                            "--artifacts", str(out / "artifacts")], check=False)
            cases = json.loads((out / "results.json").read_text())["cases"]
            for module in dict.fromkeys(c["key"]["module"] for c in cases):
                mine = [c for c in cases if c["key"]["module"] == module]
                gen = next((c for c in mine if "@generate=" in c["key"]["inputs"]), None)
                steps = [c for c in mine if c is not gen]
                passed = sum(c["outcome"] == "pass" for c in steps)
                loc = (gen or {}).get("localisation") or {}
                culprit = loc.get("culprit") or {}
                why = (gen or steps[0])["reason"][:160] + (
                    f"; culprit {culprit.get('source')} ({culprit.get('owner')})"
                    if culprit else "")
                verdict = "pass" if all(c["outcome"] == "pass" for c in mine) else "fail"
                rows.append(f"| {module} | {verdict} | {passed}/{len(steps)} pass | "
                            f"{gen['outcome'] if gen else '—'} | {why} |")
    check = subprocess.run([sys.executable, "-m", "parity_gate", "check",
                            str(ROOT / "examples" / "zoo" / "state-cache.yml")],
                           capture_output=True, text=True, check=False)
    line = next((ln for ln in check.stderr.splitlines() if "modules[0].cache" in ln), "")
    rows.append(f"| mamba | refused by check (exit {check.returncode}) | — | — | "
                f"{line.split(': ', 1)[-1][:160]} |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
