"""A detector's outputs (boxes, scores, labels of data-dependent count) compared as sets,
on real exports (tests/data/detection): a correct export passes, a moved box and a
different count fail, each said as such."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from parity_gate.cli import main

MANIFEST = Path(__file__).parent / "data" / "detection" / "parity.yml"


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("detection")
    assert main(["run", str(MANIFEST), "--out", str(out), "--quiet", "--no-localise"]) == 1
    return {c["key"]["module"]: c for c in json.loads((out / "results.json").read_text())["cases"]}


@pytest.mark.process
def test_a_correct_detector_export_passes_as_a_set(cases: dict[str, dict[str, Any]]) -> None:
    case = cases["tiny"]
    assert case["outcome"] == "pass"
    (group,) = case["comparisons"]
    assert group["name"] == "detections" and group["task"] == "detection"
    assert "matched by IoU>=0.5 with the same label" in group["reason"]


@pytest.mark.process
def test_moved_boxes_fail_as_detections_without_partners(
        cases: dict[str, dict[str, Any]]) -> None:
    case = cases["shifted"]
    assert case["outcome"] == "mismatch"
    assert case["reason"].startswith("detections: detections differ (")
    assert "without a partner: eager #0" in case["reason"]


@pytest.mark.process
def test_a_different_count_is_named_a_count_difference(
        cases: dict[str, dict[str, Any]]) -> None:
    case = cases["stricter"]
    assert case["outcome"] == "mismatch"
    (group,) = case["comparisons"]
    assert group["verdict"] == "count"
    assert case["reason"].startswith("detections: count: eager finds ")
