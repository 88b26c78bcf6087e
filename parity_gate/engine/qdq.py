"""Quantizing a module and reading a QDQ graph: the two flows' tools, no judging.

- PT2E (`pt2e_convert`): torchao's `prepare_pt2e` / `convert_pt2e` with its
  X86InductorQuantizer (PyTorch's own `torch.ao.quantization.quantize_pt2e` left torch
  for torchao), the graph's outputs quantized too (`_WithOutputs`), so every output has a
  scale and is compared in steps.
- Runtime (`ort_quantize`): ONNX Runtime's `quantize_static` on the float export, QDQ
  format, fed by a `CalibrationDataReader` over the calibration fixtures.

Both graphs are read the same way: every QuantizeLinear's output (an integer tensor)
is made a graph output, which ONNX Runtime's QDQ fusions keep (the fused node writes it),
and its scale, zero point and axis are read from the graph (`q_params`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

QUANTIZE_TARGETS = ("quantize_per_tensor", "quantize_per_channel")
FLOAT_COMPUTE = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum")


@dataclass(frozen=True)
class QParams:
    """One quantize node's grid: scale and zero point (per tensor or per channel)."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None
    qmin: int
    qmax: int
    dtype: str  # int8 | uint8

    def broadcast(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """Scale and zero point shaped to broadcast against a tensor of `rank` dims."""
        s, z = np.asarray(self.scale, np.float64), np.asarray(self.zero_point, np.float64)
        if self.axis is None or s.ndim == 0:
            return s.reshape(()), z.reshape(())
        shape = [1] * rank
        shape[self.axis % rank] = -1
        return s.reshape(shape), z.reshape(shape)

    def representable(self) -> str:
        """Why this grid cannot be stored as ONNX wants it ("" when it can): a scale that
        is not a positive normal float32, a zero point outside the integer range."""
        s = np.asarray(self.scale, np.float64).ravel()
        if not np.all(np.isfinite(s)) or np.any(s <= 0):
            return "a scale that is not positive and finite"
        if np.any(s < np.finfo(np.float32).tiny):
            return f"a scale below float32's smallest normal ({float(s.min()):.3g})"
        z = np.asarray(self.zero_point).ravel()
        if np.any(z < self.qmin) or np.any(z > self.qmax):
            return f"a zero point outside [{self.qmin}, {self.qmax}]"
        return ""


# --------------------------------------------------------------------------- PT2E


def _with_outputs(base: Any) -> Any:
    """`base` that also quantizes every graph output (activations' spec)."""
    from torchao.quantization.pt2e.quantizer import Quantizer
    from torchao.quantization.pt2e.quantizer.quantizer import QuantizationAnnotation

    class WithOutputs(Quantizer):
        def annotate(self, model: Any) -> Any:
            base.annotate(model)
            spec = base.global_config.input_activation
            for node in model.graph.nodes:
                if node.op != "output":
                    continue
                for arg in node.args[0] if isinstance(node.args[0], (list, tuple)) \
                        else [node.args[0]]:
                    if getattr(arg, "op", "") != "call_function":
                        continue
                    ann = arg.meta.get("quantization_annotation")
                    if ann is None:
                        arg.meta["quantization_annotation"] = QuantizationAnnotation(
                            output_qspec=spec, _annotated=True)
                    elif ann.output_qspec is None:
                        ann.output_qspec = spec
            return model

        def validate(self, model: Any) -> None:
            base.validate(model)

    return WithOutputs()


def pt2e_convert(torch: Any, module: Any, example: dict[str, Any],
                 calibration: Sequence[dict[str, Any]], dynamic: dict[str, Any],
                 reduce_range: bool = True) -> Any:
    """The module quantized by PT2E: captured with `dynamic` shapes, prepared with the
    X86 quantizer (outputs quantized too), calibrated on `calibration` (keyword inputs),
    converted. Returns the converted GraphModule (the quantized eager twin).
    `reduce_range`: weights on 7 bits ([-64, 63]), as ONNX Runtime's own quantizer
    offers, since its uint8 x int8 kernels on x86 CPUs without VNNI add products in
    pairs into int16 and saturate with full-range weights."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    base = X86InductorQuantizer()
    config = get_default_x86_inductor_quantization_config()
    if reduce_range and config.weight is not None:
        config = dataclasses.replace(config, weight=dataclasses.replace(
            config.weight, quant_min=-64, quant_max=63))
    base.set_global(config)
    captured = torch.export.export(module, (), example, dynamic_shapes=dynamic or None,
                                   strict=False).module()
    prepared = prepare_pt2e(captured, _with_outputs(base))
    with torch.no_grad():
        for inputs in calibration:
            prepared(**inputs)
    return convert_pt2e(prepared)


def eager_nodes(torch: Any, program: Any, inputs: Sequence[Any]
                ) -> dict[str, tuple[np.ndarray, np.ndarray, QParams]]:
    """Every quantize node of an exported program run in eager, by node name (the name
    its ONNX value keeps): (integer values, value before rounding in steps, grid)."""
    gm = program.module()
    seen: dict[str, tuple[np.ndarray, np.ndarray, QParams]] = {}

    class Recorder(torch.fx.Interpreter):
        def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
            out = super().call_function(target, args, kwargs)
            name = getattr(target, "__name__", str(target))
            if name.split(".")[0] in QUANTIZE_TARGETS and isinstance(out, torch.Tensor):
                grid = _params_of(torch, name, args)
                x = args[0].detach().to(torch.float64).numpy()
                s, z = grid.broadcast(x.ndim)
                seen[self._node] = (out.numpy(), x / s + z, grid)
            return out

        def run_node(self, n: Any) -> Any:
            self._node = n.name
            return super().run_node(n)

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return seen


def _params_of(torch: Any, name: str, args: Sequence[Any]) -> QParams:
    def arr(v: Any) -> np.ndarray:
        return v.detach().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)

    per_channel = name.startswith("quantize_per_channel")
    scale, zp = arr(args[1]), arr(args[2])
    rest = list(args[3:])
    axis = int(rest.pop(0)) if per_channel else None
    qmin, qmax, dtype = int(rest[0]), int(rest[1]), rest[2]
    return QParams(scale, zp, axis, qmin, qmax, "uint8" if dtype == torch.uint8 else "int8")


# --------------------------------------------------------------------------- runtime


def ort_quantize(model: bytes | str, calibration: Sequence[dict[str, np.ndarray]],
                 per_channel: bool = True, activation: str = "uint8") -> bytes:
    """ONNX Runtime's static quantizer on a float model, QDQ format, calibrated (min-max)
    on `calibration` (one feed per batch)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds: Iterator[dict[str, np.ndarray]] = iter(calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory(prefix="pg-quant-") as tmp:
        src = model if isinstance(model, str) else os.path.join(tmp, "float.onnx")
        if not isinstance(model, str):
            with open(src, "wb") as out:
                out.write(model)
        dst = os.path.join(tmp, "qdq.onnx")
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel,
                        activation_type=QuantType.QUInt8 if activation == "uint8"
                        else QuantType.QInt8, weight_type=QuantType.QInt8)
        with open(dst, "rb") as back:
            return back.read()


# --------------------------------------------------------------------------- graphs


def constants(model: Any) -> dict[str, np.ndarray]:
    """Initializers and Constant nodes' values, by name."""
    from onnx import numpy_helper

    out = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute:
            attr = node.attribute[0]
            if attr.name == "value":
                out[node.output[0]] = numpy_helper.to_array(attr.t)
            elif attr.name in ("value_float", "value_int"):
                out[node.output[0]] = np.asarray(attr.f if attr.name == "value_float"
                                                 else attr.i)
    return out


def q_params(model: Any) -> dict[str, tuple[Any, QParams]]:
    """Every QuantizeLinear of a graph by its output's name: (node, its grid)."""
    values = constants(model)
    out: dict[str, tuple[Any, QParams]] = {}
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or len(node.input) < 2:
            continue
        scale = values.get(node.input[1])
        zp = values.get(node.input[2]) if len(node.input) > 2 else np.asarray(0, np.uint8)
        if scale is None or zp is None:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1) \
            if np.asarray(scale).ndim else None
        dtype = "int8" if np.asarray(zp).dtype == np.int8 else "uint8"
        lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
        out[node.output[0]] = (node, QParams(np.asarray(scale), np.asarray(zp), axis, lo, hi,
                                             dtype))
    return out


def dequant_outputs(model: Any) -> dict[str, str]:
    """Graph output name -> the QuantizeLinear output its DequantizeLinear reads (outputs
    on a quantization grid)."""
    made = {n.output[0]: n for n in model.graph.node}
    out: dict[str, str] = {}
    for value in model.graph.output:
        node = made.get(value.name)
        if node is not None and node.op_type == "DequantizeLinear":
            out[value.name] = node.input[0]
    return out


def with_outputs(model: Any, names: Sequence[str]) -> bytes:
    """The model with `names` added as graph outputs (types left to ONNX Runtime)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    have = {o.name for o in copy.graph.output}
    for name in names:
        if name not in have:
            copy.graph.output.append(onnx.ValueInfoProto(name=name))
    return copy.SerializeToString()


def producers(model: Any) -> dict[str, Any]:
    return {o: n for n in model.graph.node for o in n.output}


def float_ops(model: bytes, provider_chain: list[Any]) -> list[tuple[str, str]]:
    """(op type, node name) of the compute ops ONNX Runtime leaves in float after its
    optimizations of a QDQ graph (the model it would run, saved and read back): an int8
    op this ONNX Runtime runs in float, or an op left in float between Q/DQ pairs."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="pg-quant-") as tmp:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model, so, providers=provider_chain)
        optimized = onnx.load(so.optimized_model_filepath)
    return [(n.op_type, n.name) for n in optimized.graph.node
            if n.op_type in FLOAT_COMPUTE and n.domain in ("", "ai.onnx")]


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def weight_axes(program: Any, model: Any) -> list[str]:
    """Per-channel weight grids the export lost or moved: each `dequantize_per_channel` of
    the program against the DequantizeLinear that keeps its name (axis, scales)."""
    import torch

    gm = program.module()
    made = producers(model)
    values = constants(model)
    problems: list[str] = []

    def fetch(arg: Any) -> np.ndarray | None:
        target = getattr(arg, "target", None)
        if not isinstance(target, str) or getattr(arg, "op", "") != "get_attr":
            return np.asarray(arg) if isinstance(arg, (int, float)) else None
        obj: Any = gm
        for part in target.split("."):
            obj = getattr(obj, part, None)
        return obj.detach().numpy() if isinstance(obj, torch.Tensor) else None

    for node in gm.graph.nodes:
        if node.op != "call_function" or "dequantize_per_channel" not in str(node.target):
            continue
        onnx_node = made.get(node.name)
        if onnx_node is None or onnx_node.op_type != "DequantizeLinear":
            continue
        weight = fetch(node.args[0])
        rank = weight.ndim if weight is not None else 1
        axis = int(node.args[3]) % max(rank, 1)
        scale = values.get(onnx_node.input[1])
        if scale is None or np.asarray(scale).ndim == 0:
            problems.append(f"{node.name}: per-channel scales (axis {axis}) became one scale "
                            "in ONNX: the per-channel axis was lost")
            continue
        got = next((a.i for a in onnx_node.attribute if a.name == "axis"), 1) % max(rank, 1)
        eager = fetch(node.args[1])
        if got != axis:
            problems.append(f"{node.name}: per-channel axis {got} in ONNX, {axis} in eager "
                            "(the axis moved)")
        elif eager is not None and (eager.size != np.asarray(scale).size or not np.allclose(
                eager.ravel(), np.asarray(scale, np.float64).ravel(), rtol=1e-6, atol=0)):
            problems.append(f"{node.name}: per-channel scales differ between ONNX and eager")
    return problems


def unrepresentable(torch: Any, gm: Any) -> list[str]:
    """The converted model's activation grids that ONNX cannot store (the quantizer's
    choice: a scale that is not a positive normal float32, a zero point outside the
    integer range), each as `node: why`; read before exporting, which would fail on them."""
    out: list[str] = []
    for node in gm.graph.nodes:
        name = getattr(node.target, "__name__", str(node.target))
        if node.op != "call_function" or not name.startswith("quantize_per_tensor"):
            continue
        args = list(node.args)
        if any(isinstance(a, torch.fx.Node) for a in args[1:]):
            continue  # a scale computed in the graph: read at run time only
        why = _params_of(torch, name, args).representable()
        if why:
            out.append(f"{node.name}: {why}")
    return out
