"""`parity-gate bisect` for real: onnxscript releases from the index, installed into probe
environments, the op case run in each, the first bad release named.

The case: `torch.nn.functional.scaled_dot_product_attention` with a boolean mask that
masks a whole row. GOOD computes what eager does; the releases after it return other
values (the fully masked row). The bad run is made here in a probe environment holding BAD (whatever
onnxscript the test environment has), so the test does not depend on it.

Needs the package index (PyPI); skipped with the reason when it cannot be reached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from parity_gate.bisect.probe import CaseRunner, OverlayInstaller

CASE = "op/sdpa.bool_mask_fully_masked_row/float32/normal/cpu"
# 0.6.1 broke it (found by `parity-gate bisect` between 0.6.0 and 0.7.2): with 0.6.2 as the
# bad end there is one release between, which the bisection must probe and find bad.
GOOD, FIRST_BAD, BAD = "0.6.0", "0.6.1", "0.6.2"
ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.process


def _index_reachable() -> str:
    try:
        requests.get("https://pypi.org/pypi/onnxscript/json", timeout=10).raise_for_status()
    except requests.RequestException as exc:
        return f"the package index is unreachable ({type(exc).__name__}): bisect needs it"
    return ""


@pytest.fixture(scope="module")
def cache() -> Path:
    """Probe environments kept between test runs (a per-user cache; wheels in pip's)."""
    folder = Path(os.environ.get("PARITY_GATE_TEST_BISECT_CACHE",
                                 Path.home() / ".cache" / "parity-gate" / "bisect-tests"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_bisect_names_the_first_bad_onnxscript_release(tmp_path: Path, cache: Path) -> None:
    why = _index_reachable()
    if why:
        pytest.skip(why)
    python, problem = OverlayInstaller(cache).prepare({"onnxscript": BAD})
    assert python is not None, problem
    runner = CaseRunner(out=tmp_path, cases=[CASE], ops_args=["--source", "catalogue"],
                        timeout=600)
    cases, problem = runner.run(python, "bad-run")
    assert cases is not None, problem
    assert cases[CASE].outcome.value == "mismatch", cases[CASE].reason  # the bad run fails
    bad_results = tmp_path / "bad-run" / "results.json"
    out = tmp_path / "bisect"
    done = subprocess.run(
        [sys.executable, "-m", "parity_gate", "bisect", "--good", f"onnxscript=={GOOD}",
         "--bad", f"onnxscript=={BAD}", "--from", str(bad_results), "--select", CASE,
         "--cache-dir", str(cache), "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads((out / "bisect.json").read_text())
    [rec] = answer["packages"]
    assert (rec["package"], rec["last_good"], rec["first_bad"]) == \
        ("onnxscript", GOOD, FIRST_BAD), last
    assert rec["probes"] <= rec["bound"] == 3  # N = 2 candidates: ⌈log2 2⌉ + 2
    assert f"first bad: onnxscript {FIRST_BAD} ({GOOD} good)" in last
    # the answer joined the bad run's results.json (the summary and the comment read it)
    written = json.loads(bad_results.read_text())
    assert written["bisect"]["culprit"] == "onnxscript"
    probes = [(p["version"], p["verdict"]) for p in written["bisect"]["probes"]]
    assert probes == [("", "good"), (BAD, "bad"), (FIRST_BAD, "bad")]
