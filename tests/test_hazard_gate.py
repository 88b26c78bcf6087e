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


ORDER_MODELS = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(48, 4)

    def forward(self, x, w):
        return self.fc(x.reshape(len(x), -1)) + w.sum()  # len(x): the batch, baked


def build():
    return Net().eval()
'''

ORDER_MANIFEST = '''
version: 1
python_path: [.]
defaults:
  batch_sizes: [2]
  dtypes: [float32]
  export: {exporter: torchscript}
fixtures:
  vec:
    kind: random
    samples: 1
    inputs:
      w: {shape: [5]}
      x: {shape: [batch, 3, 4, 4]}
modules:
  - name: net
    factory: models:build
    fixtures: [vec]
    inputs:  # not forward()'s order (x, w): the rules must still pair each spec with its tensor
      - {name: w}
      - {name: x, dynamic: {0: batch}}
'''


@pytest.mark.process
def test_hazard_rules_read_each_input_by_name_not_by_manifest_order(tmp_path: Path) -> None:
    """The export's tensors follow forward()'s order; paired with the manifest's order
    instead, `batch` would read w's size (5), and the literal batch (the export's 2) baked
    into the Reshape would go unseen."""
    (tmp_path / "models.py").write_text(ORDER_MODELS)
    (tmp_path / "parity.yml").write_text(ORDER_MANIFEST)
    main(["run", str(tmp_path / "parity.yml"), "--out", str(tmp_path / "out"), "--quiet"])
    run = read_results(tmp_path / "out" / "results.json")[1]
    rules = {f.hazard.rule: f.message for f in run.findings if f.hazard is not None}
    assert "baked-dim" in rules, rules
