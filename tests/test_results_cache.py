"""A warm run replays a module whose cases all passed when nothing they depend on changed,
and runs it again the moment anything did: the factory's helpers, a checkpoint read by
Python or by native code (safetensors), a fixture file, an environment variable the
factory reads, the manifest entry. Failures are
never replayed. Real gate runs in a scratch checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.process

MODELS = '''\
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from helpers import SCALE

HERE = Path(__file__).parent


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x) * SCALE


def build():
    torch.manual_seed(0)
    net = Net()
    net.fc.bias.data += float(os.environ.get("NET_SHIFT", "0"))  # a build steered by the env
    return net


def from_checkpoint(folder):
    """config.json read by Python, the weights by safetensors' native reader."""
    config = json.loads((HERE / folder / "config.json").read_text())
    net = Net()
    net.load_state_dict(load_file(str(HERE / folder / "model.safetensors")))
    net.fc.bias.data *= config["bias_scale"]
    return net


def save(folder, seed):
    torch.manual_seed(seed)
    (HERE / folder).mkdir(exist_ok=True)
    (HERE / folder / "config.json").write_text(json.dumps({"bias_scale": 1.0}))
    save_file(Net().state_dict(), str(HERE / folder / "model.safetensors"))


class Broken(Net):
    def forward(self, x):
        y = self.fc(x)
        return y if torch.onnx.is_in_onnx_export() else y + 1.0


def broken():
    return Broken()
'''

MANIFEST = """\
version: 1
python_path: [.]
defaults: {batch_sizes: [1, 2], performance: {measure: false}}
fixtures:
  r: {kind: random, inputs: {x: {shape: [batch, 8]}}}
  f: {kind: file, path: data/x.npz}
modules:
  - {name: net, factory: netmodels:build, inputs: [{name: x}], fixtures: [r, f]}
  - {name: ckpt, factory: netmodels:from_checkpoint, kwargs: {folder: ckpt},
     inputs: [{name: x}], fixtures: [r]}
"""


def _checkout(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "netmodels.py").write_text(MODELS)
    (root / "helpers.py").write_text("SCALE = 2.0\n")
    (root / "data").mkdir()
    np.savez(root / "data" / "x.npz", x=np.random.default_rng(0).standard_normal(
        (2, 8)).astype(np.float32))
    (root / "parity.yml").write_text(MANIFEST)
    _save_checkpoint(root, seed=1)
    return root


def _save_checkpoint(root: Path, seed: int) -> None:
    subprocess.run([sys.executable, "-c", f"import netmodels; netmodels.save('ckpt', {seed})"],
                   cwd=root, check=True)


def _run(root: Path, *extra: str, shift: str | None = None) -> tuple[str, dict[str, Any]]:
    out = root / "out"
    env = {k: v for k, v in os.environ.items() if k != "NET_SHIFT"}
    env.update({"NET_SHIFT": shift} if shift is not None else {})
    got = subprocess.run([sys.executable, "-m", "parity_gate", "run", "parity.yml", "--out",
                          str(out), "--cache-dir", str(root / "cache"), "--no-localise",
                          "--jobs", "1", *extra], cwd=root, capture_output=True, text=True,
                         timeout=600, env=env)
    assert "Traceback" not in got.stderr, got.stderr[-3000:]
    return got.stdout + got.stderr, json.loads((out / "results.json").read_text())


def _replayed(results: dict[str, Any]) -> dict[str, bool]:
    """Module → whether its cases were replayed (all of them, or none)."""
    seen: dict[str, set[bool]] = {}
    for case in results["cases"]:
        seen.setdefault(case["key"]["module"], set()).add(bool(case["provenance"]["replayed"]))
    assert all(len(v) == 1 for v in seen.values()), seen
    return {m: v.pop() for m, v in seen.items()}


def _verdicts(results: dict[str, Any]) -> dict[str, Any]:
    """What a replay must reproduce: each case's outcome, reason and comparison."""
    return {c["id"] if "id" in c else json.dumps(c["key"], sort_keys=True):
            (c["outcome"], c["reason"], json.dumps(c.get("outputs"), sort_keys=True))
            for c in results["cases"]}


def test_warm_run_replays_until_an_input_changes(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "repo")
    _, cold = _run(root)
    assert _replayed(cold) == {"net": False, "ckpt": False}
    text, warm = _run(root)
    assert _replayed(warm) == {"net": True, "ckpt": True}, text
    assert "results cache: 2 module(s) replayed unchanged" in text
    assert _verdicts(warm) == _verdicts(cold)
    assert {c["provenance"]["replayed"] for c in warm["cases"]} == {cold["started_at"]}

    (root / "helpers.py").write_text("SCALE = 3.0\n")  # a helper both forwards read
    text, edited = _run(root)
    assert _replayed(edited) == {"net": False, "ckpt": False}, text
    assert "2 run again (an input changed)" in text
    _, again = _run(root)
    assert _replayed(again) == {"net": True, "ckpt": True}

    np.savez(root / "data" / "x.npz", x=np.ones((2, 8), np.float32))  # a fixture file
    _, refixtured = _run(root)
    assert _replayed(refixtured)["net"] is False

    _save_checkpoint(root, seed=2)  # new weights, read by safetensors' native code
    _, retrained = _run(root)
    assert _replayed(retrained) == {"net": True, "ckpt": False}

    _, shifted = _run(root, shift="0.5")  # a variable the factory reads: set, then changed
    assert _replayed(shifted) == {"net": False, "ckpt": True}
    assert _replayed(_run(root, shift="0.5")[1])["net"] is True
    assert _replayed(_run(root, shift="0.25")[1])["net"] is False

    text, rerun = _run(root, "--rerun")
    assert _replayed(rerun) == {"net": False, "ckpt": False}, text


def test_a_changed_manifest_entry_or_a_failure_is_run_again(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "repo")
    _run(root)
    manifest = root / "parity.yml"
    manifest.write_text(MANIFEST.replace("batch_sizes: [1, 2]", "batch_sizes: [1, 3]"))
    _, resized = _run(root)
    assert _replayed(resized) == {"net": False, "ckpt": False}

    manifest.write_text(MANIFEST + "  - {name: broken, factory: netmodels:broken, "
                        "inputs: [{name: x}], fixtures: [r]}\n")
    _, first = _run(root)
    assert {c["outcome"] for c in first["cases"] if c["key"]["module"] == "broken"} \
        == {"mismatch"}
    text, second = _run(root)
    replayed = _replayed(second)
    assert replayed["broken"] is False, text  # a failure runs again, with its localisation
    assert replayed["net"] is True and replayed["ckpt"] is True
