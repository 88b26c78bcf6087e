"""Every planned case ends with an outcome: exits in model code, stray writes into the
worker's descriptors, slow worker start-up and an early Ctrl-C, on real gate processes.

The modules (tests/data/hardening_engine/models.py) call sys.exit, raise
KeyboardInterrupt, os._exit(0), and write garbage or a crafted pickle into every
descriptor they hold; the healthy modules beside them must keep their results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from parity_gate.engine.pool import WorkerPool
from parity_gate.engine.signals import Interrupted, Signals
from parity_gate.gate.decision import decide, notices
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "hardening_engine"
CORRUPTED = "the worker's result channel was corrupted (a stray write from model code?)"


def gate(manifest: Path, out: Path, *args: str, env: dict[str, str] | None = None,
         timeout: float = 300) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "parity_gate", "run", str(manifest), "--out", str(out), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    return proc.returncode, proc.stderr


def load(out: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    doc = json.loads((out / "results.json").read_text())
    return doc, {c["id"]: c for c in doc["cases"]}


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path, Path]:
    """One gate run of every misbehaving module between two healthy ones (localisation on:
    one module exits only in a follow-up check)."""
    tmp = tmp_path_factory.mktemp("faults")
    pwned = tmp / "pwned"
    code, err = gate(DATA / "parity.yml", tmp / "out", "--jobs", "2",  # localisation on
                     env={"HARDENING_PWNED": str(pwned)})
    return code, err, tmp / "out", pwned


@pytest.mark.process
@pytest.mark.parametrize(("module", "reason"), [
    ("exit_factory", "model code called sys.exit(0) while building module exit_factory"),
    ("exit_forward", "model code called sys.exit(3) while eager float32/vec/b2"),
    ("interrupt_forward", "model code raised KeyboardInterrupt while eager float32/vec/b2"),
    ("exit_export", "model code called sys.exit() while exporting float32"),
    ("os_exit0", "worker exited with code 0 while eager float32/vec/b2"),
    ("exit_in_recheck", "model code called sys.exit(5) while re-running float32 float64 "
                        "reference"),
])
def test_an_exit_in_model_code_is_an_error_outcome_of_each_of_its_cases(
        faults: tuple[int, str, Path, Path], module: str, reason: str) -> None:
    code, err, out, _ = faults
    assert code == 1, err
    doc, cases = load(out)
    case = cases[f"{module}/float32/vec/b2/cpu"]
    assert case["outcome"] == "crash", case
    assert case["reason"] == reason
    assert doc["verdict"]["finished"] == doc["verdict"]["planned"] == 12
    assert doc["verdict"]["result"] == "fail"


@pytest.mark.process
def test_an_exit_in_a_follow_up_check_costs_that_check_not_the_verdict(
        faults: tuple[int, str, Path, Path]) -> None:
    _, _, out, _ = faults
    _, cases = load(out)
    case = cases["exit_in_localise/float32/vec/b2/cpu"]
    assert case["outcome"] == "mismatch"  # the verdict stands
    steps = case["localisation"]["steps"]
    assert steps and {s["status"] for s in steps} == {"failed"}
    assert steps[0]["note"].startswith("model code called sys.exit(6) while "), steps[0]


@pytest.mark.process
def test_stray_writes_cost_only_their_module_and_nothing_is_unpickled(
        faults: tuple[int, str, Path, Path]) -> None:
    code, err, out, pwned = faults
    assert code == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    assert not pwned.exists()  # the crafted pickle was never unpickled by the gate
    _, cases = load(out)
    for module in ("stray_garbage", "stray_pickle"):
        case = cases[f"{module}/float32/vec/b2/cpu"]
        assert case["outcome"] == "crash"
        assert case["reason"].startswith(f"{CORRUPTED} while eager float32/vec/b2"), case
    # The channel is not inherited: a child writing into every descriptor it got is harmless.
    for module in ("healthy", "stray_child", "healthy_last"):
        assert cases[f"{module}/float32/vec/b2/cpu"]["outcome"] == "pass", module


@pytest.mark.process
def test_a_modules_time_limit_starts_when_its_worker_is_ready(tmp_path: Path) -> None:
    """Workers that take 9 s to start (a loaded machine) and modules allowed 6 s each."""
    code, err = gate(DATA / "slow_start.yml", tmp_path / "out", "--jobs", "2", "--no-localise",
                     env={
                         "PYTHONPATH": str(DATA / "slow_start"),
                         "HARDENING_SLOW_START_S": "9"})
    assert code == 0, err
    _, cases = load(tmp_path / "out")
    assert {c: v["outcome"] for c, v in cases.items()} == {
        "quick_a/float32/vec/b2/cpu": "pass", "quick_b/float32/vec/b2/cpu": "pass"}


@pytest.mark.process
def test_a_worker_that_never_becomes_ready_is_reported_as_such(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(DATA / "slow_start"))
    monkeypatch.setenv("HARDENING_SLOW_START_S", "60")
    monkeypatch.syspath_prepend(str(DATA))
    from hardening_engine_jobs import SilentJob

    keys = [CaseKey("late", "float32", "vec", 2, "cpu")]
    t0 = time.monotonic()
    with WorkerPool(1, start_timeout_s=3) as pool:
        results = [e for e in pool.run([SilentJob("late", keys, timeout_s=600)])
                   if isinstance(e, CaseResult)]
    assert time.monotonic() - t0 < 30  # the start-up bound, not the module's 600 s
    assert [r.outcome for r in results] == [Outcome.TIMEOUT]
    assert results[0].reason.startswith("worker did not become ready within 3s")
    assert "the module's timeout of 600s starts when it is" in results[0].reason
    assert results[0].lost is not None and results[0].lost.never_started


@pytest.mark.process
def test_a_job_that_ends_without_reporting_its_cases_loses_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(DATA))
    from hardening_engine_jobs import SilentJob

    keys = [CaseKey("silent", "float32", "vec", b, "cpu") for b in (2, 3)]
    with WorkerPool(1) as pool:
        results = [e for e in pool.run([SilentJob("silent", keys)])
                   if isinstance(e, CaseResult)]
    assert sorted(r.key.id for r in results) == sorted(k.id for k in keys)
    for r in results:
        assert r.outcome is Outcome.CRASH
        assert r.reason == "the worker ended its job without reporting this case while " \
                           "running silent"


def _run(planned: int, reported: int, *, interrupted: bool = False) -> RunResult:
    cases = [CaseResult(CaseKey("m", "float32", "vec", b, "cpu"), Outcome.PASS)
             for b in range(reported)]
    return RunResult(cases=cases, planned=planned, interrupted=interrupted)


@pytest.mark.parametrize("fail_on", ["any-failure", "regressions", "never"])
def test_fewer_outcomes_than_planned_cases_never_pass(fail_on: str) -> None:
    """The gate's invariant: whichever path drops a case, the run blocks."""
    run = _run(planned=4, reported=2)
    decision = decide(run, fail_on)
    run.gate = decision
    assert decision.unreported == 2
    assert not decision.passed and decision.exit_code == 1
    assert run.verdict.blocks and run.verdict.result == "fail"
    assert "2 of 4 planned cases have no outcome" in run.verdict.why
    assert any("2 planned case(s) have no outcome although the run was not interrupted"
               in line for line in notices(decision))
    # Duplicated outcomes do not make up for a missing one.
    run.cases.append(run.cases[0])
    assert decide(run, fail_on).unreported == 2
    # Every case there: passes; interrupted: the verdict says interrupted, not "unreported".
    assert decide(_run(planned=4, reported=4), fail_on).passed
    stopped = decide(_run(planned=4, reported=2, interrupted=True), fail_on)
    assert stopped.unreported == 0 and not stopped.all_skipped


def test_a_signal_during_set_up_waits_for_arm() -> None:
    signals = Signals(armed=False)
    signals(signal.SIGINT, None)  # noted, not raised: nothing to report yet
    with pytest.raises(Interrupted):
        signals.arm()
    assert signals.stopped == signal.SIGINT


@pytest.mark.process
def test_ctrl_c_while_workers_start_gives_the_interrupted_report(tmp_path: Path) -> None:
    """SIGINT to the whole process group (as a terminal's Ctrl-C) while workers import."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "parity_gate", "run", str(DATA / "parity.yml"), "--out",
         str(out), "--no-localise", "--jobs", "2", "--select", "healthy*/*"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    seen = ""
    while "starting workers" not in seen:
        line = proc.stderr.readline()
        assert line, seen
        seen += line
    time.sleep(0.3)  # the workers are importing
    os.killpg(proc.pid, signal.SIGINT)
    err = seen + proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGINT, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "every case was skipped" not in err, err
    assert "SIGINT received" in err
    doc, cases = load(out)
    assert doc["verdict"]["result"] == "interrupted" and doc["verdict"]["blocks"]
    assert doc["verdict"]["planned"] == 2 and doc["verdict"]["finished"] == len(cases)
    assert doc["gate"]["all_skipped"] is False
