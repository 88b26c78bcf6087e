"""The export cache inside real gate runs: a warm run reuses every translation and gives the
same results; a change to what the captured program holds misses; damage is rebuilt; two
runs share a folder safely; weights past the external-data threshold still work."""

from __future__ import annotations

import json
import multiprocessing
import textwrap
from pathlib import Path
from typing import Any

import pytest

from parity_gate.manifest.load import load_manifest
from parity_gate.model.results import RunResult
from parity_gate.report.write import ReportPaths
from parity_gate.runner import RunOptions, run_manifest

pytestmark = pytest.mark.process  # real exports in real workers

NET = '''
import torch
from helpers import act


class Net(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc = torch.nn.Linear(6, width)
        self.scale = 1.0

    def forward(self, x):
        return act(self.fc(x)) * self.scale


def build(width=8):
    return Net(width)
'''

HELPERS = '''
import torch


def act(x):
    return torch.relu(x)
'''

MANIFEST = '''
version: 1
seed: {seed}
python_path: [.]
defaults:
  batch_sizes: [1, 3]
  dtypes: [float32]
  export: {{exporter: dynamo{export}}}
providers:
  cpu: {{required: true}}
fixtures:
  rows:
    kind: random
    inputs:
      x: {{shape: [batch, 6]}}
  wide:
    kind: random
    inputs:
      x: {{shape: [batch, 6], distribution: uniform}}
modules:
  - name: net
    factory: net:build
    kwargs: {{width: {width}}}
    inputs: [{{name: x, dynamic: {{0: batch}}}}]
    fixtures: [rows, wide]
'''


def project(root: Path, seed: int = 0, width: int = 8, export: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "net.py").exists():
        (root / "net.py").write_text(NET)
        (root / "helpers.py").write_text(HELPERS)
    path = root / "parity.yml"
    path.write_text(textwrap.dedent(MANIFEST.format(seed=seed, width=width, export=export)))
    return path


def gate(manifest: Path, cache: Path | None, out: Path, jobs: int = 1) -> RunResult:
    """A run that uses the export cache (None: none)."""
    run, _, _ = run_manifest(load_manifest(manifest), manifest, RunOptions(
        jobs=jobs, cache_dir=cache, quiet=True, localise=None,
        reports=ReportPaths.in_folder(out, None, None, None, None)))
    return run


def cached(run: RunResult) -> list[bool]:
    return [bool(c.provenance and c.provenance.export_cached) for c in run.cases]


def comparable(run: RunResult) -> dict[str, Any]:
    """Each case's JSON form without what is measured (timings, performance) and the cache
    flag: what must not change."""
    out = {}
    for case in run.cases:
        doc = case.to_dict()
        doc.pop("timings", None)
        doc.pop("performance", None)
        for check in doc.get("checks", []):
            check.pop("seconds", None)  # measured: each follow-up check's time
        doc.get("provenance", {}).pop("export_cached", None)
        out[case.id] = doc
    return out


def entries(cache: Path, kind: str) -> list[Path]:
    return sorted(p.parent for p in (cache / kind).glob("*/*/entry.json"))


def test_a_warm_run_reuses_everything_and_gives_the_same_results(tmp_path: Path) -> None:
    manifest, cache = project(tmp_path / "p"), tmp_path / "cache"
    cold = gate(manifest, cache, tmp_path / "cold")
    assert cold.verdict.result == "pass" and len(cold.cases) == 4
    assert not any(cached(cold))
    assert len(entries(cache, "translation")) == 1  # one per (module, dtype)
    warm = gate(manifest, cache, tmp_path / "warm")
    assert all(cached(warm))
    assert comparable(warm) == comparable(cold)
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in cold.findings]
    off = gate(manifest, None, tmp_path / "off")  # no cache: nothing reused, same results
    assert not any(cached(off)) and comparable(off) == comparable(cold)


def test_each_part_of_the_key_misses(tmp_path: Path) -> None:
    root, cache = tmp_path / "p", tmp_path / "cache"
    gate(project(root), cache, tmp_path / "o0")
    # other weights (the manifest seed), a factory kwarg, an export option: all miss
    changes: list[dict[str, Any]] = [{"seed": 1}, {"width": 9}, {"export": ", opset: 19"}]
    for n, change in enumerate(changes):
        assert not any(cached(gate(project(root, **change), cache, tmp_path / f"o{n + 1}")))
    # a line in a helper the forward calls (another file, not a class): a miss
    manifest = project(root)
    assert all(cached(gate(manifest, cache, tmp_path / "again")))
    (root / "helpers.py").write_text(HELPERS.replace("torch.relu(x)", "torch.relu(x) + 0"))
    assert not any(cached(gate(manifest, cache, tmp_path / "edited")))


def test_a_damaged_entry_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    manifest, cache = project(tmp_path / "p"), tmp_path / "cache"
    cold = gate(manifest, cache, tmp_path / "cold")
    (export,) = entries(cache, "translation")
    model = export / "model.onnx"
    model.write_bytes(model.read_bytes()[:-7])  # cut short, as a killed writer would
    rebuilt = gate(manifest, cache, tmp_path / "rebuilt")
    assert not any(cached(rebuilt)) and comparable(rebuilt) == comparable(cold)
    assert all(cached(gate(manifest, cache, tmp_path / "warm")))  # whole again


def _run_in_child(manifest: str, cache: str, out: str) -> None:
    run = gate(Path(manifest), Path(cache), Path(out))
    Path(out, "verdict.json").write_text(json.dumps(
        {"result": run.verdict.result, "cases": len(run.cases)}))


def test_two_runs_sharing_a_cache_at_once(tmp_path: Path) -> None:
    manifest, cache = project(tmp_path / "p"), tmp_path / "cache"
    ctx = multiprocessing.get_context("spawn")
    runs = [ctx.Process(target=_run_in_child, args=(str(manifest), str(cache),
                                                    str(tmp_path / f"o{i}")))
            for i in range(2)]
    for p in runs:
        p.start()
    for p in runs:
        p.join(300)
        assert p.exitcode == 0
    for i in range(2):
        assert json.loads((tmp_path / f"o{i}" / "verdict.json").read_text()) == \
            {"result": "pass", "cases": 4}
    assert len(entries(cache, "translation")) == 1
    assert not list((cache / "tmp").iterdir())  # no staging folder left behind
    assert all(cached(gate(manifest, cache, tmp_path / "warm")))


def test_weights_past_the_external_data_threshold(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The 2 GiB protobuf limit, crossed with a small model: the worker writes the weights
    as external data, runs and caches that, and a warm run loads it from the cache."""
    monkeypatch.setenv("PARITY_GATE_EXTERNAL_DATA_BYTES", "64")  # read by the workers
    manifest, cache = project(tmp_path / "p", width=512), tmp_path / "cache"
    cold = gate(manifest, cache, tmp_path / "cold")
    assert cold.verdict.result == "pass", [c.reason for c in cold.cases]
    (export,) = entries(cache, "translation")
    # the fc weight (small tensors stay inline), and the graph without it
    assert (export / "model.onnx.data").stat().st_size >= 6 * 512 * 4
    assert (export / "model.onnx").stat().st_size < 6 * 512 * 4
    warm = gate(manifest, cache, tmp_path / "warm")
    assert all(cached(warm)) and comparable(warm) == comparable(cold)


def test_two_jobs_give_the_same_results_as_one(tmp_path: Path) -> None:
    manifest = project(tmp_path / "p")
    text = manifest.read_text().replace("modules:\n", "modules:\n"
                                        "  - name: other\n    factory: net:build\n"
                                        "    kwargs: {width: 5}\n"
                                        "    inputs: [{name: x, dynamic: {0: batch}}]\n"
                                        "    fixtures: [rows]\n")
    manifest.write_text(text)
    serial = gate(manifest, None, tmp_path / "serial", jobs=1)
    parallel = gate(manifest, None, tmp_path / "parallel", jobs=2)
    assert len(serial.cases) == 6
    assert comparable(parallel) == comparable(serial)


def test_a_miss_says_what_changed_since_the_modules_last_export(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48: a module whose export misses the cache where its previous run had an entry
    says what changed, in the run's output, results.json and the summary; a first export
    (no earlier record) says nothing."""
    import re

    from parity_gate.cli import main

    root, cache = tmp_path / "p", tmp_path / "cache"

    def run(n: int, **change: Any) -> tuple[str, list[str], str]:
        out = tmp_path / f"o{n}"
        code = main(["run", str(project(root, **change)), "--out", str(out),
                     "--cache-dir", str(cache)])
        output = capsys.readouterr().err
        assert code == 0, output
        doc = json.loads((out / "results.json").read_text())
        notes = [f"{f['module']} {f['message']}" for f in doc["findings"]
                 if f["kind"] == "cache"]
        return output, notes, (out / "summary.md").read_text()

    _, notes, _ = run(0)
    assert notes == []
    output, notes, summary = run(1, seed=1)  # the weights' initialisation
    said = "float32: translation not reused: the weights changed (fc.bias, fc.weight)"
    assert notes == [f"net {said}"]
    assert f"[net] cache: {said}" in output and said in summary
    (root / "helpers.py").write_text(
        HELPERS.replace("torch.relu(x)", "torch.nn.functional.gelu(x)"))
    output, notes, summary = run(2, seed=1)  # one op
    graph = re.compile(r"float32: translation not reused: the graph changed \(node \d+ "
                       r"\(gelu\): aten\.relu → aten\.gelu\)")
    assert len(notes) == 1 and graph.search(notes[0]), notes
    assert graph.search(output) and graph.search(summary)
