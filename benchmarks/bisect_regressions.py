"""Real regressions between released versions, each bisected by `parity-gate bisect` and
checked against the release that is known to have introduced it (issue 40).

Every regression is a case that fails with the versions this environment holds (the bad
end) and passed with an older release. The bad run is made here, in a probe environment
holding the bad set, then `parity-gate bisect` searches a lock-file bump that moved both
onnxscript and onnxruntime (GOOD -> BAD below): it must clear the package that did not
cause it, name the one that did, at the right release, within ⌈log2 N⌉ + 2 probes for
that package's N candidate releases.

Needs the package index (PyPI); probe environments are cached under --cache-dir (an
onnxruntime probe installs a ~15 MB wheel once, an onnxscript probe a pure-Python one).
One row per regression; exit 1 when any is missed.

    python benchmarks/bisect_regressions.py [--only NAME] [--cache-dir DIR] [--out DIR]

Measured (2 shared cores, onnxruntime wheels already in pip's cache): 5/5 named right,
4-7 probes each (bound 5 or 7), 44-112 s each, about 7 minutes in all with the bad run.
Not a regression here: onnxruntime 1.25.0 also changed GridSample on NaN/inf grid
coordinates (0 where eager gives NaN); a behaviour change on non-finite input whose right
answer is arguable, so it is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from parity_gate.bisect.probe import CaseRunner, OverlayInstaller  # noqa: E402

# The lock-file bump searched for every regression: both packages move.
GOOD = {"onnxscript": "0.6.0", "onnxruntime": "1.22.0"}
BAD = {"onnxscript": "0.7.2", "onnxruntime": "1.32.0"}
CACHE = Path.home() / ".cache" / "parity-gate" / "bisect-regressions"


@dataclass(frozen=True)
class Regression:
    """A case that broke at `first_bad` of `package` (the expected answer) and why."""

    name: str
    case: str
    package: str
    last_good: str
    first_bad: str
    what: str
    source: str = "catalogue"   # the op sweep's --source that holds the case


REGRESSIONS = [
    Regression("take_along_dim-empty", "op/take_along_dim/float32/empty/cpu", "onnxruntime",
               "1.24.4", "1.25.0", "an empty index tensor: the model no longer loads "
               "(element_wise_ops.cc broadcast check)"),
    Regression("any-empty", "op/any/float32/empty/cpu", "onnxruntime", "1.26.0", "1.27.0",
               "any() over an empty tensor returns True (must be False)"),
    Regression("sum-int64-specials", "op/sum/int64/specials/cpu", "onnxruntime", "1.26.0",
               "1.27.0", "int64 ReduceSum of extreme values: wrong sum (exact in eager)"),
    Regression("sdpa-fully-masked-row", "op/sdpa.bool_mask_fully_masked_row/float32/normal/cpu",
               "onnxscript", "0.6.0", "0.6.1", "scaled_dot_product_attention with a bool mask "
               "masking a whole row: other values in the other rows"),
    Regression("conv_transpose3d-output_padding",
               "op/oi.nn.functional.conv_transpose3d.2/float32/normal/cpu", "onnxruntime",
               "1.27.0", "1.28.0", "ConvTranspose rejects a valid model: output_padding 3 "
               ">= stride 2 but < dilation 4 (PyTorch: smaller than stride or dilation); "
               "eager and older releases compute it", source="opinfo"),
]


def _pins(pins: dict[str, str]) -> str:
    return ",".join(f"{p}=={v}" for p, v in sorted(pins.items()))


def bad_run(cache: Path, out: Path, cases: list[str]) -> tuple[Path, dict[str, str]]:
    """Run the cases once with the bad set: the results.json bisect reads, and each case's
    outcome there (every one must fail, or its row is a MISS before bisect runs)."""
    python, why = OverlayInstaller(cache).prepare(BAD)
    if python is None:
        raise SystemExit(f"cannot prepare the bad set: {why}")
    runner = CaseRunner(out=out, cases=cases, ops_args=["--source", "catalogue,opinfo"],
                        timeout=900)
    results, why = runner.run(python, "bad-run")
    if results is None:
        raise SystemExit(f"the bad run failed: {why}")
    return out / "bad-run" / "results.json", {c: results[c].outcome.value if c in results
                                              else "not run" for c in cases}


def upstream_reachable(api: str = "https://api.github.com") -> str:
    """"" when GitHub's API answers, else why not (the upstream column says so)."""
    try:
        requests.get(api, timeout=10)
    except requests.RequestException as exc:
        return f"not reachable ({type(exc).__name__})"
    return ""


def bisect_one(reg: Regression, results: Path, cache: Path, out: Path,
               upstream: bool) -> tuple[dict, float, str]:
    """One `parity-gate bisect` over the bump, for this regression's case: its answer,
    its wall time, and the command's last line."""
    cmd = [sys.executable, "-m", "parity_gate", "bisect", "--good", _pins(GOOD), "--bad",
           _pins(BAD), "--from", str(results), "--select", reg.case, "--cache-dir", str(cache),
           "--out", str(out), "--source", reg.source, "--no-write",
           *(["--upstream"] if upstream else [])]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.monotonic() - start
    (out / "stderr.log").write_text(done.stderr)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    answer = json.loads((out / "bisect.json").read_text()) if (out / "bisect.json").is_file() \
        else []
    return (answer[0] if answer else {}), wall, (lines[-2] if len(lines) > 1 else
                                                 lines[-1] if lines else f"exit {done.returncode}")


def row(reg: Regression, answer: dict, wall: float, upstream_why: str) -> tuple[str, bool]:
    """The table row and whether bisect named the expected package and release in bound."""
    recs = {r["package"]: r for r in answer.get("packages", [])}
    rec = recs.get(answer.get("culprit") or "", {})
    others = [p for p, r in recs.items() if p != answer.get("culprit")]
    ok = (answer.get("culprit") == reg.package and rec.get("last_good") == reg.last_good
          and rec.get("first_bad") == reg.first_bad
          and 0 < rec.get("probes", 0) <= rec.get("bound", 0)
          and all(recs[p].get("involved") is False for p in others))
    if upstream_why:
        prs = upstream_why
    else:
        prs = ", ".join(f"#{u['number']}" for u in rec.get("upstream", [])) or \
            rec.get("upstream_note", "") or "none"
    cells = [reg.name, reg.case, answer.get("culprit") or "none", rec.get("last_good") or "-",
             rec.get("first_bad") or "-", f"{reg.package} {reg.first_bad}",
             str(rec.get("probes", "-")), str(rec.get("bound", "-")),
             str(len(answer.get("probes", []))), f"{wall:.0f} s",
             ", ".join(f"{p} not involved" for p in others if recs[p].get("involved") is False)
             or "-", prs, "PASS" if ok else "MISS"]
    return "| " + " | ".join(cells) + " |", ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", default=[], help="a regression's name")
    parser.add_argument("--cache-dir", type=Path, default=CACHE)
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here")
    args = parser.parse_args()
    chosen = [r for r in REGRESSIONS if not args.only or r.name in args.only]
    out = args.out or Path(tempfile.mkdtemp(prefix="bisect-regressions-"))
    results, outcomes = bad_run(args.cache_dir, out, [r.case for r in chosen])
    upstream_why = upstream_reachable()
    print(f"bump searched: {_pins(GOOD)} -> {_pins(BAD)}; runs in {out}; probe environments "
          f"in {args.cache_dir}", flush=True)
    print("| regression | case | culprit named | last good | first bad | expected | probes "
          "(culprit) | bound | probes (all) | wall | cleared | upstream PRs | result |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    misses = 0
    for reg in chosen:
        if outcomes[reg.case] == "pass":
            print(f"| {reg.name} | {reg.case} | passes in the bad set: not a regression here "
                  "| | | | | | | | | | MISS |", flush=True)
            misses += 1
            continue
        answer, wall, _last = bisect_one(reg, results, args.cache_dir, out / reg.name,
                                         upstream=not upstream_why)
        line, ok = row(reg, answer, wall, upstream_why)
        misses += not ok
        print(line, flush=True)
    print(f"{len(chosen) - misses}/{len(chosen)} named right", flush=True)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
