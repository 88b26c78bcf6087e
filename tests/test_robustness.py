"""A gate that never loses a result: real gate processes, real signals, real /proc checks.

Each test runs `parity-gate run` as a child process on tests/data/robust/, kills or
signals it for real (no mocked os.kill) and then looks at what is on disk and at
which of the run's processes are still alive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parity_gate.cli import main
from parity_gate.engine.sandbox import descendants

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "data" / "robust" / "parity.yml"
FIRST = "first/float32/vec/b3/cpu"


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def wait_gone(pids: set[int], within: float = 15.0) -> set[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def worker_folders(gate: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"parity-gate-workers-{gate}-*"))


class Gate:
    """`parity-gate run` in a child process, its stderr followed line by line."""

    def __init__(self, out: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "parity_gate", "run", str(MANIFEST), "--out", str(out),
             "--no-localise", "--jobs", "1", *args],  # the tests read a serial order
            stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.seen = ""

    def wait_for(self, text: str, within: float = 120.0) -> None:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.seen += line
            if text in line:
                return
        raise AssertionError(f"never saw {text!r}:\n{self.seen}")

    def finish(self) -> tuple[int, str]:
        assert self.proc.stderr is not None
        rest = self.proc.stderr.read()
        return self.proc.wait(timeout=60), self.seen + rest


@pytest.fixture
def gate_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "out"


def load(out: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    doc = json.loads((out / "results.json").read_text())
    return doc, {c["id"]: c for c in doc["cases"]}


def test_sigkill_of_the_gate_kills_its_workers_and_the_journal_has_every_finished_case(
        gate_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    child_file = tmp_path / "child.pid"  # `slow` starts a child in a session of its own
    gate = Gate(gate_dir, "--select", "first/*", "--select", "slow/*", "--select", "last/*",
                env={"ROBUST_SLOW_S": "60", "ROBUST_CHILD_PID_FILE": str(child_file)})
    gate.wait_for(FIRST)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not child_file.exists():
        time.sleep(0.1)
    child = int(child_file.read_text())
    time.sleep(1.5)  # inside the slow module now: the worker is busy
    family = set(descendants(gate.proc.pid))
    assert child in family and alive(child)
    assert len(family) >= 2, family  # the worker and its sentinel (plus the resource tracker)
    assert worker_folders(gate.proc.pid)
    gate.proc.kill()
    code, _ = gate.finish()
    assert code == -signal.SIGKILL
    assert wait_gone(family) == set()  # no process of the run outlives it, the setsid one too
    assert not alive(child)
    assert worker_folders(gate.proc.pid) == []  # the sentinel removed the workers' folder
    assert not (gate_dir / "results.json").exists()  # the gate died before any report

    journal = gate_dir / "journal.jsonl"
    finished = [json.loads(line)["case"]["id"] for line in journal.read_text().splitlines()
                if line.startswith('{"case"')]
    assert FIRST in finished and "first/float32/vec/b2/cpu" in finished
    capsys.readouterr()
    assert main(["report", "--from-journal", str(journal)]) == 1  # interrupted: never a pass
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("parity-gate: INTERRUPTED"), err
    doc, cases = load(gate_dir)
    assert doc["interrupted"] is True
    assert doc["verdict"]["result"] == "interrupted" and doc["verdict"]["blocks"] is True
    assert doc["verdict"]["finished"] == len(finished) == len(cases)
    assert doc["verdict"]["planned"] == 12
    assert f"{len(finished)} of 12 planned" in doc["verdict"]["why"]
    assert cases[FIRST]["outcome"] == "pass"
    assert not any(c.startswith(("slow/", "last/")) and v["outcome"] != "skipped"
                   for c, v in cases.items())
    assert "interrupted" in (gate_dir / "summary.md").read_text().splitlines()[0]



def test_signals_during_shutdown_are_ignored_until_the_reports_are_written(
        gate_dir: Path) -> None:
    gate = Gate(gate_dir, "--select", "first/*", "--select", "slow/*", "--select", "last/*",
                env={"ROBUST_SLOW_S": "60"})
    gate.wait_for(FIRST)
    time.sleep(0.5)
    family = set(descendants(gate.proc.pid))
    gate.proc.send_signal(signal.SIGTERM)
    for _ in range(10):  # a second, third... signal while it closes workers and writes
        time.sleep(0.05)
        gate.proc.send_signal(signal.SIGINT)
        gate.proc.send_signal(signal.SIGTERM)
    code, err = gate.finish()
    assert code == 128 + signal.SIGTERM, err  # the first signal's code, not 3
    assert "Traceback" not in err and "internal error" not in err
    doc, cases = load(gate_dir)
    assert doc["verdict"]["result"] == "interrupted"
    assert doc["verdict"]["planned"] == 12 and doc["verdict"]["finished"] == len(cases)
    assert cases[FIRST]["outcome"] == "pass"
    for name in ("junit.xml", "summary.md", "report.html"):
        assert (gate_dir / name).stat().st_size > 0
    assert json.loads((gate_dir / "journal.jsonl").read_text().splitlines()[-1]) == {
        "end": {"interrupted": True, "duration_s": doc["duration_s"]}}
    assert wait_gone(family) == set()
    assert worker_folders(gate.proc.pid) == []


def test_timeout_kills_the_modules_own_children_and_crash_records_keep_to_their_module(
        gate_dir: Path, tmp_path: Path) -> None:
    child_file = tmp_path / "child.pid"
    secret = "ghp_robustnessTestToken0123456789"
    gate = Gate(gate_dir, "--select", "spawner/*", "--select", "chatty/*",
                "--select", "crasher/*", env={
                    "ROBUST_CHILD_PID_FILE": str(child_file),
                    "ROBUST_LEAK_VALUE": "chatty-private-output-4711",
                    "ROBUST_TEST_TOKEN": secret, "ROBUST_SECRET_COPY": secret})
    gate.wait_for("spawner")
    family: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not child_file.exists():
        family |= set(descendants(gate.proc.pid))
        time.sleep(0.2)
    child = int(child_file.read_text())
    assert alive(child)
    code, err = gate.finish()
    assert code == 1, err
    assert not alive(child)  # killed with its worker at the timeout, not left running
    assert wait_gone(family) == set()
    _, cases = load(gate_dir)
    assert cases["spawner/float32/vec/b2/cpu"]["outcome"] == "timeout"
    assert cases["chatty/float32/vec/b2/cpu"]["outcome"] == "pass"
    crash = cases["crasher/float32/vec/b2/cpu"]
    assert crash["outcome"] == "crash"
    # chatty ran on the same worker just before; its output stays out of this record...
    assert "chatty-private-output-4711" not in crash["detail"]
    assert "crasher holds ***" in crash["detail"]  # ...and the token is masked
    for path in gate_dir.iterdir():
        assert secret not in path.read_text(errors="replace"), path
    assert secret not in err


def test_all_skipped_blocks_unless_allowed(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", str(MANIFEST), "--providers", "cuda", "--quiet", "--no-localise"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err
    assert "every case was skipped, so nothing was checked: blocking" in err
    doc = json.loads((tmp_path / "a" / "results.json").read_text())
    assert doc["verdict"]["result"] == "fail" and doc["verdict"]["blocks"] is True
    assert doc["gate"]["all_skipped"] is True and doc["gate"]["allow_all_skipped"] is False
    assert main([*args, "--out", str(tmp_path / "b"), "--allow-all-skipped"]) == 0
    doc = json.loads((tmp_path / "b" / "results.json").read_text())
    assert doc["verdict"]["result"] == "pass"
    assert "allowed by --allow-all-skipped" in doc["verdict"]["why"]
