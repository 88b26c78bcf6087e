"""Token values never reach the console either: progress lines are masked like the reports.

A CI log is as readable as the artifacts, and a case's reason quotes a module's
own exception message, which may hold a credential it was handed.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.ops.command import _Progress
from parity_gate.report.progress import Progress
from parity_gate.report.secrets import MASK, MaskedStream, Masker

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "ghp_fakeProgressToken0123456789abcdef"


def failing_case(reason: str, outcome: Outcome = Outcome.EAGER_ERROR) -> CaseResult:
    return CaseResult(CaseKey("leaky", "float32", "vec", 2, "cpu"), outcome, reason)


def test_progress_masks_case_reasons_and_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    out = io.StringIO()
    progress = Progress(1, stream=out)
    progress.case(failing_case(f"factory failed: RuntimeError('credentials {TOKEN}')"))
    progress.message(f"finding [leaky] manifest: token {TOKEN} in an input name")
    text = out.getvalue()
    assert TOKEN not in text
    assert f"credentials {MASK}" in text and f"token {MASK} in" in text


def test_op_sweep_progress_masks_crash_reasons(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    _Progress(1, quiet=False).tick(failing_case(f"worker died holding {TOKEN}", Outcome.CRASH))
    err = capsys.readouterr().err
    assert TOKEN not in err and f"holding {MASK}" in err


def test_masked_stream_writes_through_unchanged_without_secrets() -> None:
    out = io.StringIO()
    print("plain line 0123456789", file=MaskedStream(out, Masker([])))
    assert out.getvalue() == "plain line 0123456789\n"


@pytest.mark.process
def test_a_token_a_factory_raises_with_reaches_no_output_of_the_gate(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(textwrap.dedent("""
        import os

        from torch import nn


        def leaky() -> nn.Module:
            token = os.environ["LEAK_VALUE"]  # handed over under a name the gate cannot know
            print(f"factory sees {token}", flush=True)
            raise RuntimeError(f"cannot build: credentials {token} rejected")
        """))
    (tmp_path / "parity.yml").write_text(textwrap.dedent("""
        version: 1
        defaults: {batch_sizes: [2]}
        fixtures:
          vec: {kind: random, inputs: {x: {shape: [batch, 8]}}}
        modules:
          - {name: leaky, factory: "models:leaky", inputs: [{name: x}], fixtures: [vec]}
        """))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "parity_gate", "run", str(tmp_path / "parity.yml"), "--out",
         str(out), "--no-localise", "--jobs", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "GITHUB_TOKEN": TOKEN, "LEAK_VALUE": TOKEN})
    assert proc.returncode == 1, proc.stderr
    assert f"credentials {MASK} rejected" in proc.stderr  # the reason is shown, masked
    assert TOKEN not in proc.stderr and TOKEN not in proc.stdout
    cases = {c["id"]: c for c in json.loads((out / "results.json").read_text())["cases"]}
    assert cases["leaky/float32/vec/b2/cpu"]["outcome"] == "eager_error"
    for name in ("results.json", "junit.xml", "summary.md"):
        text = (out / name).read_text()
        assert TOKEN not in text, name
        assert f"credentials {MASK} rejected" in text, name
    for path in out.iterdir():  # the journal and the HTML report too
        assert TOKEN not in path.read_text(errors="replace"), path
