"""The export example and what the export honours: a bad fixture set costs only its own
cases, and an opset the exporter ignored is a blocking hazard that names both numbers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from parity_gate.manifest.load import load_manifest
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import RunResult
from parity_gate.report.write import ReportPaths
from parity_gate.runner import RunOptions, run_manifest

pytestmark = pytest.mark.process  # real exports in real workers

NET = '''
import torch


class Pool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        if x.shape[1] == 4:  # the same maths on another branch: export specialises seq to 4
            return self.fc(x).sum(1) / 4
        return self.fc(x).mean(1)


def build():
    return Pool().eval()
'''


def gate(tmp: Path, manifest: str) -> RunResult:
    (tmp / "net.py").write_text(NET)
    path = tmp / "parity.yml"
    path.write_text(textwrap.dedent(manifest))
    run, _, _ = run_manifest(load_manifest(path), path, RunOptions(
        jobs=1, quiet=True, localise=None,
        reports=ReportPaths.in_folder(tmp / "out", None, None, None, None)))
    return run


def test_a_poisoned_first_fixture_set_costs_only_its_own_cases(tmp_path: Path) -> None:
    """`broken` has the wrong feature width (eager refuses it); with `four` as the example
    the branch makes torch.export fix the dynamic `seq` to 4; `single`'s one-long `seq`
    would be specialised too, so it is the last choice; `six` is good. Before, the example
    came from the first set and every other set's cases failed."""
    run = gate(tmp_path, """
        version: 1
        python_path: [.]
        defaults: {batch_sizes: [1, 3], dtypes: [float32]}
        providers: {cpu: {required: true}}
        fixtures:
          broken: {kind: random, inputs: {x: {shape: [batch, 4, 5]}}}
          single: {kind: random, inputs: {x: {shape: [batch, 1, 6]}}}
          four: {kind: random, inputs: {x: {shape: [batch, 4, 6]}}}
          six: {kind: random, inputs: {x: {shape: [batch, 6, 6]}}}
        modules:
          - name: pool
            factory: net:build
            inputs: [{name: x, dynamic: {0: batch, 1: seq}}]
            fixtures: [broken, single, four, six]
        """)
    by_set: dict[str, set[Outcome]] = {}
    for case in run.cases:
        by_set.setdefault(case.key.inputs, set()).add(case.outcome)
    assert by_set["broken"] == {Outcome.EAGER_ERROR}
    assert by_set["four"] == by_set["six"] == by_set["single"] == {Outcome.PASS}
    notes = [f.message for f in run.findings if f.kind == "fixtures"]
    assert len(notes) == 1 and "'four' fixed dynamic dims" in notes[0] \
        and "x[1]=4" in notes[0] and "set 'six'" in notes[0], notes
    assert not [f for f in run.findings if f.kind == "dynamic-dim-specialised"]  # kept: none


def test_an_opset_the_exporter_ignored_blocks_and_names_both(tmp_path: Path) -> None:
    run = gate(tmp_path, """
        version: 1
        python_path: [.]
        defaults:
          batch_sizes: [2]
          dtypes: [float32]
          export: {exporter: dynamo, opset: 7}
        providers: {cpu: {required: true}}
        fixtures:
          long: {kind: random, inputs: {x: {shape: [batch, 4, 6]}}}
        modules:
          - name: pool
            factory: net:build
            inputs: [{name: x, dynamic: {0: batch}}]
            fixtures: [long]
        """)
    (hazard,) = [f.hazard for f in run.findings if f.hazard is not None
                 and f.hazard.rule == "opset-not-honoured"]
    assert "opset 7" in hazard.message and "opset 18" in hazard.message
    assert hazard.blocks and run.verdict.blocks and run.gate is not None
    assert "opset-not-honoured" in " ".join(map(str, run.gate.hazards))
    assert all(c.provenance and c.provenance.opset == 18 for c in run.cases)
