"""docs/how-to/decoders.md's example is complete: its factory module and manifest, pasted
into an empty folder, pass `parity-gate check` (which imports the factory and, for a
`cache:` declaration, builds the model), so every fixture set it names is defined there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "decoders.md"


@pytest.mark.process
def test_the_pages_example_passes_check(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    text = PAGE.read_text(encoding="utf-8")
    factory = re.search(r"```python\n(# tiny_llama\.py\n.*?)```", text, re.S)
    manifest = re.search(r"```yaml\n(# parity\.yml, beside tiny_llama\.py\n.*?)```", text, re.S)
    assert factory and manifest, "the page opens with tiny_llama.py and its parity.yml"
    (tmp_path / "tiny_llama.py").write_text(factory.group(1))
    (tmp_path / "parity.yml").write_text(manifest.group(1))
    done = subprocess.run([sys.executable, "-m", "parity_gate", "check", "parity.yml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "parity.yml: OK (1 modules, 2 fixture sets)"
    assert "parity-gate check parity.yml   # parity.yml: OK (1 modules, 2 fixture sets)" in text
