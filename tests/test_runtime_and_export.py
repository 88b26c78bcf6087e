"""Provider selection and skip logic (tested on CPU), and error classification."""

from __future__ import annotations

from pathlib import Path

import pytest

from parity_gate.engine.exporting import classify_export_error
from parity_gate.engine.runtime import (
    available_providers,
    classify_load_error,
    classify_run_error,
    create_session,
)
from parity_gate.manifest.load import load_manifest
from parity_gate.model.keys import matches_any
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseKey
from parity_gate.plan.cases import missing_required_providers, plan
from parity_gate.plan.providers import availability, provider_chain

EXAMPLE = Path(__file__).resolve().parent.parent / "parity_gate" / "example" / "parity.yml"
CPU_ONLY = ["CPUExecutionProvider"]
GPU_BOX = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def test_availability_follows_onnxruntime_report() -> None:
    assert availability("cpu", CPU_ONLY).available
    cuda = availability("cuda", CPU_ONLY)
    assert not cuda.available and "onnxruntime-gpu" in cuda.reason
    assert availability("cuda", GPU_BOX).available
    assert availability("tensorrt", GPU_BOX).available


def test_provider_chains_keep_tf32_off_and_fall_back_in_order() -> None:
    assert provider_chain("cpu", {}) == [("CPUExecutionProvider", {})]
    cuda = provider_chain("cuda", {"device_id": 1})
    assert cuda[0] == ("CUDAExecutionProvider", {"use_tf32": 0, "device_id": 1})
    assert cuda[1] == "CPUExecutionProvider"
    trt = provider_chain("tensorrt", {"trt_fp16_enable": False})
    assert [p if isinstance(p, str) else p[0] for p in trt] == GPU_BOX


def test_plan_skips_unavailable_providers_with_reason() -> None:
    manifest = load_manifest(EXAMPLE)
    cpu_plan = plan(manifest, EXAMPLE, CPU_ONLY)
    assert all(c.key.provider == "cuda" for c in cpu_plan.skipped)
    assert all("CUDAExecutionProvider not available" in c.reason for c in cpu_plan.skipped)
    assert all(k.provider == "cpu" for j in cpu_plan.jobs for k in j.cases)
    gpu_plan = plan(manifest, EXAMPLE, GPU_BOX)
    assert not gpu_plan.skipped
    assert {k.provider for j in gpu_plan.jobs for k in j.cases} == {"cpu", "cuda"}
    assert cpu_plan.total == gpu_plan.total


def test_required_provider_detection() -> None:
    manifest = load_manifest(EXAMPLE)
    assert missing_required_providers(manifest, CPU_ONLY) == []
    required = manifest.model_copy(update={"providers": {
        **manifest.providers,
        "cuda": manifest.providers["cuda"].model_copy(update={"required": True})}})
    assert missing_required_providers(required, CPU_ONLY) == ["cuda"]
    assert missing_required_providers(required, GPU_BOX) == []


def test_select_globs() -> None:
    key = CaseKey("mlp", "float16", "tabular", 4, "cpu")
    assert matches_any(key.id, ["mlp"]) and matches_any(key.id, ["mlp/float16/*"])
    assert matches_any(key.id, ["*/b4/cpu"]) and not matches_any(key.id, ["cnn"])
    assert matches_any(key.id, ["mlp/**"]) and matches_any(key.id, ["**/b4/cpu"])
    assert not matches_any(key.id, ["ml"]) and not matches_any(key.id, ["mlp/float16/b4"])
    assert CaseKey("op/atan2", "float16", "specials", None, "cpu").id == \
        "op/atan2/float16/specials/cpu"


@pytest.mark.process
def test_real_cuda_request_on_cpu_machine_is_not_silently_cpu() -> None:
    if "CUDAExecutionProvider" in available_providers():
        pytest.skip("machine has CUDA")
    import onnx
    from onnx import helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Exception, match="CUDAExecutionProvider"):
        create_session(model.SerializeToString(), "cuda", {})


@pytest.mark.parametrize(("message", "outcome", "reason"), [
    ("ConversionError: ... DispatchError'>: No ONNX function found for "
     "<OpOverload(op='aten.linalg_inv', overload='default')>", Outcome.UNSUPPORTED_OP,
     "aten.linalg_inv"),
    ("UnsupportedOperatorError: Exporting the operator 'aten::digamma' to ONNX opset "
     "version 20 is not supported", Outcome.UNSUPPORTED_OP, "aten::digamma"),
    ("TorchExportError: Failed to export the model with torch.export. \x1b[96mThis is step "
     "1/3\x1b[0m", Outcome.EXPORT_ERROR, "TorchExportError"),
])
def test_export_error_classification(message: str, outcome: Outcome, reason: str) -> None:
    got, text = classify_export_error(message)
    assert got is outcome and reason in text and "\x1b" not in text


def test_runtime_error_classification() -> None:
    load = "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Gemm"
    assert classify_load_error(load) is Outcome.NO_KERNEL
    assert classify_load_error("[ONNXRuntimeError] : 10 : INVALID_GRAPH") is \
        Outcome.INVALID_MODEL
    dims = "INVALID_ARGUMENT : Got invalid dimensions for input: x"
    assert classify_run_error(dims, 7, 2) is Outcome.BAKED_SHAPE
    assert classify_run_error(dims, 2, 2) is Outcome.RUNTIME_ERROR


@pytest.mark.process
def test_real_unsupported_op_is_classified() -> None:
    import torch

    from parity_gate.engine.exporting import ExportFailure, export_module
    from parity_gate.manifest.models import ExportSettings, InputSpec

    class Inv(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.inv(x)

    with pytest.raises(ExportFailure) as info:
        export_module(Inv().eval(), [torch.eye(3).expand(2, 3, 3).contiguous()],
                      [InputSpec(name="x")], ["y"], ExportSettings())
    assert info.value.outcome is Outcome.UNSUPPORTED_OP
    assert "linalg_inv" in info.value.reason


@pytest.mark.process
def test_a_warning_is_placed_at_the_models_line_not_in_contextlib() -> None:
    """A warning raised from a generator context manager is filed by Python at
    contextlib.py (its __exit__ resumes the generator); the finding must name the model's
    own line, where the user can act."""
    import contextlib
    import inspect
    import warnings

    import torch

    from parity_gate.engine.exporting import export_module
    from parity_gate.manifest.models import ExportSettings, InputSpec

    @contextlib.contextmanager
    def legacy_scale() -> object:
        yield
        warnings.warn("legacy_scale is deprecated; pass `factor`", UserWarning, stacklevel=2)

    class Scaled(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with legacy_scale():
                y = x * 3
            return y

    exported = export_module(Scaled().eval(), [torch.ones(2, 3)], [InputSpec(name="x")], ["y"],
                             ExportSettings())
    (found,) = [w for w in exported.raw_warnings if "legacy_scale" in w.message]
    assert found.filename == __file__, found.source
    # the innermost line of the model's own code: the helper's warn call
    lines, first = inspect.getsourcelines(legacy_scale)
    assert "warnings.warn" in lines[found.lineno - first]


@pytest.mark.process
def test_a_guard_on_a_data_dependent_size_gets_the_hints_that_work() -> None:
    """A count that depends on the data (a detector's boxes after a score filter) used in
    a Python `if`: torch.export cannot capture it; the cause names it, and the hints say
    what works (torch.cond, bounding the size with torch._check, the legacy exporter)."""
    import torch

    from parity_gate.engine.exporting import ExportFailure, export_module
    from parity_gate.manifest.models import ExportSettings, InputSpec

    class Keep(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            keep = torch.nonzero(x[:, 0] > 0).flatten()
            return x[keep] * 2 if keep.shape[0] > 2 else x[keep]

    with pytest.raises(ExportFailure) as failure:
        export_module(Keep(), {"x": torch.randn(6, 4)}, [InputSpec(name="x")], ["y"],
                      ExportSettings())
    cause = failure.value.cause
    assert cause is not None and cause.kind == "GuardOnDataDependentSymNode"
    hints = " | ".join(cause.hints)
    assert "torch.cond" in hints and "torch._check_is_size(n)" in hints
    assert "exporter: torchscript" in hints
