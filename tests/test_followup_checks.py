"""A follow-up check that fails is that check's finding with its cause, never a verdict
it did not reach and never an internal error (tests/data/followup: the re-export with the
exporter's optimizer off meets a real onnxscript defect, a bias-less Conv3d's bias that
ONNX Runtime rejects, microsoft/onnxscript#2931)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity_gate.cli import main

MANIFEST = Path(__file__).parent / "data" / "followup" / "parity.yml"


@pytest.mark.process
def test_a_reexport_that_fails_at_run_is_named_an_exporter_defect(tmp_path: Path) -> None:
    assert main(["run", str(MANIFEST), "--out", str(tmp_path), "--quiet",
                 "--no-localise"]) == 1
    (case,) = json.loads((tmp_path / "results.json").read_text())["cases"]
    # the module's own mismatch stands, with the follow-ups' findings beside it
    assert case["outcome"] == "mismatch" and case["reason"].startswith("output0: mismatch")
    assert case["rerun"]["outcome"] == "mismatch"  # ORT optimizations off: it persists
    reexport = case["reexport"]
    if reexport["outcome"] == "mismatch":
        pytest.skip("this onnxscript exports a bias-less Conv3d correctly without optimize")
    assert reexport["outcome"] is None  # no verdict: "persists" would be a claim it never made
    assert reexport["error"].startswith(
        "an exporter defect that the optimizer's rewrites hide (ONNX Runtime fails on that "
        "graph where it runs the optimized one; worth its own report): runtime_error: ")
    assert "bias must be a 1D tensor" in reexport["error"]
    summary = (tmp_path / "summary.md").read_text()
    assert "re-export with optimize: false failed: an exporter defect" in summary
    assert "internal error" not in summary
