"""`parity-gate bisect` end to end without the network: a package index made in the test
(small wheels, PyPI's JSON API on 127.0.0.1), real probe environments (venv + pip), real
runs of the gate. The model's exported graph adds an offset when the installed `pgfake`
release says so (from 1.2.0): the first bad release is found, its boundary confirmed, and
a model whose eager output is random is reported flaky without a probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bisect_wheels import json_index, wheel

from parity_gate.bisect.probe import CaseRunner, OverlayInstaller

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]
FIRST_BAD = "1.2.0"
CASE = "offset/float32/x/b2/cpu"
NOISY = "noisy/float32/x/b2/cpu"

MODEL = '''
import torch
import pgfake


class Offset(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        if torch.onnx.is_in_onnx_export() and pgfake.BROKEN:
            y = y + 1  # what a broken release of an exporter dependency would do
        return y


class Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)


def offset():
    return Offset().eval()


def noisy():
    return Noisy().eval()
'''

MANIFEST = '''version: 1
seed: 0
python_path: [.]
defaults: {batch_sizes: [2], dtypes: [float32], timeout_s: 300}
fixtures:
  x: {kind: random, samples: 1, inputs: {x: {shape: [batch, 4]}}}
modules:
  - {name: offset, factory: "model:offset", inputs: [{name: x}], fixtures: [x]}
  - {name: noisy, factory: "model:noisy", inputs: [{name: x}], fixtures: [x]}
'''

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    for v in VERSIONS:
        broken = tuple(int(x) for x in v.split(".")) >= (1, 2, 0)
        wheel(folder, "pgfake", v, f"BROKEN = {broken}\nVERSION = {v!r}\n")
    for v in ("1.0.0", "2.0.0"):
        wheel(folder, "pgother", v, f"VERSION = {v!r}\n")
    return folder


def _installer(root: Path, wheels: Path) -> OverlayInstaller:
    return OverlayInstaller(root, index_args=["--no-index", f"--find-links={wheels}"],
                            timeout=300)


def test_a_release_in_two_package_sets_is_kept_once_on_disk(tmp_path: Path,
                                                            wheels: Path) -> None:
    installer = _installer(tmp_path / "cache", wheels)
    one, why = installer.prepare({"pgfake": "1.1.0", "pgother": "1.0.0"})
    assert one is not None, why
    two, why = installer.prepare({"pgfake": "1.1.0", "pgother": "2.0.0"})
    assert two is not None, why
    assert one != two

    def module(python: Path) -> Path:
        [found] = python.parent.parent.glob("lib/python*/site-packages/pgfake/__init__.py")
        return found

    assert os.path.samefile(module(one), module(two))  # one copy, two environments
    assert installer.prepare({"pgfake": "1.1.0", "pgother": "2.0.0"}) == (two, "")  # reused


@pytest.mark.slow
def test_bisect_end_to_end_on_a_local_index(tmp_path: Path, wheels: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL)
    manifest = tmp_path / "parity.yml"
    manifest.write_text(MANIFEST)
    cache = tmp_path / "cache"
    # the bad run: both cases with pgfake 1.4.0
    python, why = _installer(cache, wheels).prepare({"pgfake": VERSIONS[-1]})
    assert python is not None, why
    cases, why = CaseRunner(out=tmp_path, cases=[CASE, NOISY], manifest=manifest,
                            timeout=600).run(python, "bad-run")
    assert cases is not None, why
    assert cases[CASE].outcome.value == "mismatch" and cases[NOISY].outcome.value == "mismatch"
    results = tmp_path / "bad-run" / "results.json"
    with json_index({"pgfake": VERSIONS}) as index:
        done = subprocess.run(
            [sys.executable, "-m", "parity_gate", "bisect", str(manifest), "--good",
             f"pgfake=={VERSIONS[0]}", "--bad", f"pgfake=={VERSIONS[-1]}", "--package",
             "pgfake", "--from", str(results), "--select", CASE, "--select", NOISY,
             "--index", index, "--pip-arg=--no-index", f"--pip-arg=--find-links={wheels}",
             "--cache-dir", str(cache), "--out", str(tmp_path / "bisect")],
            capture_output=True, text=True, timeout=1200, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stderr[-3000:]  # the noisy case has no culprit
    flaky, found = json.loads((tmp_path / "bisect" / "bisect.json").read_text())
    assert list(flaky["flaky"]) == [NOISY] and not flaky["probes"]
    assert "eager is not deterministic" in flaky["flaky"][NOISY]
    [rec] = found["packages"]
    assert found["culprit"] == "pgfake" and rec["confirmed"], done.stderr[-3000:]
    assert (rec["last_good"], rec["first_bad"]) == ("1.1.0", FIRST_BAD)
    phases = [p["phase"] for p in found["probes"]]
    assert phases[:4] == ["repeat", "repeat", "confirm", "isolate"]
    assert phases[-2:] == ["recheck", "recheck"]
    assert f"first bad: pgfake {FIRST_BAD} (1.1.0 good)" in done.stderr
    assert f"flaky, not bisected: {NOISY} does not repeat" in done.stderr
