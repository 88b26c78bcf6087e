"""`parity-gate bisect` for real: onnxscript releases from the index, installed into probe
environments, the selected cases run in each, the first bad release named.

The model (tests/data/bisect): self-attention over padded sequences, whose mask has a
fully masked row for each padded query. onnxscript 0.6.0 exports it as eager computes
it; from 0.6.1 the exported model gives other values there. The op sweep's
`sdpa.bool_mask_fully_masked_row` case is the same defect at op level. The bad run is
made here in a probe environment holding BAD, so the test does not depend on the
onnxscript the test environment has.

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

OP_CASE = "op/sdpa.bool_mask_fully_masked_row/float32/normal/cpu"
MODEL_CASE = "padded_attention/float32/padded/b2/cpu"
MANIFEST = Path(__file__).parent / "data" / "bisect" / "parity.yml"
# 0.6.1 broke it (found by `parity-gate bisect` between 0.6.0 and 0.7.2): with 0.6.2 as the
# bad end there is one release between, which the bisection must probe and find bad.
GOOD, FIRST_BAD, BAD = "0.6.0", "0.6.1", "0.6.2"
ROOT = Path(__file__).resolve().parent.parent

# Slow: each bisect now probes the bad set twice and the boundary a second time (2 to 4
# minutes a test); tests/test_bisect_wheels.py and test_bisect_checks.py keep the default
# suite's share.
pytestmark = [pytest.mark.process, pytest.mark.slow]


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


def _bad_run(tmp_path: Path, cache: Path, case: str, manifest: Path | None,
             version: str = BAD) -> Path:
    """The selected case run with onnxscript `version`: the bad run's results.json."""
    why = _index_reachable()
    if why:
        pytest.skip(why)
    python, problem = OverlayInstaller(cache).prepare({"onnxscript": version})
    assert python is not None, problem
    runner = CaseRunner(out=tmp_path, cases=[case], manifest=manifest,
                        ops_args=["--source", "catalogue"], timeout=600)
    cases, problem = runner.run(python, "bad-run")
    assert cases is not None, problem
    assert cases[case].outcome.value == "mismatch", cases[case].reason  # the bad run fails
    return tmp_path / "bad-run" / "results.json"


def _bisect(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "parity_gate", "bisect", *args],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.returncode, done.stderr


def test_bisect_names_the_onnxscript_release_that_broke_a_model(tmp_path: Path,
                                                                 cache: Path) -> None:
    bad_results = _bad_run(tmp_path, cache, MODEL_CASE, MANIFEST)
    out = tmp_path / "bisect"
    code, err = _bisect(str(MANIFEST), "--good", f"onnxscript=={GOOD}", "--bad",
                        f"onnxscript=={BAD}", "--from", str(bad_results),
                        "--cache-dir", str(cache), "--out", str(out))
    assert code == 0, err[-2000:]
    last = err.strip().splitlines()[-2]
    assert f"first bad: onnxscript {FIRST_BAD} ({GOOD} good)" in last
    [answer] = json.loads((out / "bisect.json").read_text())
    [rec] = answer["packages"]
    assert (rec["package"], rec["last_good"], rec["first_bad"]) == \
        ("onnxscript", GOOD, FIRST_BAD), last
    assert rec["probes"] <= rec["bound"] == 3  # N = 2 candidates: ⌈log2 2⌉ + 2
    assert rec["confirmed"]
    # the answer joined the bad run's results.json and its summary (the PR comment's text)
    [written] = json.loads(bad_results.read_text())["bisect"]
    assert written["culprit"] == "onnxscript"
    assert [(p["phase"], p["version"], p["verdict"]) for p in written["probes"]] == \
        [("repeat", "", "bad"), ("repeat", "", "bad"), ("confirm", "", "good"),
         ("isolate", BAD, "bad"), ("bisect", FIRST_BAD, "bad"), ("recheck", GOOD, "good"),
         ("recheck", FIRST_BAD, "bad")]
    # each probe ran the version it was meant to (the overlay's copy shadows the base one)
    folders = sorted((out / "probes" / "01").iterdir())
    assert len(folders) == len(answer["probes"])
    for probe, record in zip(folders, answer["probes"], strict=True):
        ran = json.loads((probe / "results.json").read_text())["versions"]["onnxscript"]
        assert ran == record["pins"]["onnxscript"], probe.name
    summary = (bad_results.parent / "summary.md").read_text()
    assert f"**first bad: onnxscript {FIRST_BAD} ({GOOD} good)**" in summary


def test_bisect_an_op_sweep_case_between_two_adjacent_releases(tmp_path: Path,
                                                               cache: Path) -> None:
    bad_results = _bad_run(tmp_path, cache, OP_CASE, None)
    code, err = _bisect("--good", f"onnxscript=={GOOD}", "--bad", f"onnxscript=={FIRST_BAD}",
                        "--from", str(bad_results), "--select", OP_CASE, "--cache-dir",
                        str(cache), "--out", str(tmp_path / "bisect"), "--no-write")
    assert code == 0, err[-2000:]
    [answer] = json.loads((tmp_path / "bisect" / "bisect.json").read_text())
    assert answer["packages"][0]["first_bad"] == FIRST_BAD
    # N = 1: two repeats of the bad set, the good set, the bad release alone, the boundary
    # (the good and the bad release) a second time
    assert len(answer["probes"]) == 6 and answer["packages"][0]["confirmed"]
    assert json.loads(bad_results.read_text())["bisect"] == []  # --no-write


def test_the_action_bisects_a_pull_request_that_bumps_a_requirements_file(
        tmp_path: Path, cache: Path) -> None:
    """`bisect: on-regression`: the good set is requirements.txt at the PR's base commit,
    the bad set the checked-out one; the answer lands in the run's results.json."""
    from parity_gate.github import bisect_step

    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("parity.yml", "attention.py"):
        (ws / name).write_text((MANIFEST.parent / name).read_text())

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (ws / "requirements.txt").write_text(f"onnxscript=={GOOD}\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    base = git("rev-parse", "HEAD")
    (ws / "requirements.txt").write_text(f"onnxscript=={FIRST_BAD}\n")
    git("commit", "-qam", "bump onnxscript")
    results = _bad_run(tmp_path, cache, MODEL_CASE, ws / "parity.yml", version=FIRST_BAD)
    # the gate's run blocked on a regression
    doc = json.loads(results.read_text())
    doc["gate"]["blocking"] = [MODEL_CASE]
    results.write_text(json.dumps(doc))
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"base": {"sha": base}}}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GITHUB_EVENT_PATH": str(event),
           "HOME": str(Path.home())}
    inputs = {"manifest": "parity.yml", "bisect": "on-regression", "bisect_budget": "8,20m",
              "upstream": "off"}
    said = bisect_step.run(inputs, ws, results, tmp_path / "out", env,
                           cache_dir=cache)
    assert said.startswith("bisect finished (exit 0)"), said
    [answer] = json.loads(results.read_text())["bisect"]
    assert answer["culprit"] == "onnxscript"
    assert answer["packages"][0]["first_bad"] == FIRST_BAD
    assert answer["good"]["onnxscript"] == GOOD  # read from the base commit
    # no lock file in the change: it says why it did not run
    (ws / "attention.py").write_text((ws / "attention.py").read_text() + "\n")
    git("commit", "-qam", "touch code")
    event.write_text(json.dumps({"pull_request": {"base": {"sha": git("rev-parse",
                                                                      "HEAD~1")}}}))
    assert bisect_step.run(inputs, ws, results, tmp_path / "out", env) == \
        "bisect skipped: the pull request changes no requirements or lock file"
    event.write_text(json.dumps({"pull_request": {"base": {"sha": "0" * 40}}}))
    said = bisect_step.run(inputs, ws, results, tmp_path / "out", env)
    assert said.startswith("bisect skipped: cannot tell which files the pull request "
                           "changes: git diff 000000000000...HEAD failed") and \
        "fetch-depth: 0" in said
