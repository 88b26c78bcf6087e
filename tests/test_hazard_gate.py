"""A manifest promotes an export hazard to failing, or silences it with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity_gate.cli import main
from parity_gate.gate.merge import read_results

DATA = Path(__file__).resolve().parent / "data" / "hazard_gate"


def manifest(tmp: Path, hazards: str) -> Path:
    text = (DATA / "parity.yml").read_text().replace(
        "  dtypes: [float32]\n", f"  dtypes: [float32]\n  hazards: {hazards}\n")
    path = tmp / "parity.yml"
    path.write_text(text)
    (tmp / "models.py").write_text((DATA / "models.py").read_text())
    return path


@pytest.mark.process
def test_a_promoted_hazard_blocks_and_a_silenced_one_is_gone(tmp_path: Path) -> None:
    failing = tmp_path / "fail"
    failing.mkdir()
    assert main(["run", str(manifest(failing, "{training-mode: fail}")), "--out",
                 str(failing / "out"), "--quiet"]) == 1
    run = read_results(failing / "out" / "results.json")[1]
    assert [c.outcome.value for c in run.cases] == ["pass"]  # the numbers match...
    assert run.gate is not None and run.gate.hazards == ["net: training-mode"]
    assert run.verdict.blocks and "training-mode" in run.verdict.why  # ...the hazard blocks
    (finding,) = [f for f in run.findings if f.hazard is not None]
    assert finding.hazard.rule == "training-mode" and "drop" in finding.message
    quiet = tmp_path / "off"
    quiet.mkdir()
    off = '{training-mode: {action: off, reason: "dropout is a no-op here"}}'
    assert main(["run", str(manifest(quiet, off)), "--out", str(quiet / "out"),
                 "--quiet"]) == 0
    run = read_results(quiet / "out" / "results.json")[1]
    assert not [f for f in run.findings if f.hazard is not None and
                f.hazard.rule == "training-mode"]
