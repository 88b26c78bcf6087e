"""Localisation on modules whose answer is known (tests/data/localise/models.py).

One real gate run of every planted module (a defect in each position the blame
rule must tell apart, and a clean control); every failing module gets the full
checks. Each culprit must be named at the right scope and node with the right
owner, and every repro script is run in a subprocess and must reproduce.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from parity_gate import compare as cmp
from parity_gate.cli import main
from parity_gate.gate.merge import read_results
from parity_gate.localise import layers
from parity_gate.localise.run import LocalisePolicy, _expensive, jobs_for
from parity_gate.manifest.load import load_manifest
from parity_gate.model.localisation import Check, Culprit, Localisation, Status
from parity_gate.model.results import RunResult
from parity_gate.model.upstream import Owner
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


def culprit_of(run: RunResult, module: str) -> Culprit:
    loc = loc_of(run, module)
    assert loc.culprit is not None, [s.note for s in loc.steps]
    return loc.culprit


def line_of(snippet: str) -> str:
    """models.py:N of the line holding `snippet` (what the exported program's trace names)."""
    lines = (DATA / "models.py").read_text().splitlines()
    (n,) = [i + 1 for i, text in enumerate(lines) if snippet in text]
    return f"models.py:{n}"


@pytest.mark.process
def test_a_blocks_own_code_owns_it_not_the_child_it_feeds(localised: tuple[RunResult, Path]
                                                          ) -> None:
    """blocks.6 pools in its own forward, then calls its child fc: the Linear's input
    already differed, so the Linear is innocent (it was blamed before)."""
    loc = loc_of(localised[0], "ten_blocks")
    culprit = culprit_of(localised[0], "ten_blocks")
    assert (culprit.scope, culprit.kind) == ("blocks.6", "Block")
    assert loc.layer is not None and loc.layer.module == "blocks.6"
    assert loc.layer.path == ["blocks.6"]
    assert culprit.aten == "aten.scatter_reduce.two"
    assert "'mean'" in culprit.call and "include_self=False" in culprit.call
    assert culprit.source == line_of("x = x + mean_pool(x)")
    assert "ScatterElements" in culprit.onnx_nodes
    assert culprit.owner is Owner.TRANSLATION and culprit.owner.route.package == "onnxscript"
    assert culprit.owned_by.endswith("aten_scatter_reduce")
    assert loc.summary()[0] == culprit.describe()  # the culprit line first
    assert [p.module for p in loc.curve] == [f"blocks.{i}" for i in range(10)]
    assert [p.passed for p in loc.curve[:7]] == [True] * 6 + [False]
    assert loc.known_op is not None
    assert loc.known_op.finding == "op/scatter_reduce.mean.noself/float32/normal/cpu"
    op_step = loc.step(Check.OP)
    assert op_step is not None and "known exporter defect in onnxscript" in op_step.note
    assert loc.artefact is False and loc.onnx_error is not None and loc.onnx_error > 1e-3
    assert loc.first_level == "disabled" and not any(loc.levels.values())
    assert loc.capture_owns is False


@pytest.mark.process
def test_a_defect_two_levels_down_with_siblings_after_it(localised: tuple[RunResult, Path]
                                                         ) -> None:
    loc = loc_of(localised[0], "two_deep")
    culprit = culprit_of(localised[0], "two_deep")
    assert (culprit.scope, culprit.kind) == ("stages.1.mix", "Mixer")
    assert loc.layer is not None and loc.layer.path == ["stages.1", "stages.1.mix"]
    assert culprit.aten == "aten.scatter_reduce.two"
    assert culprit.source == line_of("return x + mean_pool(x) if self.pool")
    assert culprit.owner is Owner.TRANSLATION
    assert [p.passed for p in loc.curve] == [True, False, False]


@pytest.mark.process
def test_the_roots_own_code(localised: tuple[RunResult, Path]) -> None:
    loc = loc_of(localised[0], "root_code")
    culprit = culprit_of(localised[0], "root_code")
    assert (culprit.scope, culprit.kind) == ("(root)", "RootCode")
    assert loc.layer is None  # no child call owns it
    assert culprit.aten == "aten.scatter_reduce.two"
    assert culprit.source == line_of("h = h + mean_pool(h)")
    assert culprit.owner is Owner.TRANSLATION
    # fc stays within tolerance; out is out of it, but its input already differed
    assert [(p.module, p.passed) for p in loc.curve] == [("fc", True), ("out", False)]


@pytest.mark.process
def test_one_module_called_at_two_places_is_two_calls(localised: tuple[RunResult, Path]
                                                      ) -> None:
    """The second call gets NaN; ONNX Runtime's CPU ReduceMax returns a number there where
    eager and ONNX's reference evaluator give NaN: the kernel owns it."""
    loc = loc_of(localised[0], "called_twice")
    culprit = culprit_of(localised[0], "called_twice")
    assert (culprit.scope, culprit.kind) == ("shared (call 2 of 2)", "Centre")
    assert loc.layer is not None and loc.layer.path == ["shared (call 2 of 2)"]
    assert culprit.aten == "aten.amax.default" and culprit.call.endswith("[-1], True)")
    assert culprit.source == line_of("PLANTED: amax")
    assert culprit.onnx_nodes == ["ReduceMax"]
    assert culprit.owner is Owner.KERNEL and culprit.owner.route.package == "onnxruntime"
    assert culprit.owned_by == "ReduceMax on CPUExecutionProvider"
    # judged by ReduceMax's definition, and the reference evaluator agrees with it here
    assert culprit.reference.startswith("judged by the op's definition (ReduceMax:")
    assert culprit.reference.endswith("ONNX's reference evaluator agrees with it")
    assert [p.module for p in loc.curve] == ["shared (call 1 of 2)", "fc",
                                             "shared (call 2 of 2)"]


@pytest.mark.process
def test_a_nan_only_divergence_is_compared_by_kind(localised: tuple[RunResult, Path]) -> None:
    """torch's sign of NaN is 0; ONNX's Sign gives NaN in ONNX Runtime and in the
    reference evaluator alike: the translation owns it."""
    run = localised[0]
    (case,) = [c for c in run.cases if c.key.module == "nan_sign"]
    worst = case.worst()
    assert worst is not None and worst.verdict.value == "non_finite"
    culprit = culprit_of(run, "nan_sign")
    assert (culprit.scope, culprit.aten) == ("(root)", "aten.sign.default")
    assert culprit.source == line_of("PLANTED: sign")
    assert culprit.owner is Owner.TRANSLATION and culprit.owned_by.endswith("aten_sign")


@pytest.mark.process
def test_maxpool_over_nan_belongs_to_the_runtime_kernel(localised: tuple[RunResult, Path]
                                                        ) -> None:
    """ONNX Runtime's CPU MaxPool returns a number where eager propagates NaN. MaxPool's
    definition (the max of each window; the max of a set holding NaN is NaN) gives eager's
    answer, so the graph is right and the kernel owns it. ONNX's reference evaluator,
    which keeps a NaN only when it opens a window, is said to depart from the definition
    rather than trusted."""
    culprit = culprit_of(localised[0], "maxpool_nan")
    assert (culprit.scope, culprit.aten) == ("(root)", "aten.max_pool1d.default")
    assert culprit.onnx_nodes == ["MaxPool"] and culprit.source == line_of("PLANTED: max_pool1d")
    assert culprit.owner is Owner.KERNEL and culprit.owner.route.package == "onnxruntime"
    assert culprit.owned_by == "MaxPool on CPUExecutionProvider"
    assert culprit.reference.startswith("judged by the op's definition (MaxPool:")
    assert "ONNX's reference evaluator departs from it on" in culprit.reference
    assert "where the definition gives NaN" in culprit.reference


@pytest.mark.parametrize(("kernel", "strides", "pads", "dilations", "ceil"), [
    ([2], [2], [0, 0], [1], 0), ([3], [2], [1, 1], [1], 1),
    ([3, 2], [2, 1], [1, 0, 1, 0], [1, 2], 0), ([3, 3], [2, 2], [1, 1, 1, 1], [2, 1], 1)])
def test_maxpool_by_its_definition_is_eagers_max_pool(kernel: list[int], strides: list[int],
                                                     pads: list[int], dilations: list[int],
                                                     ceil: int) -> None:
    """The owner check's oracle for MaxPool: equal to torch's max_pool on inputs with NaN
    (NaN-propagating, padding and ceil_mode windows as ONNX defines them) and to ONNX
    Runtime's MaxPool on finite inputs."""
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper

    from parity_gate.compare import spec

    dims = len(kernel)
    shape = (2, 3) + (7,) * dims
    rng = np.random.default_rng(dims + ceil)
    x = rng.standard_normal(shape).astype(np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=strides,
                            pads=pads, dilations=dilations, ceil_mode=ceil)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                        None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    finite = spec.evaluate(model, {"x": x}, "y")
    assert finite is not None and finite[1].op == "MaxPool"
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.array_equal(finite[0].astype(np.float32), session.run(None, {"x": x})[0])
    x[rng.random(shape) < 0.2] = np.nan
    with_nan = spec.evaluate(model, {"x": x}, "y")
    pool = torch.nn.functional.max_pool1d if dims == 1 else torch.nn.functional.max_pool2d
    eager = pool(torch.from_numpy(x), kernel, strides, pads[:dims], dilations,
                 ceil_mode=bool(ceil)).numpy()
    assert with_nan is not None and np.isnan(eager).any()
    assert np.array_equal(with_nan[0].astype(np.float32), eager, equal_nan=True)


def test_the_owner_rule_is_one_table() -> None:
    from parity_gate.compare import owner as nodes

    assert nodes.owner_of(True, False) is Owner.KERNEL
    assert nodes.owner_of(False, True) is Owner.TRANSLATION
    assert nodes.owner_of(False, False) is None and nodes.owner_of(None, None) is None
    assert nodes.owner_of(True, True) is None
    assert len({(r.with_eager, r.with_ort) for r in nodes.OWNER_RULES}) == len(nodes.OWNER_RULES)


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
    assert loc.culprit is None and loc.node_repro is None  # no node differs on its own


@pytest.mark.process
def test_capture_only_divergence_belongs_to_the_capture(localised: tuple[RunResult, Path]
                                                        ) -> None:
    loc = loc_of(localised[0], "capture_only")
    assert loc.capture_owns is True and loc.capture_max_abs == pytest.approx(1.0, rel=1e-3)
    culprit = culprit_of(localised[0], "capture_only")
    assert (culprit.scope, culprit.aten) == ("(root)", "aten.add.Tensor")
    assert culprit.call == "aten.add.Tensor(%linear, 1.0)" and culprit.code == "y = y + 1.0"
    assert culprit.source == line_of("y = y + 1.0")
    assert culprit.owner is Owner.CAPTURE and culprit.owner.route.package == "torch"
    assert loc.artefact is False  # eager is the float64 answer; ONNX is 1 off
    assert loc.node_repro is None and loc.repro is not None  # the model-level one stands


@pytest.mark.process
def test_a_clean_module_gets_no_localisation(localised: tuple[RunResult, Path]) -> None:
    (case,) = [c for c in localised[0].cases if c.key.module == "clean"]
    assert case.outcome.value == "pass" and case.localisation is None


@pytest.mark.process
def test_every_failing_module_gets_the_full_checks(localised: tuple[RunResult, Path]) -> None:
    run = localised[0]
    manifest = load_manifest(DATA / "parity.yml")
    modules = plan(manifest, DATA / "parity.yml", ["CPUExecutionProvider"]).jobs
    failing = [c for c in run.cases if c.outcome.value == "mismatch"]
    jobs = jobs_for(run, modules, LocalisePolicy(cap=1))
    assert sorted(j.module.name for j in jobs) == sorted(c.key.module for c in failing)
    assert sorted(i for j in jobs for i in j.expensive) == sorted(c.id for c in failing)
    assert jobs_for(run, modules, LocalisePolicy(cap=0))[0].expensive == []
    for case in failing:  # under the default cap every step ran or said why not
        assert case.localisation is not None
        assert [s.check for s in case.localisation.steps] == list(Check)
        assert all(s.note for s in case.localisation.steps if s.status is Status.SKIPPED)


def test_the_cap_limits_only_what_is_beyond_each_modules_worst_case() -> None:
    """Five failing modules of two cases each, cap 4: each module's worst case, no more;
    cap 7: those and the two next worst (it was two modules' both cases)."""
    cases = [SimpleNamespace(id=f"m{m}/c{c}") for c in range(2) for m in range(5)]
    groups: dict[tuple[str, str], list[Any]] = {}
    for case in cases:
        groups.setdefault((case.id.split("/")[0], "float32"), []).append(case)
    worst = {f"m{m}/c0" for m in range(5)}
    assert _expensive(cases, groups, 4) == worst  # type: ignore[arg-type]
    assert _expensive(cases, groups, 7) == worst | {"m0/c1", "m1/c1"}  # type: ignore[arg-type]
    assert _expensive(cases, groups, 0) == set()  # type: ignore[arg-type]


@pytest.mark.process
def test_every_repro_script_reproduces_in_a_subprocess(localised: tuple[RunResult, Path]
                                                       ) -> None:
    run, out = localised
    scripts = sorted((out / "artifacts").rglob("repro.py"))
    failing = {c.key.module for c in run.cases if c.outcome.value == "mismatch"}
    assert {s.parent.name for s in scripts if s.parent.name != "node"} == {
        f"{m}__float32__vec__b3__cpu" for m in failing}
    nodes = {s.parent.parent.name.split("__")[0] for s in scripts if s.parent.name == "node"}
    assert nodes == failing - {"capture_only", "fused_scale"}
    for script in scripts:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, cwd=script.parent.parent)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "out of tolerance" in done.stdout
        if script.parent.name == "node":  # eager, ONNX Runtime and the reference, one line
            assert " eager " in done.stdout and " onnxruntime " in done.stdout
            assert " reference " in done.stdout
    meta = json.loads((out / "artifacts" / "ten_blocks__float32__vec__b3__cpu" / "case.json"
                       ).read_text())
    assert meta["atol"] == 1e-5 and meta["providers"] == ["CPUExecutionProvider"]
    node = json.loads((out / "artifacts" / "called_twice__float32__vec__b3__cpu" / "node" /
                       "case.json").read_text())
    assert node["call"] == "torch.ops.aten.amax.default(A['sqrt'], [-1], True)"
    for case in run.cases:
        if case.key.module in failing:
            assert case.localisation is not None and case.localisation.repro is not None
            assert (case.localisation.node_repro is not None) == (case.key.module in nodes)


@pytest.mark.process
def test_the_summary_and_html_report_show_the_culprit_line_first(
        localised: tuple[RunResult, Path]) -> None:
    import html

    run, out = localised
    culprit = culprit_of(run, "ten_blocks")
    summary = (out / "summary.md").read_text()
    fold = summary[summary.index("<b>ten_blocks</b>"):]
    assert fold.index("**culprit: blocks.6: aten.scatter\\_reduce.two") < fold.index("| case |")
    page = html.unescape((out / "report.html").read_text())
    case = page[page.index('id="case-ten_blocks/'):]
    assert case.index(culprit.describe()) < case.index("<p>")
    assert 'class="culprit"' in case[: case.index(culprit.describe())]


@pytest.mark.process
def test_no_localise_leaves_the_cases_alone(tmp_path: Path) -> None:
    assert main(["run", str(DATA / "parity.yml"), "--out", str(tmp_path), "--quiet",
                 "--select", "capture_only", "--no-localise"]) == 1
    run = read_results(tmp_path / "results.json")[1]
    assert [c.localisation for c in run.cases] == [None]
    assert not (tmp_path / "artifacts").exists()


# --------------------------------------------------------------------------
# the blame rule itself, on graphs built by hand


def _chain(*steps: tuple[str, tuple[str, ...]]) -> layers.Graph:
    """Nodes v0, v1, ... each reading the one before, in the given scopes."""
    g = layers.Graph()
    for i, (name, scope) in enumerate(steps):
        g.nodes.append(layers.Node(name, scope, (steps[i - 1][0],) if i else ("x",),
                                   "aten.add.Tensor"))
    g.outputs = [steps[-1][0]]
    return g


def _differ(bad: set[str]) -> layers.Evaluate:
    def evaluate(names: list[str]) -> dict[str, layers.Agreement]:
        ref = {n: np.ones(4, np.float32) for n in names}
        return {n: layers.agreement(ref[n], ref[n] + (0.5 if n in bad else 0.0),
                                    cmp.Tolerance(1e-5, 1e-3)) for n in names}
    return evaluate


def test_search_blames_the_scope_whose_inputs_agree_not_the_consumer() -> None:
    g = _chain(("a", ("b0",)), ("pool", ("b1",)), ("fc", ("b1", "b1.fc")), ("c", ("b2",)))
    g.calls = {("b0",): layers.Call("b0", "Block", 1, 1), ("b1",): layers.Call("b1", "Block", 1, 1),
               ("b1", "b1.fc"): layers.Call("b1.fc", "Linear", 1, 1),
               ("b2",): layers.Call("b2", "Block", 1, 1)}
    found = layers.search(g, _differ({"pool", "fc", "c"}))
    assert found.path == [("b1",)] and found.node is not None and found.node.name == "pool"
    assert [(p.module, p.passed) for p in found.curve] == [("b0", True), ("b1", False),
                                                          ("b2", False)]


def test_search_on_a_clean_graph_names_nothing() -> None:
    g = _chain(("a", ("b0",)), ("b", ()))
    found = layers.search(g, _differ(set()))
    assert not found.diverges and found.node is None and found.path == []


def test_two_calls_of_one_module_are_told_apart() -> None:
    assert layers.Call("shared", "Centre", 2, 2).label == "shared (call 2 of 2)"
    assert layers.Call("fc", "Linear", 1, 1).label == "fc"
    assert layers.Call("", "Root", 1, 1).label == "(root)"
    g = _chain(("a", ("k",)), ("b", ()), ("c", ("k@1",)))
    found = layers.search(g, _differ({"c"}))
    assert found.path == [("k@1",)] and found.node is not None and found.node.name == "c"


@pytest.mark.process
def test_the_manifest_caps_the_checks_and_may_pass_an_artefact(tmp_path: Path) -> None:
    text = (DATA / "parity.yml").read_text() + (
        "localise: {max_cases: 0, artefacts: pass}\n")
    (tmp_path / "parity.yml").write_text(text)
    (tmp_path / "models.py").write_text((DATA / "models.py").read_text())
    assert main(["run", str(tmp_path / "parity.yml"), "--out", str(tmp_path / "out"),
                 "--quiet", "--select", "fused_scale"]) == 0
    (fused,) = read_results(tmp_path / "out" / "results.json")[1].cases
    # the artefact passes, saying why (a real defect still fails: the module-scoped run)
    assert fused.outcome.value == "pass" and fused.reason.startswith(
        "tolerance artefact, passed by the manifest (localise.artefacts: pass)")
    assert fused.localisation is not None
    layer = fused.localisation.step(Check.LAYER)
    assert layer is not None and layer.status is Status.SKIPPED  # max_cases: 0: none at all


@pytest.mark.process
@pytest.mark.parametrize("cached", [False, True])
def test_localisation_reads_the_runs_exports_instead_of_exporting_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool) -> None:
    """The gate's worker leaves a failing (module, dtype)'s exports in its scratch folder;
    the localisation job finds them under the pool's folder and neither exports nor
    translates again (the cost the issue measured: two exports per failing module). When
    the export cache held the gate's translation, the failing case was re-checked on a
    fresh one before it was reported (a failure never rests on a reused translation), so
    localisation reads the live exports then too, and the cache entry is replaced."""
    import tempfile

    import onnx

    from parity_gate.engine import module_worker
    from parity_gate.engine.cache import handed_off
    from parity_gate.localise import worker
    from parity_gate.localise.jobs import LocaliseJob

    monkeypatch.setattr(sys, "path", list(sys.path))  # the in-process worker's imports
    monkeypatch.delitem(sys.modules, "models", raising=False)  # stay in this test
    manifest = load_manifest(DATA / "parity.yml")
    (job,) = [j for j in plan(manifest, DATA / "parity.yml", ["CPUExecutionProvider"]).jobs
              if j.name == "called_twice"]
    results: list[Any] = []
    if cached:  # a first run fills the cache; the run below is served from it
        job.cache_dir = tmp_path / "cache"
        (tmp_path / "first").mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "first"))
        module_worker.run_job(job, lambda event: None)
    pool = tmp_path / "pool"
    scratch = pool / "worker-1.log.tmp"
    scratch.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    module_worker.run_job(job, results.append)
    (case,) = [r for r in results if getattr(r, "outcome", None) is not None]
    assert case.outcome.value == "mismatch"
    assert case.provenance is not None and not case.provenance.export_cached
    handed = handed_off(pool, "called_twice", "float32")
    assert handed is not None and handed.outputs == ["output0"]
    assert handed.plain is not None
    assert handed_off(pool, "called_twice", "float16") is None
    assert handed_off(pool, "clean", "float32") is None

    exports: list[Any] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        exports.append(args[-1])
        return export_module(*args, **kwargs)

    export_module = worker.export_module
    monkeypatch.setattr(worker, "export_module", counted)
    monkeypatch.setattr("torch.onnx.export", None)  # any export at all would fail
    prep = worker._prepare(LocaliseJob(job, "float32", [case], [case.id], handoff=str(pool)))
    assert exports == []
    assert prep.model == handed.model and prep.output_names == ["output0"]
    traced = prep.traced[()]  # the translation, outputs named after the program's again
    assert [o.name for o in traced.proto.graph.output] == traced.graph.outputs
    loc = worker._localise(LocaliseJob(job, "float32", [case], [case.id]), prep, case)
    assert loc.culprit is not None and loc.culprit.owner is Owner.KERNEL
    assert isinstance(handed.model, bytes)
    assert onnx.load_from_string(handed.model).graph.output[0].name == "output0"


@pytest.mark.parametrize(("shape", "axes", "undefined"), [
    ((2, 0), [1], True), ((0, 3), [1], False), ((2, 3), [1], False), ((0,), None, True)])
def test_reduce_mean_over_an_empty_set_is_undefined_by_definition(
        shape: tuple[int, ...], axes: list[int] | None, undefined: bool) -> None:
    """ReduceMean-18's doc: "Reduction over an empty set of values yields undefined": only
    a reduced axis of length 0 makes it so (reducing (0, 3) over axis 1 reduces nothing)."""
    from onnx import TensorProto, helper

    from parity_gate.compare import spec

    inputs = ["x"] + (["axes"] if axes is not None else [])
    node = helper.make_node("ReduceMean", inputs, ["y"], name="mean")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    values = {"x": np.zeros(shape, np.float32)}
    if axes is not None:
        values["axes"] = np.array(axes, np.int64)
    found = spec.undefined_at(model, values)
    assert (found is not None) is undefined, found
    if undefined:
        assert found.startswith("mean: ReduceMean over an empty set")


KNOWN_SDPA = Path(__file__).resolve().parent / "data" / "known_sdpa"


@pytest.mark.process
def test_a_culprit_cites_the_known_finding_of_its_own_trigger_and_symptom(
        tmp_path: Path) -> None:
    """One op, two known ways to fail: a fully masked attention row gives NaN in ORT with a
    float mask of -inf, and the mean of V with a bool mask of False. Each real model run
    cites the finding of its own mask and symptom (the float one cited the bool one)."""
    out = tmp_path / "out"
    assert main(["run", str(KNOWN_SDPA / "parity.yml"), "--out", str(out), "--quiet"]) == 1
    run = read_results(out / "results.json")[1]
    cited = {}
    for module in ("float_mask_row", "bool_mask_row"):
        loc = loc_of(run, module)
        assert loc.culprit is not None and \
            loc.culprit.aten == "aten.scaled_dot_product_attention.default"
        assert loc.known_op is not None, [s.note for s in loc.steps]
        cited[module] = loc.known_op.finding
    assert cited == {
        "float_mask_row": "op/sdpa.float_mask_fully_masked_row/float32/normal/cpu",
        "bool_mask_row": "op/sdpa.bool_mask_fully_masked_row/float32/normal/cpu"}


@pytest.mark.process
def test_no_known_finding_is_cited_when_trigger_or_symptom_differ() -> None:
    """The same exported nodes with the other symptom, or attention without a mask: no
    known finding covers them, so none is cited."""
    import importlib.util

    import torch

    from parity_gate.localise import known

    spec = importlib.util.spec_from_file_location("known_sdpa_models", KNOWN_SDPA / "models.py")
    assert spec is not None and spec.loader is not None
    sdpa_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sdpa_models)

    def sdpa_nodes(module: torch.nn.Module) -> list[Any]:
        program = torch.export.export(module, (torch.randn(2, 16),))
        return [n for n in program.graph.nodes if "scaled_dot_product" in str(n.target)]

    findings = known.bundled()
    float_mask = sdpa_nodes(sdpa_models.float_mask_row())
    bool_mask = sdpa_nodes(sdpa_models.bool_mask_row())
    assert known.match(float_mask, findings, symptoms={known.NON_FINITE}) is not None
    assert known.match(float_mask, findings, symptoms={known.VALUES}) is None
    assert known.match(bool_mask, findings, symptoms={known.VALUES}) is not None
    assert known.match(bool_mask, findings, symptoms={known.NON_FINITE}) is None

    class Plain(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = x.reshape(2, 2, 4, 2)
            return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    plain = sdpa_nodes(Plain())
    assert plain and known.match(plain, findings) is None


def test_a_repro_where_eager_is_nan_everywhere_reports_and_never_breaks(tmp_path: Path) -> None:
    """var over an empty token axis: eager is NaN in every element and ONNX Runtime returns
    numbers, so every difference is NaN. The model-level repro names the worst element and
    exits 1 (it raised "All-NaN slice encountered" and took the node repro with it); a
    script that raises counts as not reproducing."""
    import onnx
    from onnx import TensorProto, helper

    from parity_gate.localise import repro

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.zeros((2, 3), np.float32)
    case = repro.ReproCase("m/float32/vec/b2/cpu", 1e-5, 1e-3, ["CPUExecutionProvider"], "t")
    folder = repro.write(tmp_path / "r", case, model=model.SerializeToString(),
                         inputs={"x": x}, expected={"y": np.full_like(x, np.nan)}, got={"y": x})
    code, printed = repro.run_script(folder)
    assert code == 1 and "6/6 out of tolerance" in printed, printed
    (folder / "repro.py").write_text("raise ValueError('broken')\n")
    assert repro.run_script(folder) == (3, "the repro script raised ValueError: broken\n")
    assert onnx.load(str(folder / "model.onnx")).graph.node[0].op_type == "Identity"
