"""The default tolerance policy (README "Tolerances"): correct exports pass, contracts stand.

A float32 disagreement that a float64 run of the same weights shows to be rounding
(ONNX Runtime within float32's rounding of float64, or no further from it than
eager) passes at the built-in tolerances; a tolerance the manifest sets itself is a
contract that keeps failing, named "unattainable by any correct implementation";
a real defect fails at every setting.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parity_gate.cli import main
from parity_gate.compare import Tolerance
from parity_gate.compare.reference import OutputRules, judge_against_float64
from parity_gate.model.precision import Ruling

MANIFEST = Path(__file__).parent / "data" / "tolerance_policy" / "parity.yml"
F32 = [Tolerance(1e-5, 1e-3)]
Y32 = OutputRules(["y"], F32, [False])


def _truth() -> np.ndarray:
    return np.random.default_rng(3).normal(0, 4, (16, 64))


def test_onnx_within_float32_rounding_is_no_defect_even_when_eager_is_exact() -> None:
    """The knife edge: eager happens to equal float64 rounded, ONNX is a few float32
    ulps of the output's scale off on one element: any correct kernel may be there."""
    truth = _truth()
    truth[3, 5] = 2.5e-4  # a value near zero, where a cancellation leaves only rounding
    eager = truth.astype(np.float32)
    onnx = eager.copy()
    onnx[3, 5] += np.float32(1.6e-5)  # ~ 4e-6 relative to the mean |value|: ~60 ulp
    judged = judge_against_float64([eager], [onnx], [truth], Y32, [0])
    assert judged.eager_error == 0.0 and (judged.onnx_error or 0) > F32[0].atol
    assert judged.ruling is Ruling.ONNX_ROUNDING and not judged.ruling.defect
    assert "within float32 rounding of float64" in judged.describe()


def test_a_region_defect_in_float32_stays_a_defect() -> None:
    truth = _truth()
    eager = truth.astype(np.float32)
    onnx = eager.copy()
    onnx[:, :8] += np.float32(0.01)
    judged = judge_against_float64([eager], [onnx], [truth], Y32, [0])
    assert judged.ruling is Ruling.ONNX_WORSE and judged.ruling.defect


def test_infinite_distances_never_excuse_a_mismatch() -> None:
    """inf <= 4 * inf is true, and said 'a tolerance artefact: inf vs inf' before."""
    truth = _truth()
    eager = truth.astype(np.float32)
    onnx = eager.copy()
    eager[0, 0] = np.nan  # eager wrong in one place ...
    onnx[1, 1] = np.inf  # ... ONNX wrong in another
    judged = judge_against_float64([eager], [onnx], [truth], Y32, [0])
    assert judged.ruling is Ruling.ONNX_WORSE and judged.ruling.defect


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("tolerance_policy")
    code = main(["run", str(MANIFEST), "--out", str(out), "--quiet", "--no-localise"])
    assert code == 1  # the real defect blocks
    by: dict[str, list[dict[str, Any]]] = {}
    for case in json.loads((out / "results.json").read_text())["cases"]:
        by.setdefault(case["key"]["module"], []).append(case)
    by["_summary"] = [{"text": (out / "summary.md").read_text()}]
    by["_findings"] = json.loads((out / "results.json").read_text())["findings"]
    return by


@pytest.mark.process
def test_rounding_level_float32_passes_at_default_tolerance(
        cases: dict[str, list[dict[str, Any]]]) -> None:
    for case in cases["cancellation"]:
        assert case["outcome"] == "pass", case["reason"]
        # It did differ: the pass says so, with the tolerance each side needed.
        assert "float32 eager and ONNX differ, but against float64" in case["reason"]
        assert case["reference"]["ruling"] in ("onnx_rounding", "as_eager", "onnx_exact")


@pytest.mark.process
def test_an_explicit_tolerance_is_a_contract_named_unattainable(
        cases: dict[str, list[dict[str, Any]]]) -> None:
    for case in cases["cancellation_contract"]:
        assert case["outcome"] == "mismatch"
        ref = case["reference"]
        assert ref["ruling"] != "onnx_worse" and ref["manifest_atol"] == 1e-5
        assert ref["needed_atol"] > 1e-5
    summary = cases["_summary"][0]["text"]
    row = next(ln for ln in summary.splitlines() if "float32/features/b1/cpu" in ln
               and "mismatch" in ln)
    # The first thing the row says after the comparison is that the tolerance is off.
    assert ("— unattainable by any correct implementation in float32: output0 needs "
            "atol&gt;=") in row
    assert "the manifest sets atol 1e-05" in row


@pytest.mark.process
def test_a_real_defect_fails_at_default_tolerance(
        cases: dict[str, list[dict[str, Any]]]) -> None:
    for case in cases["shifted"]:
        assert case["outcome"] == "mismatch"
        assert case["reference"]["ruling"] == "onnx_worse"
        assert "unattainable" not in case["reason"]


@pytest.mark.process
def test_a_random_model_is_never_excused_by_a_float64_run(
        cases: dict[str, list[dict[str, Any]]]) -> None:
    """Its float64 run is one more random draw, as far from eager as ONNX Runtime is:
    'rounding noise on both sides' would pass it. A second eager run tells."""
    for case in cases["noisy"]:
        assert case["outcome"] == "mismatch"
        assert case["reference"]["ruling"] == "unverified"
        assert "eager is not deterministic" in case["reference"]["error"]


@pytest.mark.process
def test_a_pass_that_compares_no_finite_number_is_said_to(
        cases: dict[str, list[dict[str, Any]]]) -> None:
    """NaN equals NaN: an output that is NaN or inf everywhere in eager passes vacuously."""
    assert all(c["outcome"] == "pass" for c in cases["overflow"])
    (found,) = [f for f in cases["_findings"] if f["kind"] == "degenerate-reference"]
    assert found["module"] == "overflow" and "every value of output0 is NaN or inf" in \
        found["message"]
    assert not [f for f in cases["_findings"] if f["kind"] == "degenerate-reference"
                and f["module"] != "overflow"]
