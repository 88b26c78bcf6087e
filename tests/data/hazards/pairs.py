"""Test pairs of the hazard rules: for each rule a module that triggers it and a fixed twin.

The classic examples of `export-pitfalls.txt` and `debugging-export-mismatches.txt`,
built in code with seeded random weights. `PAIRS` maps each name a rule's `pair`
field uses to a `Case` (module, inputs, how it is exported); `export(case)` exports
it the way the module worker does and returns the `HazardContext` the checks read.
"""

from __future__ import annotations

import io
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from parity_gate.hazards.context import (
    HazardContext,
    exporter_warnings,
    tf32_switches,
    training_modules,
)
from parity_gate.manifest.models import InputSpec

# --------------------------------------------------------------------------- modules


class TrainingModeNet(nn.Module):
    """Conv, batch norm, dropout: returned in training mode by its factory."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.bn(self.conv(x)))).mean((2, 3))


class BakedBatch(nn.Module):
    """`len(x)` is a Python int to the tracer: the Reshape gets the export batch literally."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(48, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.reshape(len(x), -1))


class BakedBatchFixed(BakedBatch):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(x, start_dim=1))


class PythonBranch(nn.Module):
    """`if` on a tensor value: the trace keeps the branch the example took."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return -x


class PythonBranchFixed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x.sum() > 0, x * 2, -x)


class ShapeBranch(nn.Module):
    """A branch on the batch size: torch.export guards the size to the example's side."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 3:
            return x * 2
        return x


class ItemBranch(nn.Module):
    """`.item()` in a branch: torch.export refuses to guess the value."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum().item() > 0:
            return x * 2
        return x


class InPlaceInput(nn.Module):
    """Writes its input in place (the caller's tensor changes in eager, not in ONNX)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return self.fc(x)


class InPlaceInputFixed(InPlaceInput):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x * 2)
        out += 1  # in place on an intermediate: harmless, not a finding
        return out.relu_()


class CallCounter(nn.Module):
    """Updates a buffer in forward: the export bakes the value it had then."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x * self.calls


class ConstantsInForward(nn.Module):
    """Normalisation constants built in forward (pitfall 6)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        return (x - mean) / std


class ConstantsInForwardFixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class NoisyForward(nn.Module):
    """A random draw in forward: the exported model is nondeterministic."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.01 * torch.randn_like(x)


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.fc(x))


def tf32_factory() -> nn.Module:
    """A factory that turns TF32 on, as training scripts do for speed: the eager reference
    on CUDA then computes its matmuls in TF32."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return SmallNet().eval()


class ExportBranch(nn.Module):
    """Forward asks whether it is being exported and computes something else then."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export() or torch.jit.is_tracing():
            return torch.clamp(x, 0, 6)
        return F.gelu(x)


class TracingOnlyBranch(nn.Module):
    """torch.jit.is_tracing() is false under the dynamo exporter: a branch only there."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_tracing():
            return torch.clamp(x, 0, 6)
        return F.gelu(x)


class ExportBranchFixed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


class ExportFlagOff(nn.Module):
    """An export-only path switched off by configuration: the capture takes eager's side, so
    the program is eager's computation (issue 48: reported as "runs the branch eager does
    not")."""

    def __init__(self) -> None:
        super().__init__()
        self.fast = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting() and self.fast:
            return torch.clamp(x, 0, 6)
        return F.gelu(x)


class ExportNoOp(nn.Module):
    """The export-only side computes nothing: `contiguous()` of a contiguous input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            x = x.contiguous()
        return F.gelu(x)


class ExportSkipsEager(nn.Module):
    """The export returns early: the program lacks the operations eager runs."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * 2
        exporting = torch.compiler.is_exporting()
        if exporting:
            return h
        return self.lin(h)


class ExportHelperBranch(nn.Module):
    """The branch in a helper method: torch.export records the lines of `forward` frames
    only, so the program cannot show the side; the probe alone flips it, so it is said."""

    def _act(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            return torch.clamp(x, 0, 6)
        return F.gelu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._act(x)


class ExportScale(nn.Module):
    """The export-only side sets a Python number: no operation of its own, but the
    multiplication after it reads it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():  # noqa: SIM108 (a side of its own lines)
            scale = 2.0
        else:
            scale = 1.0
        return x * scale


PROBED: dict[str, dict[str, bool]] = {}


class ProbeFlags(nn.Module):
    """Records what each export probe returns while an exporter traces forward."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        PROBED[self.tag] = {
            "is_in_onnx_export": torch.onnx.is_in_onnx_export(),
            "is_tracing": torch.jit.is_tracing(), "is_scripting": torch.jit.is_scripting(),
            "is_exporting": torch.compiler.is_exporting(),
            "is_compiling": torch.compiler.is_compiling(),
            "is_dynamo_compiling": torch.compiler.is_dynamo_compiling()}
        return x + 1


class WarningNet(nn.Module):
    """Warns while it is traced (a deprecation in the user's own code, say)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        warnings.warn("argument `scale` is deprecated; pass `factor`", UserWarning,
                      stacklevel=1)
        return x * 3


class WarningNetFixed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


class SpecialisedDim(nn.Module):
    """A literal reshape that ties the batch to the example's (4 rows x 8 features)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.reshape(4, -1))


class SpecialisedDimFixed(SpecialisedDim):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.reshape(x.shape[0], -1))


class AdaptivePool(nn.Module):
    """`AdaptiveAvgPool2d(4)` with dynamic height and width (a VGG-style head): exported as
    an AveragePool whose window is the export size's (8x8 → window 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x).flatten(1)


class AdaptivePoolGlobal(AdaptivePool):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)  # a ReduceMean: right at every size


SPATIAL = [InputSpec(name="x", dynamic={0: "batch", 2: "h", 3: "w"})]


@torch.library.custom_op("parityhazards::square", mutates_args=())
def square(x: torch.Tensor) -> torch.Tensor:
    """A custom op: no exporter has a translation for it."""
    return x * x


@square.register_fake
def _square_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UnsupportedOp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return square(x) + 1


class UnsupportedOpFixed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x + 1


def _narrow_gelu() -> dict[str, Any]:
    """A translation of aten.gelu that computes in float16 inside a float32 program: the
    defect precision-cast exists to catch (CPU numbers stay close; others need not)."""
    from onnxscript import FLOAT, FLOAT16
    from onnxscript import opset18 as op

    def gelu_fp16(x, approximate="none"):  # type: ignore[no-untyped-def]  # onnxscript reads no string annotations
        half = op.Cast(x, to=FLOAT16.dtype)
        y = op.Mul(op.Mul(half, op.CastLike(0.5, half)),
                   op.Add(op.CastLike(1.0, half),
                          op.Erf(op.Div(half, op.CastLike(1.4142135, half)))))
        return op.Cast(y, to=FLOAT.dtype)

    return {"custom_translation_table": {torch.ops.aten.gelu.default: gelu_fp16}}


# --------------------------------------------------------------------------- cases

X = [InputSpec(name="x")]


@dataclass
class Case:
    """A module and how it is exported (export batch: the first shape's dim 0). `build`
    returns the module as a factory would; `export` puts it in eval mode after noting
    whether it was training."""

    build: Callable[[], nn.Module]
    shapes: list[tuple[int, ...]]
    exporter: str = "dynamo"
    inputs: list[InputSpec] = field(default_factory=lambda: list(X))
    target_runtime: str | None = None
    options: Callable[[], dict[str, Any]] = dict
    batch_sizes: tuple[int, ...] = (1, 4, 7)
    opset: int | None = None
    reference_device: str = "cpu"  # what the manifest says (the export itself runs here)


def _eval(cls: type[nn.Module]) -> Callable[[], nn.Module]:
    return lambda: cls().eval()


PAIRS: dict[str, Case] = {
    "TrainingModeNet": Case(TrainingModeNet, [(4, 3, 8, 8)], "torchscript"),
    "TrainingModeNetFixed": Case(lambda: TrainingModeNet().eval(), [(4, 3, 8, 8)],
                                 "torchscript"),
    "BakedBatch": Case(_eval(BakedBatch), [(4, 3, 4, 4)], "torchscript"),
    "BakedBatchFixed": Case(_eval(BakedBatchFixed), [(4, 3, 4, 4)], "torchscript"),
    "PythonBranch": Case(_eval(PythonBranch), [(4, 8)], "torchscript"),
    "PythonBranchFixed": Case(_eval(PythonBranchFixed), [(4, 8)], "torchscript"),
    "ShapeBranch": Case(_eval(ShapeBranch), [(4, 8)]),
    "ItemBranch": Case(_eval(ItemBranch), [(4, 8)]),
    "InPlaceInput": Case(_eval(InPlaceInput), [(4, 8)], "torchscript"),
    "InPlaceInputFixed": Case(_eval(InPlaceInputFixed), [(4, 8)], "torchscript"),
    "CallCounter": Case(_eval(CallCounter), [(4, 8)]),
    "ConstantsInForward": Case(_eval(ConstantsInForward), [(4, 3, 8, 8)]),
    "ConstantsInForwardFixed": Case(_eval(ConstantsInForwardFixed), [(4, 3, 8, 8)]),
    "ConstantsInForwardLegacy": Case(_eval(ConstantsInForward), [(4, 3, 8, 8)], "torchscript"),
    "NoisyForward": Case(_eval(NoisyForward), [(4, 8)], "torchscript"),
    "OpsetTarget": Case(_eval(SmallNet), [(4, 8)], "torchscript", target_runtime="onnxruntime>=1.9",
                        opset=17),
    "OpsetTargetFixed": Case(_eval(SmallNet), [(4, 8)], "torchscript",
                             target_runtime="onnxruntime>=1.14", opset=17),
    "OpsetIgnored": Case(_eval(SmallNet), [(4, 8)], opset=7),
    "OpsetIgnoredFixed": Case(_eval(SmallNet), [(4, 8)], opset=18),
    "NarrowGelu": Case(_eval(SmallNet), [(4, 8)], options=_narrow_gelu),
    "NarrowGeluFixed": Case(_eval(SmallNet), [(4, 8)]),
    "UnsupportedOp": Case(_eval(UnsupportedOp), [(4, 8)]),
    "UnsupportedOpFixed": Case(_eval(UnsupportedOpFixed), [(4, 8)]),
    "WarningNet": Case(_eval(WarningNet), [(4, 8)], "torchscript"),
    "WarningNetFixed": Case(_eval(WarningNetFixed), [(4, 8)], "torchscript"),
    "ExportBranch": Case(_eval(ExportBranch), [(4, 8)], "torchscript"),
    "ExportBranchFixed": Case(_eval(ExportBranchFixed), [(4, 8)], "torchscript"),
    "ExportBranchDynamo": Case(_eval(ExportBranch), [(4, 8)]),
    "ExportFlagOff": Case(_eval(ExportFlagOff), [(4, 8)]),
    "ExportNoOp": Case(_eval(ExportNoOp), [(4, 8)]),
    "ExportSkipsEager": Case(_eval(ExportSkipsEager), [(4, 8)]),
    "ExportScale": Case(_eval(ExportScale), [(4, 8)]),
    "ExportHelperBranch": Case(_eval(ExportHelperBranch), [(4, 8)]),
    "SpecialisedDim": Case(_eval(SpecialisedDim), [(4, 8)]),
    "AdaptivePool": Case(_eval(AdaptivePool), [(4, 3, 8, 8)], inputs=SPATIAL),
    "AdaptivePoolGlobal": Case(_eval(AdaptivePoolGlobal), [(4, 3, 8, 8)], inputs=SPATIAL),
    "SpecialisedDimFixed": Case(_eval(SpecialisedDimFixed), [(4, 8)]),
    "TF32Reference": Case(tf32_factory, [(4, 8)], reference_device="cuda"),
    "TF32ReferenceFixed": Case(_eval(SmallNet), [(4, 8)], reference_device="cuda"),
}


def export(name: str, case: Case, module: nn.Module | None = None,
           example: list[torch.Tensor] | None = None) -> HazardContext:
    """Build, note the training state, .eval(), export once; what the worker hands the checks."""
    torch.manual_seed(0)
    switches = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # as the gate
    try:
        module = module if module is not None else case.build()
        tf32 = tf32_switches()  # what the factory left on, read as the worker reads it
    finally:  # the factory's switches stay with its case, not the test process
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = switches
    training = training_modules(module)
    module.eval()
    example = example if example is not None else [torch.randn(*s) for s in case.shapes]
    options = case.options()
    names = [i.name for i in case.inputs]
    model, program, error = b"", None, ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if case.exporter == "dynamo":
                symbols: dict[str, Any] = {}
                shapes = tuple({d: symbols.setdefault(s, torch.export.Dim(s))
                                for d, s in spec.dynamic.items()} or None
                               for spec in case.inputs)
                onnx_program = torch.onnx.export(
                    module, tuple(example), dynamo=True, input_names=names,
                    dynamic_shapes=shapes, optimize=True, verbose=False,
                    **({"opset_version": case.opset} if case.opset else {}), **options)
                assert onnx_program is not None
                model = onnx_program.model_proto.SerializeToString()
                program = onnx_program.exported_program
            else:
                buffer = io.BytesIO()
                axes = {spec.name: dict(spec.dynamic) for spec in case.inputs}
                torch.onnx.export(module, tuple(example), buffer, dynamo=False,
                                  input_names=names, output_names=["out"],
                                  dynamic_axes={**axes, "out": {0: "batch"}},
                                  **({"opset_version": case.opset} if case.opset else {}),
                                  **options)
                model = buffer.getvalue()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-4000:]}"
    return HazardContext(
        module_name=name, exporter=case.exporter, inputs=case.inputs, example=example,
        export_batch=case.shapes[0][0], batch_sizes=case.batch_sizes, dtype="float32",
        module=module, training=training, model=model, program=program,
        warnings=exporter_warnings(caught), target_runtime=case.target_runtime,
        export_options=options, opset=case.opset, error=error,
        reference_device=case.reference_device, tf32=tf32)
