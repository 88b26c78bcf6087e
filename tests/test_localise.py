"""Localisation on modules whose answer is known (tests/data/localise/models.py).

One real gate run of the three modules (every case gets every check under the
default cap of 3); the cap itself is checked on the planner. Every repro
script is run in a subprocess and must reproduce.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parity_gate import compare as cmp
from parity_gate.cli import main
from parity_gate.gate.merge import read_results
from parity_gate.localise import layers
from parity_gate.localise.run import LocalisePolicy, jobs_for
from parity_gate.manifest.load import load_manifest
from parity_gate.model.localisation import Check, Localisation, Status
from parity_gate.model.results import RunResult
from parity_gate.plan.cases import plan

DATA = Path(__file__).resolve().parent / "data" / "localise"


@pytest.fixture(scope="module")
def localised(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path]:
    out = tmp_path_factory.mktemp("localise")
    code = main(["run", str(DATA / "parity.yml"), "--out", str(out), "--quiet"])
    assert code == 1
    return read_results(out / "results.json")[1], out


def loc_of(run: RunResult, module: str) -> Localisation:
    (case,) = [c for c in run.cases if c.key.module == module]
    assert case.outcome.value == "mismatch"  # the verdict itself is never changed
    assert case.localisation is not None
    return case.localisation


@pytest.mark.process
def test_planted_defect_is_named_with_its_layer_and_op(localised: tuple[RunResult, Path]
                                                       ) -> None:
    loc = loc_of(localised[0], "ten_blocks")
    assert loc.layer is not None and loc.layer.module == "blocks.6"
    assert loc.layer.kind == "Block" and "ScatterElements" in loc.layer.onnx_ops
    assert "aten.scatter_reduce.two" in loc.layer.aten_ops
    assert [p.module for p in loc.curve] == [f"blocks.{i}" for i in range(10)]
    # within tolerance up to blocks.5, out of it from blocks.6 (later blocks may squash it)
    assert [p.passed for p in loc.curve[:7]] == [True] * 6 + [False]
    assert loc.curve[6].max_abs is not None and loc.curve[6].max_abs > 0.01
    assert loc.known_op is not None
    assert loc.known_op.finding == "op/scatter_reduce.mean.noself/float32/normal/cpu"
    assert loc.known_op.aten == "aten.scatter_reduce.two"
    op_step = loc.step(Check.OP)
    assert op_step is not None and "known exporter defect in onnxscript" in op_step.note
    assert loc.artefact is False and loc.onnx_error is not None and loc.onnx_error > 0.01
    assert loc.first_level == "disabled" and not any(loc.levels.values())
    assert loc.capture_owns is False


@pytest.mark.process
def test_fusion_is_named_by_its_optimization_level(localised: tuple[RunResult, Path]) -> None:
    loc = loc_of(localised[0], "fused_scale")
    assert loc.levels == {"disabled": True, "basic": True, "extended": False, "all": False}
    assert loc.first_level == "extended"
    assert any("fusion" in line for line in loc.summary())
    # an amplified last-bit difference: ill-conditioned, a tolerance artefact
    assert loc.artefact is True
    assert loc.eager_error is not None and loc.onnx_error is not None
    assert loc.onnx_error <= loc.eager_error * 10


@pytest.mark.process
def test_capture_only_divergence_belongs_to_the_capture(localised: tuple[RunResult, Path]
                                                        ) -> None:
    loc = loc_of(localised[0], "capture_only")
    assert loc.capture_owns is True and loc.capture_max_abs == pytest.approx(1.0, rel=1e-3)
    layer = loc.step(Check.LAYER)
    assert layer is not None and layer.status is Status.SKIPPED
    assert "capture" in layer.note
    assert loc.artefact is False  # eager is the float64 answer; ONNX is 1 off


@pytest.mark.process
def test_cap_on_expensive_checks_goes_to_the_worst_cases(localised: tuple[RunResult, Path]
                                                         ) -> None:
    run = localised[0]
    manifest = load_manifest(DATA / "parity.yml")
    modules = plan(manifest, DATA / "parity.yml", ["CPUExecutionProvider"]).jobs
    worst = sorted(run.cases, key=lambda c: -(getattr(c.worst(), 'max_abs', 0.0) or 0.0))
    jobs = jobs_for(run, modules, LocalisePolicy(cap=1))
    assert sorted(j.module.name for j in jobs) == sorted(c.key.module for c in run.cases)
    assert [i for j in jobs for i in j.expensive] == [worst[0].id]
    assert jobs_for(run, modules, LocalisePolicy(cap=0))[0].expensive == []
    for case in run.cases:  # under the default cap every step ran or said why not
        assert case.localisation is not None
        assert [s.check for s in case.localisation.steps] == list(Check)
        assert all(s.note for s in case.localisation.steps if s.status is Status.SKIPPED)


@pytest.mark.process
def test_every_repro_script_reproduces_in_a_subprocess(localised: tuple[RunResult, Path]
                                                       ) -> None:
    run, out = localised
    scripts = sorted((out / "artifacts").rglob("repro.py"))
    assert {s.parent.name for s in scripts} == {
        "ten_blocks__float32__vec__b3__cpu", "capture_only__float32__vec__b3__cpu",
        "fused_scale__float32__vec__b3__cpu", "layer"}
    for script in scripts:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, cwd=script.parent.parent)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "out of tolerance" in done.stdout
    meta = json.loads((out / "artifacts" / "ten_blocks__float32__vec__b3__cpu" / "case.json"
                       ).read_text())
    assert meta["atol"] == 1e-5 and meta["providers"] == ["CPUExecutionProvider"]
    case = next(c for c in run.cases if c.key.module == "ten_blocks")
    assert case.localisation is not None and case.localisation.repro is not None


@pytest.mark.process
def test_no_localise_leaves_the_cases_alone(tmp_path: Path) -> None:
    assert main(["run", str(DATA / "parity.yml"), "--out", str(tmp_path), "--quiet",
                 "--select", "capture_only", "--no-localise"]) == 1
    run = read_results(tmp_path / "results.json")[1]
    assert [c.localisation for c in run.cases] == [None]
    assert not (tmp_path / "artifacts").exists()


# --------------------------------------------------------------------------
# the search itself, on a scope map built by hand


def _scopes(children: list[str]) -> layers.ScopeMap:
    m = layers.ScopeMap()
    for i, name in enumerate(children):
        m.made.append(layers._Made(f"v{i}", (name,), ("Block",), "aten.add.Tensor"))
        m.users[f"v{i}"] = [(children[i + 1],)] if i + 1 < len(children) else [None]
        m.nodes.append(((name,), "Add"))
    return m


def test_search_names_the_first_child_out_of_tolerance() -> None:
    names = [f"b{i}" for i in range(5)]
    scopes = _scopes(names)
    bad = {"v2", "v3", "v4"}  # the error appears in b2 and propagates

    def evaluate(values: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        ref = {v: np.ones(4, np.float32) for v in values}
        got = {v: ref[v] + (0.5 if v in bad else 0.0) for v in values}
        return ref, got

    found = layers.search(scopes, evaluate, cmp.Tolerance(1e-5, 1e-3))
    assert found.layer is not None and found.layer.module == "b2" and found.layer.path == ["b2"]
    assert [p.passed for p in found.curve] == [True, True, False, False, False]
    assert found.curve[2].needed_atol == pytest.approx(0.5, rel=1e-2)


def test_search_without_a_divergent_child_names_no_layer() -> None:
    scopes = _scopes(["a", "b"])
    found = layers.search(scopes, lambda vs: ({v: np.zeros(2) for v in vs},
                                              {v: np.zeros(2) for v in vs}),
                          cmp.Tolerance(1e-5, 1e-3))
    assert found.layer is None and [p.passed for p in found.curve] == [True, True]


def test_scope_lists_are_read_as_the_exporter_writes_them() -> None:
    assert layers._parse_list("['', 'blocks.6', 'add_51']") == ["", "blocks.6", "add_51"]
    assert layers._parse_list("not a list") == [] and layers._parse_list("[1, ") == []


@pytest.mark.process
def test_the_manifest_caps_the_checks_and_may_pass_an_artefact(tmp_path: Path) -> None:
    text = (DATA / "parity.yml").read_text() + (
        "localise: {max_cases: 0, artefacts: pass}\n")
    (tmp_path / "parity.yml").write_text(text)
    (tmp_path / "models.py").write_text((DATA / "models.py").read_text())
    assert main(["run", str(tmp_path / "parity.yml"), "--out", str(tmp_path / "out"),
                 "--quiet", "--select", "fused_scale", "--select", "ten_blocks"]) == 1
    run = read_results(tmp_path / "out" / "results.json")[1]
    by = {c.key.module: c for c in run.cases}
    fused, ten = by["fused_scale"], by["ten_blocks"]
    # the artefact passes, saying why; the real defect still fails
    assert fused.outcome.value == "pass" and fused.reason.startswith(
        "tolerance artefact, passed by the manifest (localise.artefacts: pass)")
    assert ten.outcome.value == "mismatch" and ten.localisation is not None
    layer = ten.localisation.step(Check.LAYER)
    assert layer is not None and layer.status is Status.SKIPPED  # max_cases: 0
