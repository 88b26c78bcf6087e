"""Every hazard rule on its test pair (a module that triggers it, a fixed twin that does not),
exported for real; and the bundled example's modules, on which no rule may fire.

The checks are called directly on the export's artifacts, as the module worker calls
them. Each module is exported once per test session (module-scoped cache).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parity_gate.hazards.config import HazardSettings
from parity_gate.hazards.context import HazardContext
from parity_gate.hazards.rules import BY_ID, RULES
from parity_gate.hazards.run import check_failure, merge, run_checks
from parity_gate.manifest.models import InputSpec
from parity_gate.model.hazards import Action, Hazard, Severity

pytestmark = [pytest.mark.process,
              pytest.mark.filterwarnings("ignore:argument `scale` is deprecated")]

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hazard_pairs",
                                               ROOT / "tests" / "data" / "hazards" / "pairs.py")
assert _spec is not None and _spec.loader is not None
pairs: Any = sys.modules.get("hazard_pairs")
if pairs is None:
    pairs = importlib.util.module_from_spec(_spec)
    sys.modules["hazard_pairs"] = pairs  # eager-mismatch reads the classes' source by module
    _spec.loader.exec_module(pairs)
PAIRS_PY = str(ROOT / "tests" / "data" / "hazards" / "pairs.py")


@pytest.fixture(scope="module")
def exported() -> Callable[[str], HazardContext]:
    cache: dict[str, HazardContext] = {}

    def get(name: str) -> HazardContext:
        if name not in cache:
            cache[name] = pairs.export(name, pairs.PAIRS[name])
        return cache[name]

    return get


def _hazards(ctx: HazardContext, settings: HazardSettings | None = None) -> list[Hazard]:
    return check_failure(ctx, settings) if ctx.error else run_checks(ctx, settings)


def _line(text: str) -> int:
    """The line of `text` in the pairs file (so the test follows edits there)."""
    lines = Path(PAIRS_PY).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_fires_on_its_trigger_and_not_on_the_fixed_twin(
        rule: Any, exported: Callable[[str], HazardContext]) -> None:
    trigger, fixed = (exported(n) for n in rule.pair)
    hit = [h for h in _hazards(trigger) if h.rule == rule.id]
    assert any(h.severity is rule.severity for h in hit), _hazards(trigger)
    assert all(h.fix == rule.fix and h.action is rule.action and h.module == rule.pair[0]
               for h in hit)
    clean = _hazards(fixed)
    assert not clean, [h.describe() for h in clean]  # the twin fires no rule at all
    assert not any("could not run" in h.message for h in _hazards(trigger))


def test_training_mode_names_the_mode_dependent_submodules(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("TrainingModeNet")) if h.rule == "training-mode"]
    assert [s.module for s in h.sites] == ["bn", "drop"]
    assert "BatchNorm2d" in h.message and "Dropout" in h.message


def test_baked_dim_names_the_reshape_and_the_literal(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("BakedBatch")) if h.rule == "baked-dim"]
    assert h.sites[0].node == "/Reshape" and "literal size 4" in h.message
    assert "'batch'" in h.message


def test_python_control_flow_points_at_the_branch(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("PythonBranch")) if h.rule == "python-control-flow"]
    assert h.sites[0].source == f"{PAIRS_PY}:{_line('if x.sum() > 0:')}"
    assert "Python boolean" in h.message


def test_python_control_flow_from_torch_export_guards(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("ShapeBranch")) if h.rule == "python-control-flow"]
    assert "[4, ∞)" in h.message and "batch 1 " in h.message


def test_python_control_flow_on_a_failed_export(exported: Any) -> None:
    ctx = exported("ItemBranch")
    assert ctx.error
    (h,) = [h for h in check_failure(ctx) if h.rule == "python-control-flow"]
    assert h.sites[0].source.endswith(f"pairs.py:{_line('if x.sum().item() > 0:')}")


def test_in_place_input_from_eager_and_from_the_exporter(exported: Any) -> None:
    found = [h for h in _hazards(exported("InPlaceInput")) if h.rule == "in-place"]
    messages = " | ".join(h.message for h in found)
    assert "input 'x' in place (aten.mul_)" in messages
    assert "dropped the in-place aten::mul_" in messages


def test_in_place_state_update_from_the_exported_program(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("CallCounter")) if h.rule == "in-place"]
    assert "'calls'" in h.message and "loses the update" in h.message


def test_constants_in_forward_counts_and_sizes(exported: Any) -> None:
    for name in ("ConstantsInForward", "ConstantsInForwardLegacy"):
        (h,) = [h for h in _hazards(exported(name)) if h.rule == "constants-in-forward"]
        assert "2 tensor(s), 24 bytes" in h.message, name
    (h,) = [h for h in _hazards(exported("ConstantsInForward"))
            if h.rule == "constants-in-forward"]
    assert {s.source for s in h.sites} == {
        f"{PAIRS_PY}:{_line('mean = torch.tensor([0.485')}",
        f"{PAIRS_PY}:{_line('std = torch.tensor([0.229')}"}


def test_random_draw_in_forward_is_an_error(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("NoisyForward")) if h.rule == "constants-in-forward"]
    assert h.severity is Severity.ERROR and "RandomNormalLike" in h.message


def test_opset_too_new_cites_the_table(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("OpsetTarget")) if h.rule == "opset-too-new"]
    assert "opset 17 > 15" in h.message and "onnxruntime.ai/docs/reference" in h.message
    assert h.blocks  # default action: fail


def test_precision_cast_names_the_program_op_and_widths(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("NarrowGelu")) if h.rule == "precision-cast"]
    assert "gelu returns float32" in h.message and "float16" in h.message
    assert any(s.node.startswith("node_Erf") for s in h.sites)


def test_unsupported_op_names_the_op_and_a_way_out(exported: Any) -> None:
    ctx = exported("UnsupportedOp")
    (h,) = [h for h in check_failure(ctx) if h.rule == "unsupported-op"]
    assert "parityhazards.square.default" in h.message
    assert "custom_translation_table" in h.message


def test_unsupported_op_legacy_exporter_suggests_the_opset() -> None:
    ctx = HazardContext("m", "torchscript", [InputSpec(name="x")], error=(
        "UnsupportedOperatorError: Exporting the operator 'aten::col2im' to ONNX opset "
        "version 17 is not supported."))
    (h,) = check_failure(ctx)
    assert "from opset 18 (export.opset: 18)" in h.message


def test_exporter_warnings_keep_the_source_line(exported: Any) -> None:
    (h,) = [h for h in _hazards(exported("WarningNet")) if h.rule == "exporter-warnings"]
    assert "deprecated" in h.message
    assert h.sites[0].source == f"{PAIRS_PY}:{_line('warnings.warn(')}"


def test_eager_mismatch_by_design_names_the_line(exported: Any) -> None:
    found = [h for h in _hazards(exported("ExportBranch"))
             if h.rule == "eager-mismatch-by-design"]
    line = _line("if torch.onnx.is_in_onnx_export()")
    assert {s.source for h in found for s in h.sites} == {f"{PAIRS_PY}:{line}"}
    assert {"torch.onnx.is_in_onnx_export()", "torch.jit.is_tracing()"} <= {
        m for h in found for m in ("torch.onnx.is_in_onnx_export()", "torch.jit.is_tracing()")
        if m in h.message}


def test_export_probe_table_matches_what_the_exporters_do() -> None:
    from parity_gate.hazards.checks import KNOWN_PROBES, PROBES

    for exporter in ("dynamo", "torchscript"):
        pairs.export("probe", pairs.Case(lambda e=exporter: pairs.ProbeFlags(e), [(4, 8)],
                                         exporter))
        assert {k for k, v in pairs.PROBED[exporter].items() if v} == PROBES[exporter]
        assert set(pairs.PROBED[exporter]) == KNOWN_PROBES  # every probe, each false in eager


def test_a_probe_the_exporter_does_not_set_is_not_a_finding() -> None:
    from parity_gate.hazards.checks import eager_mismatch_by_design

    module = pairs.TracingOnlyBranch().eval()
    for exporter, expected in (("dynamo", 0), ("torchscript", 1)):
        ctx = HazardContext("m", exporter, [InputSpec(name="x")], module=module)
        assert len(eager_mismatch_by_design(ctx)) == expected, exporter


def _onnx_off_eager(ctx: HazardContext) -> float:
    """How far the exported ONNX (on ONNX Runtime) is from eager on the export example."""
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(ctx.model, providers=["CPUExecutionProvider"])
    x = ctx.example[0]
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        want = ctx.module(x).numpy()
    return float(abs(got - want).max())


def _by_design(ctx: HazardContext) -> list[Hazard]:
    return [h for h in _hazards(ctx) if h.rule == "eager-mismatch-by-design"]


@pytest.mark.parametrize("name", ["ExportFlagOff", "ExportNoOp"])
def test_eager_mismatch_is_not_claimed_when_the_program_is_eagers(
        name: str, exported: Any) -> None:
    """Issue 48: a probe whose export-only side the capture did not take (a switched-off
    flag), or that computes nothing, was reported as "runs the branch eager does not"
    while the export matches eager exactly."""
    ctx = exported(name)
    assert _onnx_off_eager(ctx) <= 1e-6  # the export is eager's computation (ORT's GELU)
    assert not _by_design(ctx)


@pytest.mark.parametrize(("name", "said", "line"), [
    ("ExportBranchDynamo", "holds the operations of line {n}, which eager does not run",
     "return torch.clamp(x, 0, 6)"),
    ("ExportSkipsEager", "holds no operation of line {n}, which eager runs",
     "return self.lin(h)"),
    ("ExportScale", "runs line {n}, which eager does not: no operation, but it sets "
     "scale = 2.0", "scale = 2.0"),
])
def test_eager_mismatch_names_what_the_captured_program_took(
        name: str, said: str, line: str, exported: Any) -> None:
    ctx = exported(name)
    assert _onnx_off_eager(ctx) > 1e-2  # the export really computes something else
    (h,) = _by_design(ctx)
    assert h.severity is Severity.WARNING
    n = next(i for i, text in enumerate(Path(PAIRS_PY).read_text().splitlines(), 1)
             if text.strip() == line and i > _line(f"class {name.removesuffix('Dynamo')}("))
    assert said.format(n=n) in h.message, h.message


def test_eager_mismatch_in_a_helper_method_is_decided_by_the_code(exported: Any) -> None:
    """torch.export records only `forward` frames' lines: a branch in a helper method is
    reported when the probe alone flips it (as before issue 48), not dropped."""
    ctx = exported("ExportHelperBranch")
    assert _onnx_off_eager(ctx) > 1e-2
    (h,) = _by_design(ctx)
    assert h.severity is Severity.WARNING
    assert "records the lines of `forward` methods only" in h.message


def test_eager_mismatch_fires_on_the_faulty_export_only_approximation() -> None:
    """tests/data/faulty's module takes a tanh-GELU under torch.onnx.is_in_onnx_export():
    the program holds that side's operations, and the ONNX really differs from eager."""
    path = ROOT / "tests" / "data" / "faulty" / "models.py"
    spec = importlib.util.spec_from_file_location("faulty_models_hazards", path)
    assert spec is not None and spec.loader is not None
    faulty = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = faulty  # the check reads the class's source by its module
    spec.loader.exec_module(faulty)
    ctx = pairs.export("approximated", pairs.Case(_eval_of(faulty.ExportOnlyApproximation),
                                                  [(4, 8)]))
    assert _onnx_off_eager(ctx) > 1e-5
    (h,) = _by_design(ctx)
    lines = path.read_text().splitlines()
    tanh = next(i for i, text in enumerate(lines, 1) if 'approximate="tanh"' in text)
    assert f"holds the operations of line {tanh}, which eager does not run" in h.message
    assert h.sites[0].source.endswith(
        f"models.py:{next(i for i, t in enumerate(lines, 1) if 'is_in_onnx_export():' in t)}")


def _eval_of(cls: Any) -> Callable[[], Any]:
    return lambda: cls().eval()


def test_dynamic_dim_specialised_from_the_program_and_from_strict_export(
        exported: Any) -> None:
    import torch

    (h,) = [h for h in _hazards(exported("SpecialisedDim"))
            if h.rule == "dynamic-dim-specialised"]
    assert "fixed it to 4" in h.message and h.sites[0].node == "x"
    module = pairs.SpecialisedDim().eval()
    with pytest.raises(Exception) as info:  # torch.export itself refuses
        torch.export.export(module, (torch.randn(4, 8),),
                            dynamic_shapes=({0: torch.export.Dim("batch")},))
    ctx = HazardContext("m", "dynamo", [InputSpec(name="x")], error=str(info.value))
    (h,) = [h for h in check_failure(ctx) if h.rule == "dynamic-dim-specialised"]
    assert "batch" in h.message and "constant 4" in h.message


def test_manifest_settings_promote_and_silence(exported: Any) -> None:
    ctx = exported("BakedBatch")
    settings = HazardSettings.model_validate({
        "baked-dim": "fail",
        "python-control-flow": {"action": "off", "reason": "len() is the point of the test"}})
    found = run_checks(ctx, settings)
    assert {h.rule for h in found} == {"baked-dim"}
    assert all(h.blocks for h in found)


def test_merge_folds_the_same_finding_over_dtypes(exported: Any) -> None:
    ctx = exported("InPlaceInput")
    twice = run_checks(ctx) + [Hazard.from_dict({**h.to_dict(), "dtypes": ["float16"]})
                               for h in run_checks(ctx)]
    merged = merge(twice)
    assert len(merged) == len(run_checks(ctx))
    assert all(h.dtypes == ["float32", "float16"] for h in merged)


# --------------------------------------------------------------------------- bundled example


def _example_contexts() -> list[HazardContext]:
    """The bundled manifest's modules, exported as it asks (dynamo; mlp also in float16)."""
    import torch

    sys.path.insert(0, str(ROOT / "parity_gate" / "example"))
    from models import cnn, mlp, transformer

    seq = [InputSpec(name="x", dynamic={0: "batch", 1: "seq"}),
           InputSpec(name="pad", dynamic={0: "batch", 1: "seq"})]
    cases = [
        ("cnn", cnn.build, [InputSpec(name="x")], [(4, 3, 32, 32)], torch.float32),
        ("encoder", transformer.build, seq, [(4, 12, 32), (4, 12)], torch.float32),
        ("mlp", mlp.build, [InputSpec(name="x")], [(4, 16)], torch.float32),
        ("mlp", mlp.build, [InputSpec(name="x")], [(4, 16)], torch.float16),
    ]
    out = []
    for name, build, inputs, shapes, dtype in cases:
        case = pairs.Case(build, shapes, inputs=inputs)
        example = [torch.randn(*shapes[0]).to(dtype)]
        if len(shapes) > 1:
            example.append(torch.rand(*shapes[1]) < 0.2)
        torch.manual_seed(0)
        module = build().to(dtype)
        out.append(pairs.export(name, case, module=module, example=example))
    return out


def test_no_rule_fires_on_the_bundled_example() -> None:
    contexts = _example_contexts()
    assert all(not ctx.error for ctx in contexts), [c.error[:200] for c in contexts]
    found = [h.describe() for ctx in contexts for h in run_checks(
        ctx, HazardSettings.model_validate({}))]
    assert found == []
    # and with a target runtime the example meets (IR 10, opset 20: onnxruntime 1.18 runs
    # IR 10 but only opset 21 and lower)
    for ctx in contexts:
        ctx.target_runtime = "onnxruntime>=1.18"
    assert [h.describe() for ctx in contexts for h in run_checks(ctx)] == []
    for ctx in contexts:
        ctx.target_runtime = "onnxruntime>=1.16"
    assert {h.rule for ctx in contexts for h in run_checks(ctx)} == {"opset-too-new"}
    assert BY_ID["opset-too-new"].action is Action.FAIL


def test_unchecked_size_assumption_says_what_the_program_assumed(exported: Any) -> None:
    """AdaptiveAvgPool2d(4) at 8x8 with dynamic h, w: the decomposition assumed the export
    size; the ONNX graph is an AveragePool with window 2 that nothing guards."""
    (h,) = [h for h in _hazards(exported("AdaptivePool"))
            if h.rule == "unchecked-size-assumption"]
    assert "h % 4 == 0" in h.message and "h // 4 == 2" in h.message
    assert "w // 4 == 2" in h.message and "silently wrong values" in h.message
