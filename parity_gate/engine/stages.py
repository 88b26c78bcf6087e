"""The worker stages after export, shared by the module gate and the op sweep.

check → open_session → run → classify. Each stage that can fail raises one
typed `StageFailure` saying which outcome the failure is, why (one line) and
the full message; callers decide which cases it applies to. Imports neither
torch nor onnxruntime at module level (bfloat16 outputs import torch lazily).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from parity_gate.engine.runtime import (
    ProviderFallback,
    classify_load_error,
    classify_run_error,
    create_session,
    first_line,
    memory_failure,
)
from parity_gate.model.comparison import Comparison, Verdict
from parity_gate.model.outcomes import Outcome

if TYPE_CHECKING:
    import onnx

DETAIL_LIMIT = 4000  # characters of the full message kept as a result's detail


@dataclass
class StageFailure(Exception):
    """Why a stage failed for a model (or a subset of a batch).

    `culprits` are the batch positions the error names (the op sweep's
    isolation reads them). `conclusive`: the failure is a property of the
    culprits themselves, so they need not be tried alone; a conclusive failure
    that names no culprits holds for the whole subset (the provider did not
    come up).
    """

    outcome: Outcome
    reason: str
    detail: str = ""
    culprits: frozenset[int] = frozenset()
    conclusive: bool = False
    reasons: dict[int, str] = field(default_factory=dict)  # per culprit, when they differ

    def __post_init__(self) -> None:
        super().__init__(self.reason)

    def for_item(self, i: int) -> StageFailure:
        """This failure as item `i` gets it (its own reason when one was given)."""
        if i not in self.reasons:
            return self
        return StageFailure(self.outcome, self.reasons[i], self.detail, frozenset({i}),
                            self.conclusive)


@dataclass(frozen=True)
class InferenceDisagreement:
    """onnx.checker's shape inference (its full check) disagrees with the exported graph.

    Advisory, not a block: the checker's inference is one opinion of the shapes, ONNX
    Runtime infers its own when it loads the model and computes the values. A model it
    runs is compared like any other (an avg_pool with ceil_mode whose last window torch
    skips: older ONNX shape formulas count it, ONNX Runtime and torch do not); one it
    rejects fails at loading. `values`: (value, node, the graph's shape, ONNX's).
    """

    message: str
    values: tuple[tuple[str, str, str, str], ...] = ()

    def describe(self) -> str:
        shapes = "; ".join(f"{name} ({node}) is {declared} in the exported graph (torch's "
                           f"shape), {inferred} by ONNX's shape inference"
                           for name, node, declared, inferred in self.values[:3])
        return (f"ONNX's shape inference (onnx.checker full check) disagrees with the "
                f"exported graph: {shapes or self.message}. It alone does not block: ONNX "
                "Runtime, which infers its own shapes, decides (a model it loads runs and is "
                "compared with eager; one it rejects is invalid_model)")

    def failure(self) -> StageFailure:
        """The disagreement as the block it used to be (the op sweep keeps it: its known
        findings were recorded so)."""
        return StageFailure(Outcome.INVALID_MODEL, f"onnx.checker: {first_line(self.message)}",
                            self.message[-DETAIL_LIMIT:])


def check(model: bytes | str | onnx.ModelProto) -> InferenceDisagreement | None:
    """onnx.checker's full check. A structural failure is INVALID_MODEL (raised); a failure
    of its shape/type inference alone is returned, for ONNX Runtime to decide. A path (a
    model with external data) is checked from its file, as the checker must."""
    import onnx

    try:  # bytes are checked as they are: no Python copy of a large model
        onnx.checker.check_model(model, full_check=True)
    except onnx.shape_inference.InferenceError as exc:  # the structure passed before it
        msg = f"{type(exc).__name__}: {exc}"
        return InferenceDisagreement(msg, _disagreeing_shapes(model))
    except Exception as exc:
        msg = f"{type(exc).__name__}: {exc}"
        raise StageFailure(Outcome.INVALID_MODEL, f"onnx.checker: {first_line(msg)}",
                           msg[-DETAIL_LIMIT:]) from None
    return None


def _disagreeing_shapes(model: bytes | str | onnx.ModelProto
                        ) -> tuple[tuple[str, str, str, str], ...]:
    """The values whose shape in the graph ONNX's inference, run on the graph stripped of
    its shapes, infers otherwise (both known in that dim). Advisory: () when it cannot tell."""
    import onnx

    try:
        if isinstance(model, bytes):
            proto = onnx.load_model_from_string(model)
        elif isinstance(model, str):
            proto = onnx.load(model, load_external_data=False)
        else:
            proto = onnx.ModelProto()
            proto.CopyFrom(model)
        graph = proto.graph
        declared = {v.name: _shape(v) for v in [*graph.value_info, *graph.output]
                    if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}
        del graph.value_info[:]
        for out in graph.output:
            out.type.tensor_type.ClearField("shape")
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
        found = {v.name: _shape(v) for v in [*inferred.graph.value_info, *inferred.graph.output]
                 if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}
        producer = {o: f"{n.op_type} {n.name}".strip() for n in graph.node for o in n.output}
        return tuple((name, producer.get(name, "graph input"), _text(shape), _text(found[name]))
                     for name, shape in declared.items()
                     if name in found and _differ(shape, found[name]))
    except Exception:  # advisory: the checker's message still says what it found
        return ()


def _shape(value: onnx.ValueInfoProto) -> list[int | str | None]:
    """A value's dims: a size, a symbol, or None (unknown)."""
    return [d.dim_value if d.HasField("dim_value") else d.dim_param or None
            for d in value.type.tensor_type.shape.dim]


def _differ(a: list[int | str | None], b: list[int | str | None]) -> bool:
    """Other ranks, or a dim both know as a size with other sizes."""
    return len(a) != len(b) or any(isinstance(x, int) and isinstance(y, int) and x != y
                                   for x, y in zip(a, b, strict=True))


def _text(dims: list[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def open_session(model: bytes | str | onnx.ModelProto, provider: str, options: dict[str, Any],
                 optimization: str = "all") -> Any:
    """An ORT session on `provider`, or why not: a provider that fell back to CPU is a
    conclusive RUNTIME_ERROR; any other load error is classified (NO_KERNEL, INVALID_MODEL)."""
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    try:
        return create_session(data, provider, options, optimization=optimization)
    except ProviderFallback as exc:
        raise StageFailure(Outcome.RUNTIME_ERROR, str(exc), conclusive=True) from None
    except Exception as exc:
        msg = str(exc)
        raise StageFailure(classify_load_error(msg), f"onnxruntime load: {first_line(msg)}",
                           msg[-DETAIL_LIMIT:]) from None


def run(session: Any, feeds: dict[str, np.ndarray], names: Sequence[str] | None = None, *,
        batch_size: int | None = None, export_batch: int | None = None,
        label: str = "onnxruntime run: ") -> list[np.ndarray]:
    """`session.run` of `names` (None: every output); bfloat16 travels as OrtValues.

    With `batch_size` and `export_batch` (the module gate), an invalid-dimensions
    error at a batch size other than the exported one is BAKED_SHAPE. `label`
    starts the reason (the module gate's reasons have always been the bare
    ORT message: it passes "").
    """
    try:
        return _ort_run(session, names, feeds)
    except Exception as exc:
        msg = str(exc)
        outcome = classify_run_error(msg, batch_size, export_batch)
        reason = first_line(msg)
        if outcome is Outcome.BAKED_SHAPE:
            reason = (f"batch {batch_size} fails on the model exported at batch "
                      f"{export_batch} while eager works: {reason}")
        elif outcome is Outcome.OUT_OF_MEMORY:
            reason = memory_failure(msg, sum(int(v.nbytes) for v in feeds.values())) or reason
        else:
            reason = f"{label}{reason}"
        raise StageFailure(outcome, reason, msg[-DETAIL_LIMIT:]) from None


def _ort_run(session: Any, names: Sequence[str] | None,
             feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    wanted = list(names) if names is not None else None
    if not any(a.dtype.name == "bfloat16" for a in feeds.values()) and not any(
            o.type == "tensor(bfloat16)" for o in session.get_outputs()):
        return list(session.run(wanted, feeds))
    import onnx
    import onnxruntime as ort

    values = {k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                  np.ascontiguousarray(v).view(np.uint16), onnx.TensorProto.BFLOAT16)
              if v.dtype.name == "bfloat16" else ort.OrtValue.ortvalue_from_numpy(v)
              for k, v in feeds.items()}
    if wanted is None:
        wanted = [o.name for o in session.get_outputs()]
    return [_from_ortvalue(o) for o in session.run_with_ort_values(wanted, values)]


def _from_ortvalue(value: Any) -> np.ndarray:
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    import ml_dtypes

    shape = tuple(value.shape())
    if not int(np.prod(shape)):
        return np.zeros(shape, ml_dtypes.bfloat16)
    import torch

    from parity_gate.engine.tensors import to_numpy

    return to_numpy(torch.from_dlpack(value))


def classify(comparisons: Sequence[Comparison]) -> Outcome:
    """The one verdict → outcome mapping: PASS when no comparison fails, else
    SHAPE_MISMATCH if any failing verdict is SHAPE, DTYPE_MISMATCH if any is
    DTYPE, MISMATCH otherwise. Callers refine on top (the module gate turns a
    shape mismatch at the export batch into BAKED_SHAPE; the op sweep's float64
    re-check may dismiss a MISMATCH)."""
    verdicts = {c.verdict for c in comparisons if not c.passed}
    if not verdicts:
        return Outcome.PASS
    if Verdict.SHAPE in verdicts:
        return Outcome.SHAPE_MISMATCH
    if Verdict.DTYPE in verdicts:
        return Outcome.DTYPE_MISMATCH
    return Outcome.MISMATCH


def failure_reason(comparisons: Sequence[Comparison]) -> str:
    """`"<output>: <reason>"` of the failing comparison that decides the outcome (the
    first shape/dtype failure, else the first failure); "" when all pass."""
    failing = [c for c in comparisons if not c.passed]
    if not failing:
        return ""
    worst = max(failing, key=lambda c: c.verdict in (Verdict.SHAPE, Verdict.DTYPE))
    return f"{worst.name}: {worst.reason}"
