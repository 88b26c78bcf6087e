"""The export cache's key cannot go stale, and does not depend on where the checkout is.

Installed packages are told by the interpreter's package folders, never by a substring of
the path: a checkout under `…/ml-packages/not-site-packages/…` is the project's own source,
so editing only `forward` there is a miss. Paths in the key are relative to the manifest's
root, so the same checkout in another folder reuses every entry.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parity_gate.engine.cache import installed

pytestmark = pytest.mark.process

MODELS = '''\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x) * 2


def build():
    torch.manual_seed(0)
    return Net()
'''

MANIFEST = """\
version: 1
python_path: [.]
defaults: {batch_sizes: [1, 2], performance: {measure: false}}
fixtures:
  r: {kind: random, inputs: {x: {shape: [batch, 8]}}}
modules:
  - {name: net, factory: netmodels:build, inputs: [{name: x}], fixtures: [r]}
"""


def _checkout(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "netmodels.py").write_text(MODELS)
    (root / "parity.yml").write_text(MANIFEST)
    return root


def _reused(repo: Path, cache: Path) -> tuple[int, int, int]:
    got = subprocess.run([sys.executable, "-m", "parity_gate", "run", "parity.yml", "--out",
                          "reports", "--cache-dir", str(cache), "--no-localise", "--rerun"],
                         cwd=repo,
                         capture_output=True, text=True, timeout=600)
    found = re.search(r"(\d+) of (\d+) exports reused", got.stdout + got.stderr)
    assert found is not None, got.stdout[-2000:] + got.stderr[-2000:]
    return got.returncode, int(found.group(1)), int(found.group(2))


def test_an_edited_forward_misses_wherever_the_checkout_is_and_a_copy_hits(
        tmp_path: Path) -> None:
    repo = _checkout(tmp_path / "ml-packages" / "not-site-packages" / "proj")
    cache = tmp_path / "cache"
    assert not installed(repo / "netmodels.py")  # a lookalike path is the project's source
    assert installed(Path(pytest.__file__))      # an installed distribution is one
    assert _reused(repo, cache)[1:] == (0, 1)
    # The same checkout in another folder: every entry reused.
    elsewhere = tmp_path / "other-runner" / "proj"
    shutil.copytree(repo, elsewhere, ignore=shutil.ignore_patterns("reports", "__pycache__"))
    assert _reused(elsewhere, cache)[1:] == (1, 1)
    # Only forward edited, under the `-packages` path: a miss, never the old export.
    text = (repo / "netmodels.py").read_text().replace("* 2", "* 3")
    (repo / "netmodels.py").write_text(text)
    assert _reused(repo, cache)[1:] == (0, 1)
