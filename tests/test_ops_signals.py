"""`parity-gate ops` keeps its reports through SIGTERM: real sweeps, real signals, /proc.

The same rule as `parity-gate run` (engine.signals, tested there in
test_robustness.py): the first SIGINT/SIGTERM stops the sweep, later ones wait
until the reports are on disk, the sweep is marked interrupted (planned vs
finished, never a pass) and the exit status is 128 + the first signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_robustness import descendants, wait_gone, worker_folders

from parity_gate.ops.gating import BUNDLED

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent
# 4 elementwise ops x 4 input classes, one export each: seconds of sweep after the
# first case, so the signal lands mid-sweep.
SMALL = ["--select", "sin", "--select", "cos", "--select", "tanh", "--select", "exp",
         "--dtype", "float32", "--batch-size", "1", "--jobs", "1"]
PLANNED = 16


def ops(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "parity_gate", "ops", *args],
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def read_until(proc: subprocess.Popen[str], text: str, within: float = 180.0) -> str:
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"never saw {text!r}:\n{seen}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    assert proc.stderr is not None
    rest = proc.stderr.read()
    return proc.wait(timeout=120), rest


def test_sigterm_twice_mid_sweep_keeps_the_reports_marked_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "ops"
    proc = ops(*SMALL, "--no-baseline", "--out", str(out))
    seen = read_until(proc, "parity-gate ops: [1/")  # the first finished case
    family = descendants(proc.pid)
    assert family, "the sweep's workers should be running"
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # while the workers close and the reports are written
    code, rest = finish(proc)
    err = seen + rest
    assert code == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "internal error" not in err
    assert "SIGTERM received" in err
    assert rest.strip().splitlines()[-1].startswith("parity-gate ops: INTERRUPTED"), rest

    doc = json.loads((out / "results.json").read_text())
    finished = len(doc["cases"])
    assert doc["interrupted"] is True
    assert doc["verdict"]["result"] == "interrupted" and doc["verdict"]["blocks"] is True
    assert doc["verdict"]["planned"] == PLANNED
    assert 1 <= doc["verdict"]["finished"] == finished < PLANNED
    assert f"{finished} of {PLANNED} planned" in doc["verdict"]["why"]
    assert "interrupted" in (out / "findings.md").read_text().splitlines()[0]
    suites = ET.parse(out / "junit.xml").getroot()
    assert int(suites.get("tests", "-1")) == finished + 1  # + the "interrupted" error case
    (stop,) = [tc for tc in suites.iter("testcase") if tc.get("name") == "interrupted"]
    error = stop.find("error")
    assert error is not None and f"{finished} of {PLANNED} planned" in error.get("message", "")

    assert wait_gone(family) == set()  # no worker (nor sentinel) of the sweep outlives it
    assert worker_folders(proc.pid) == []


def test_update_baseline_after_an_interrupted_sweep_keeps_every_known_finding(
        tmp_path: Path) -> None:
    baseline = tmp_path / "known-findings.yml"
    baseline.write_bytes(BUNDLED.read_bytes())
    proc = ops("--update-baseline", "--baseline", str(baseline), "--jobs", "1",
               "--quiet", "--out", str(tmp_path / "ops"))
    deadline = time.monotonic() + 120
    while not descendants(proc.pid) and time.monotonic() < deadline:  # the sweep has begun
        time.sleep(0.1)
    family = descendants(proc.pid)
    if proc.poll() is not None:
        pytest.fail(f"the sweep ended before the signal (exit {proc.returncode}): "
                    f"{finish(proc)[1]}")
    assert family, "the sweep started no worker within 120 s"
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc)
    assert code == 128 + signal.SIGTERM, err
    assert "the baseline was not updated" in err
    assert baseline.read_bytes() == BUNDLED.read_bytes()  # no entry dropped as stale
    doc = json.loads((tmp_path / "ops" / "results.json").read_text())
    assert doc["verdict"]["result"] == "interrupted"
    assert wait_gone(family) == set()
