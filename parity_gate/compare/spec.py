"""What an ONNX op computes by its specification, in float64: the owner check's oracle
where ONNX's reference evaluator is not one (pure numpy; one record per op).

The owner rule asks whether the ONNX graph, run as the standard says, computes what
eager computes (then ONNX Runtime's kernel owns a difference) or what ONNX Runtime
computes (then the translation does). ONNX's reference evaluator answers that for
most ops, but not on non-finite values of every op: its MaxPool keeps a window's
running maximum with `if Yh is None or x > Yh` (onnx/reference/ops/op_max_pool.py,
onnx 1.23), so a NaN survives only when it opens the window, while its own
ReduceMax and Max use `np.maximum` (op_reduce_max.py, op_max.py), which propagates
NaN. The reference contradicts itself there, so for these ops the oracle is the
op's definition, evaluated here.

The definitions, from the operator docs (onnx/defs; `onnx.defs.get_schema(op).doc`
of onnx 1.23.2: MaxPool-22, ReduceMax-20, ReduceMin-20, Max-13, Min-13):
- MaxPool: "max pooling consisting of computing the max on all values of a subset
  of the input tensor according to the kernel size"; windows per the output-shape
  formula, padding never wins, "sliding windows that would start in the right
  padded region are ignored".
- ReduceMax/ReduceMin: "computes the max (min) of the input tensor's elements along
  the provided axes".
- Max/Min: "element-wise max (min) of each of the input tensors".
None of these docs says a word about NaN (none contains the string). "The max of a
set" is ONNX's Max/ReduceMax, whose reference implementations are numpy's
NaN-propagating `maximum` (IEEE 754-2019 `maximum`), and ONNX Runtime's own CPU and
CUDA Max/Min kernels were changed to propagate NaN to match (microsoft/onnxruntime
#19984, #21492, after onnx/onnx#6003). So the max (min) of a set holding a NaN is
NaN; that reading is the `basis` each record states.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Attributes = dict[str, Any]
Evaluate = Callable[[Sequence[np.ndarray | None], Attributes], "np.ndarray | None"]

NAN_RULE = ("the max (min) of a set holding a NaN is NaN, as ONNX's Max/ReduceMax "
            "reference and ONNX Runtime's own Max/Min kernels define it; the op's doc "
            "names no NaN rule of its own")


@dataclass(frozen=True)
class Spec:
    """One op's definition: `evaluate(inputs, attributes)` in float64, None where an
    attribute or input is outside what this record implements (then: no oracle)."""

    op: str
    basis: str
    evaluate: Evaluate


def _extreme(arrays: Sequence[np.ndarray], largest: bool) -> np.ndarray:
    combine = np.maximum if largest else np.minimum
    out = arrays[0]
    for a in arrays[1:]:
        out = combine(out, a)  # numpy's maximum/minimum propagate NaN
    return out


def _elementwise(largest: bool) -> Evaluate:
    def evaluate(inputs: Sequence[np.ndarray | None], attrs: Attributes) -> np.ndarray | None:
        if not inputs or any(a is None for a in inputs):
            return None
        return _extreme([a for a in inputs if a is not None], largest)
    return evaluate


def _axes(axes_in: np.ndarray | None, attrs: Attributes, rank: int) -> list[int] | None:
    """A Reduce* node's axes (its input, else its attribute), non-negative; every axis when
    none is given, None when `noop_with_empty_axes` makes it return its input as is."""
    axes = [int(a) for a in (axes_in.reshape(-1) if axes_in is not None
                             else attrs.get("axes", []))]
    if not axes:
        return None if attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    return [a % rank for a in axes] if rank else []


def _reduce(largest: bool) -> Evaluate:
    def evaluate(inputs: Sequence[np.ndarray | None], attrs: Attributes) -> np.ndarray | None:
        data = inputs[0] if inputs else None
        if data is None or data.size == 0:
            return None
        axes = _axes(inputs[1] if len(inputs) > 1 else None, attrs, data.ndim)
        if axes is None:
            return data
        fn = np.max if largest else np.min  # NaN-propagating, like np.maximum.reduce
        return np.asarray(fn(data, axis=tuple(axes), keepdims=bool(attrs.get("keepdims", 1))))
    return evaluate


def _max_pool(inputs: Sequence[np.ndarray | None], attrs: Attributes) -> np.ndarray | None:
    """MaxPool's first output (N, C, spatial...) by its definition: each window's max,
    padding at -inf (it never wins), ceil_mode's windows that start in the right padding
    left out."""
    x = inputs[0] if inputs else None
    kernel = [int(k) for k in attrs.get("kernel_shape", [])]
    if x is None or x.ndim != len(kernel) + 2 or attrs.get("auto_pad", b"NOTSET") not in (
            b"NOTSET", "NOTSET", b"VALID", "VALID"):
        return None
    n = len(kernel)
    strides = [int(s) for s in attrs.get("strides", [1] * n)]
    dilations = [int(d) for d in attrs.get("dilations", [1] * n)]
    pads = [int(p) for p in attrs.get("pads", [0] * 2 * n)]
    ceil = bool(attrs.get("ceil_mode", 0))
    begin, end = pads[:n], pads[n:]
    spatial = x.shape[2:]
    out: list[int] = []
    for i in range(n):
        span = spatial[i] + begin[i] + end[i] - dilations[i] * (kernel[i] - 1) - 1
        size = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (size - 1) * strides[i] >= spatial[i] + begin[i]:
            size -= 1  # a window that would start in the right padding is ignored
        if size <= 0:
            return None
        out.append(size)
    # pad with -inf, enough for the last window of every dim
    need = [(out[i] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 for i in range(n)]
    widths = [(0, 0), (0, 0)] + [(begin[i], max(0, need[i] - spatial[i] - begin[i]))
                                 for i in range(n)]
    padded = np.pad(x.astype(np.float64), widths, constant_values=-np.inf)
    acc = np.full(x.shape[:2] + tuple(out), -np.inf)
    for offset in itertools.product(*(range(k) for k in kernel)):
        window = tuple(slice(o * d, o * d + s * (m - 1) + 1, s) for o, d, s, m in
                       zip(offset, dilations, strides, out, strict=True))
        index = (slice(None), slice(None), *window)
        acc = np.maximum(acc, padded[index])
    return acc


# The element type of a node's first input, passed to a definition that depends on it
# (Clip's defaults are that type's limits); never an ONNX attribute name.
DTYPE = "__dtype__"
CLIP_RULE = ("Clip-13: the bounds \"default to numeric_limits::lowest() and "
             "numeric_limits::max(), respectively\" and Clip is \"equivalent to "
             "'Min(max, Max(input, min))'\", so a missing bound clips ±inf to the type's "
             "largest finite value (FLT_MAX for float32): a translation that leaves a bound "
             "out where eager means none is the translation's defect")


def _clip(inputs: Sequence[np.ndarray | None], attrs: Attributes) -> np.ndarray | None:
    """Clip by its definition: Min(max, Max(input, min)), a missing bound the element
    type's lowest (max) finite value; NaN propagates as through Max/Min."""
    data = inputs[0] if inputs else None
    kind = np.dtype(attrs.get(DTYPE, np.float64))
    if data is None or kind.kind != "f":
        return None  # integer limits: not needed by any finding yet
    limits = np.finfo(kind)
    low = inputs[1] if len(inputs) > 1 and inputs[1] is not None else np.float64(limits.min)
    high = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.float64(limits.max)
    return np.minimum(high, np.maximum(data, low))


SPECS: dict[str, Spec] = {s.op: s for s in (
    Spec("Clip", CLIP_RULE, _clip),
    Spec("MaxPool", f"MaxPool: the max of each window; {NAN_RULE}", _max_pool),
    Spec("ReduceMax", f"ReduceMax: the max along the axes; {NAN_RULE}", _reduce(True)),
    Spec("ReduceMin", f"ReduceMin: the min along the axes; {NAN_RULE}", _reduce(False)),
    Spec("Max", f"Max: the element-wise max; {NAN_RULE}", _elementwise(True)),
    Spec("Min", f"Min: the element-wise min; {NAN_RULE}", _elementwise(False)),
)}


def evaluate(model: Any, feeds: dict[str, np.ndarray], output: str,
             like: np.dtype[Any] | None = None,
             computed: Mapping[str, Any] | None = None) -> tuple[np.ndarray, Spec] | None:
    """`output` of a culprit cut (onnx.ModelProto) by its op's definition, in float64
    (rounded to `like` when that is the float dtype it is compared in): only where one
    node with a record makes it and every input it reads is known (a feed, an
    initializer, a Constant, or a value `computed` inside the graph: what ONNX's
    reference evaluator gave the nodes before it, a Log before a Clip); None otherwise
    (no oracle: say so)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    values: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute:
            value = helper.get_attribute_value(node.attribute[0])
            if hasattr(value, "dims"):  # a TensorProto (value_float(s)/int(s) become arrays)
                values[node.output[0]] = numpy_helper.to_array(value)
            else:
                values[node.output[0]] = np.asarray(value)
    values.update({k: np.asarray(v) for k, v in (computed or {}).items()})
    values.update(feeds)
    makers = [n for n in graph.node if n.op_type != "Constant" and output in n.output]
    if len(makers) != 1 or makers[0].output[0] != output or makers[0].op_type not in SPECS:
        return None
    node = makers[0]
    if node.domain not in ("", "ai.onnx"):
        return None
    spec = SPECS[node.op_type]
    inputs = [values.get(i) if i else None for i in node.input]
    if any(i and i not in values for i in node.input):
        return None
    wide = [None if a is None else a.astype(np.float64) if a.dtype.kind == "f" else a
            for a in inputs]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    first = inputs[0] if inputs else None
    attrs[DTYPE] = first.dtype if first is not None else np.dtype(np.float64)
    got = spec.evaluate(wide, attrs)
    if got is None:
        return None
    value = np.asarray(got)
    return (value.astype(like) if like is not None and like.kind == "f" else value), spec


# Where the definition itself leaves the result undefined, no value is wrong by it: a
# graph that reaches such a node on these inputs relies on what the standard does not
# promise (one record per op, with the doc's words).
UNDEFINED: dict[str, str] = {
    "ReduceMean": "ReduceMean over an empty set (ReduceMean-18: \"Reduction over an empty "
                  "set of values yields undefined\")",
}


def undefined_at(model: Any, values: dict[str, np.ndarray]) -> str | None:
    """The first node of `model` whose result ONNX leaves undefined on the values it got
    (`values`: every intermediate result of a reference run), described; None if none."""
    from onnx import helper

    for node in model.graph.node:
        if node.op_type not in UNDEFINED or node.domain not in ("", "ai.onnx"):
            continue
        data = values.get(node.input[0]) if node.input else None
        if data is None:
            continue
        data = np.asarray(data)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        axes_in = values.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        axes = _axes(axes_in, attrs, data.ndim) or []
        if data.size == 0 and (not axes or any(data.shape[a] == 0 for a in axes)
                               or data.ndim == 0):
            return f"{node.name or node.op_type}: {UNDEFINED[node.op_type]}"
    return None
