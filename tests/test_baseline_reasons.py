"""A known failure carries a real reason: a blank or placeholder one (`TODO: explain`) is
refused wherever a baseline is read, and `baseline update` never writes one: it takes
`--reason`, asks on a terminal, or refuses."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parity_gate import cli
from parity_gate.errors import UserError
from parity_gate.gate import baseline as bl
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult

DATA = Path(__file__).resolve().parent / "data" / "gate"
EXPECTED = "(expected why the case fails: what goes wrong and, if known, the upstream issue)"


@pytest.mark.parametrize("reason", ["TODO: explain", "todo", "FIXME: look at the softmax",
                                    "XXX", "tbd", "TBD - ask the exporter team", "explain",
                                    "Explain."])
def test_a_placeholder_reason_is_refused_at_its_line(reason: str) -> None:
    text = f"version: 1\nknown_failures:\n  - id: mlp/**\n    reason: {json.dumps(reason)}\n"
    with pytest.raises(UserError) as err:
        bl.parse(text, "b.yml")
    assert err.value.problems == [
        f"b.yml:4:13: known_failures[0].reason: {reason!r} is a placeholder, not a reason "
        f"{EXPECTED}"]


def test_blank_reasons_are_refused_and_real_ones_kept() -> None:
    with pytest.raises(UserError) as err:
        bl.parse("known_failures:\n  - {id: a, reason: ''}\n", "b.yml")
    assert err.value.problems == [
        "b.yml:2:21: known_failures[0].reason: got '' (expected a non-blank string)"]
    real = ["onnxscript#2101: roll exported with the wrong shift", "explain() is traced away",
            "fp16 softmax overflows (see the todo list in onnxscript)"]
    text = "known_failures:\n" + "".join(f"  - {{id: m{i}, reason: '{r}'}}\n"
                                         for i, r in enumerate(real))
    assert [e.reason for e in bl.parse(text, "b.yml").entries] == real


@pytest.mark.parametrize("command", ["check", "run", "merge"])
def test_check_run_and_merge_refuse_a_placeholder_before_any_work(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("parity.yml", "models.py"):
        shutil.copy(DATA / name, tmp_path / name)
    baseline = tmp_path / "parity-baseline.yml"
    baseline.write_text("known_failures:\n  - id: steady/**\n    reason: 'TODO: explain'\n")
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RunResult(cases=[failing("a")]).to_dict()))
    argv = {"check": ["check", str(tmp_path / "parity.yml")],
            "run": ["run", str(tmp_path / "parity.yml"), "--out", str(tmp_path / "o")],
            "merge": ["merge", str(results), "--baseline", str(baseline), "--out",
                      str(tmp_path / "o")]}[command]
    assert cli.main(argv) == 2  # the pure lane: a worker or an import process would fail it
    assert capsys.readouterr().err.splitlines() == [
        f"{baseline}:3:13: known_failures[0].reason: 'TODO: explain' is a placeholder, not a "
        f"reason {EXPECTED}"]
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------
# baseline update


def failing(module: str) -> CaseResult:
    return CaseResult(CaseKey(module, "float32", "vec", 2, "cpu"), Outcome.EXPORT_ERROR,
                      "aten::roll is not supported")


def results_of(tmp_path: Path, *modules: str) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RunResult(cases=[failing(m) for m in modules]).to_dict()))
    return path


def update(tmp_path: Path, *args: str, stdin: int | None = subprocess.DEVNULL
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parity_gate", "baseline", "update",
                           "--from", str(tmp_path / "results.json"), "--baseline",
                           str(tmp_path / "b.yml"), *args], stdin=stdin, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.process
def test_update_without_a_reason_off_a_terminal_writes_nothing(tmp_path: Path) -> None:
    results_of(tmp_path, "roll", "fft")
    done = update(tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "parity-gate baseline: 2 new failing case(s) need a reason (fft/float32/vec/b2/cpu, "
        f"roll/float32/vec/b2/cpu); nothing written to {tmp_path / 'b.yml'} (expected "
        "--reason TEXT: why they fail, or run it on a terminal to be asked)"]
    assert not (tmp_path / "b.yml").exists()


@pytest.mark.parametrize("known", [False, True])
def test_a_placeholder_reason_flag_is_refused(known: bool, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Refused whether or not the update adds an entry it would be written in."""
    results = results_of(tmp_path, "roll")
    before = "known_failures:\n  - {id: roll/**, reason: aten::roll}\n"
    if known:
        (tmp_path / "b.yml").write_text(before)
    assert cli.main(["baseline", "update", "--from", str(results), "--baseline",
                     str(tmp_path / "b.yml"), "--reason", "TODO: explain"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"--reason: 'TODO: explain' is a placeholder, not a reason {EXPECTED}"]
    assert (tmp_path / "b.yml").read_text() == before if known else not (
        tmp_path / "b.yml").exists()


def test_the_reason_flag_is_written_and_reads_back(tmp_path: Path) -> None:
    results = results_of(tmp_path, "roll")
    assert cli.main(["baseline", "update", "--from", str(results), "--baseline",
                     str(tmp_path / "b.yml"), "--reason", " onnxscript#2101: roll "]) == 0
    assert [(e.id, e.reason) for e in bl.load(tmp_path / "b.yml").entries] == [
        ("roll/float32/vec/b2/cpu", "onnxscript#2101: roll")]


def test_an_update_that_adds_nothing_needs_no_reason(tmp_path: Path) -> None:
    results = results_of(tmp_path, "roll")
    (tmp_path / "b.yml").write_text("known_failures:\n  - {id: roll/**, reason: aten::roll}\n")
    assert cli.main(["baseline", "update", "--from", str(results), "--baseline",
                     str(tmp_path / "b.yml")]) == 0
    entries = bl.load(tmp_path / "b.yml").entries
    assert [(e.id, e.reason, e.outcome) for e in entries] == [
        ("roll/**", "aten::roll", Outcome.EXPORT_ERROR)]


@pytest.mark.process
def test_update_on_a_terminal_asks_until_the_reason_is_real(tmp_path: Path) -> None:
    results_of(tmp_path, "roll")
    main_fd, terminal = pty.openpty()
    try:
        os.write(main_fd, b"TODO\naten::roll exported with the wrong shift\n")
        done = update(tmp_path, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(main_fd)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "parity-gate baseline: 1 new failing case(s): roll/float32/vec/b2/cpu" in err
    assert f"parity-gate baseline: 'TODO' is a placeholder, not a reason {EXPECTED}" in err
    assert err.count("why do they fail?") == 2
    assert [e.reason for e in bl.load(tmp_path / "b.yml").entries] == [
        "aten::roll exported with the wrong shift"]


@pytest.mark.process
def test_update_on_a_terminal_that_gives_no_reason_writes_nothing(tmp_path: Path) -> None:
    results_of(tmp_path, "roll")
    main_fd, terminal = pty.openpty()
    try:
        os.write(main_fd, b"\x04")  # end of input, as Ctrl-D at the prompt
        done = update(tmp_path, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(main_fd)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        f"parity-gate baseline: no reason given; nothing written to {tmp_path / 'b.yml'} "
        "(expected a reason, or --reason TEXT)")
    assert not (tmp_path / "b.yml").exists()
