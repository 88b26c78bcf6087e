"""One `torch.onnx.export` call per (module, dtype), and what its failures mean.

The batch dim and every other declared dim are exported as dynamic so a
single model serves all batch sizes; a declared dim that still comes out as a
constant is the "baked shape" defect, recorded here before anything runs.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from parity_gate.manifest.models import ExportSettings, InputSpec
from parity_gate.model.outcomes import Outcome
from parity_gate.model.text import strip_control


@dataclass
class ExportedModel:
    model: bytes
    warnings: list[str] = field(default_factory=list)
    # (input name, dim index, symbol, constant it was baked to)
    baked_dims: list[tuple[str, int, str, int]] = field(default_factory=list)
    opset: int | None = None
    ir_version: int | None = None


class ExportFailure(Exception):
    """Export failed; `outcome` says whether it is a missing op or something else."""

    def __init__(self, outcome: Outcome, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.detail = detail


_UNSUPPORTED = (
    re.compile(r"No ONNX function found for <OpOverload\(op='([\w.:]+)'"),
    re.compile(r"Exporting the operator '([\w.:]+)' to ONNX opset version \d+ is not supported"),
    re.compile(r"Unsupported FX nodes: \{'call_function': \[([^\]]+)\]"),
    re.compile(r"No decompositions registered for [^\n]*?([\w.]+)"),
)


def classify_export_error(message: str) -> tuple[Outcome, str]:
    """Tell a missing translation (feature request) apart from other failures."""
    clean = strip_control(message)
    for pattern in _UNSUPPORTED:
        m = pattern.search(clean)
        if m:
            return Outcome.UNSUPPORTED_OP, f"unsupported operator {m.group(1).strip()}"
    for line in clean.splitlines():
        if "Error" in line and ":" in line and "Traceback" not in line:
            return Outcome.EXPORT_ERROR, line.strip()[:300]
    head = next((ln.strip() for ln in clean.splitlines() if ln.strip()), "export failed")
    return Outcome.EXPORT_ERROR, head[:300]


def export_module(
    module: Any,
    example: Sequence[Any],
    inputs: Sequence[InputSpec],
    output_names: Sequence[str],
    settings: ExportSettings,
) -> ExportedModel:
    """Export with every declared dim dynamic; raise ExportFailure with a classification."""
    import torch

    names = [i.name for i in inputs]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if settings.exporter == "dynamo":
                model = _export_dynamo(torch, module, example, inputs, names, output_names,
                                       settings)
            else:
                model = _export_torchscript(torch, module, example, inputs, names, output_names,
                                            settings)
        except Exception as exc:  # the exporter raises many unrelated types
            import traceback

            text = f"{type(exc).__name__}: {exc}"
            outcome, reason = classify_export_error(text)
            raise ExportFailure(outcome, reason, traceback.format_exc()[-4000:]) from None
    messages = _interesting_warnings(caught)
    import onnx

    proto = onnx.load_from_string(model)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    return ExportedModel(model, messages, find_baked_dims(proto, inputs), opset,
                         proto.ir_version)


def _export_dynamo(torch: Any, module: Any, example: Sequence[Any], inputs: Sequence[InputSpec],
                   names: list[str], output_names: Sequence[str],
                   settings: ExportSettings) -> bytes:
    symbols: dict[str, Any] = {}
    dynamic_shapes = tuple(
        {dim: symbols.setdefault(sym, torch.export.Dim(sym)) for dim, sym in spec.dynamic.items()}
        or None
        for spec in inputs
    )
    kwargs: dict[str, Any] = {
        "dynamo": True,
        "input_names": names,
        "output_names": list(output_names) or None,
        "dynamic_shapes": dynamic_shapes,
        "optimize": settings.optimize,
        "verbose": False,
        **settings.options,
    }
    if settings.opset is not None:
        kwargs["opset_version"] = settings.opset
    program = torch.onnx.export(module, tuple(example), **kwargs)
    return program.model_proto.SerializeToString()


def _export_torchscript(torch: Any, module: Any, example: Sequence[Any],
                        inputs: Sequence[InputSpec], names: list[str],
                        output_names: Sequence[str], settings: ExportSettings) -> bytes:
    buffer = io.BytesIO()
    dynamic_axes: dict[str, dict[int, str]] = {
        spec.name: dict(spec.dynamic) for spec in inputs if spec.dynamic
    }
    for out in output_names:
        dynamic_axes.setdefault(out, {0: "batch"})
    kwargs: dict[str, Any] = {
        "dynamo": False,
        "input_names": names,
        "output_names": list(output_names),
        "dynamic_axes": dynamic_axes,
        **settings.options,
    }
    if settings.opset is not None:
        kwargs["opset_version"] = settings.opset
    torch.onnx.export(module, tuple(example), buffer, **kwargs)
    return buffer.getvalue()


def find_baked_dims(proto: Any, inputs: Sequence[InputSpec]) -> list[tuple[str, int, str, int]]:
    """Declared-dynamic dims that the graph's inputs carry as constants."""
    by_name = {i.name: i for i in proto.graph.input}
    baked: list[tuple[str, int, str, int]] = []
    for spec in inputs:
        graph_input = by_name.get(spec.name)
        if graph_input is None:
            continue
        dims = graph_input.type.tensor_type.shape.dim
        for index, symbol in spec.dynamic.items():
            if index < len(dims) and dims[index].HasField("dim_value"):
                baked.append((spec.name, index, symbol, int(dims[index].dim_value)))
    return baked


_NOISE = (
    "LeafSpec",
    "legacy TorchScript-based ONNX export",
    "torchvision is not installed",
    "will not be used, since it shares the same shape constraints",  # shared dim symbols
)


def _interesting_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    out: list[str] = []
    for w in caught:
        if issubclass(w.category, (DeprecationWarning, FutureWarning)):
            continue  # about the exporter's own API, not about the user's model
        text = f"{w.category.__name__}: {w.message}"
        if not any(n in text for n in _NOISE) and text not in out:
            out.append(text[:500])
    return out
