"""A crash inside ONNX Runtime is named and replayed in a repro folder that crashes the
same way (tests/data/ort_crash: one float16 attention layer segfaults ONNX Runtime's CPU
provider while loading, at the highest graph optimization level only)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from parity_gate.cli import main

MANIFEST = Path(__file__).parent / "data" / "ort_crash" / "parity.yml"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ort_crash")
    code = main(["run", str(MANIFEST), "--out", str(out), "--quiet"])
    data = json.loads((out / "results.json").read_text())
    data["by_dtype"] = {c["key"]["dtype"]: c for c in data["cases"]}
    data["exit_code"], data["summary"] = code, (out / "summary.md").read_text()
    if data["by_dtype"]["float16"]["outcome"] == "pass":
        import onnxruntime

        pytest.skip(f"onnxruntime {onnxruntime.__version__} no longer crashes on this model")
    return data


@pytest.mark.process
def test_the_crash_names_its_library_and_step(run: dict[str, Any]) -> None:
    case = run["by_dtype"]["float16"]
    assert case["outcome"] == "crash" and run["exit_code"] == 1
    assert case["reason"] == ("worker killed by SIGSEGV in ONNX Runtime while loading float16 "
                              "model on cpu")
    assert run["by_dtype"]["float32"]["outcome"] == "pass"  # the same layer in float32


@pytest.mark.process
def test_the_repro_folder_crashes_the_same_way_and_names_the_level(run: dict[str, Any]) -> None:
    crash = run["by_dtype"]["float16"]["crash"]
    assert crash["reproduces"] and crash["signal"] == "SIGSEGV"
    assert crash["levels"] == {"disabled": "ok", "basic": "ok", "extended": "ok",
                               "all": "SIGSEGV"}
    folder = Path(crash["folder"])
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "repro.py"]
    # as a user runs it: the gate's level crashes, one below does not
    died = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True)
    assert died.returncode == -signal.SIGSEGV
    fine = subprocess.run([sys.executable, "repro.py", "extended"], cwd=folder,
                          capture_output=True, text=True)
    assert fine.returncode == 0 and "loaded at optimization level extended" in fine.stdout
    assert "a graph optimization (fusion) pass crashes on this model" in run["summary"]
