"""What the checks read: the export step's artifacts for one module and dtype.

Built by the module worker right where it exports (no torch objects leave the
worker). Parsed forms of the ONNX bytes are computed once, on first use, and
shared by every check.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from parity_gate.hazards.sizes import size_facts


class InputSpec(Protocol):
    """A declared input as the checks read it (the manifest's InputSpec; the manifest
    imports hazards.config, so this side names only what it reads)."""

    @property
    def name(self) -> str: ...

    @property
    def dynamic(self) -> Mapping[int, str]: ...

# Warnings about the exporter's own API or the environment, not about the model.
_NOISE = (
    "LeafSpec",
    "legacy TorchScript-based ONNX export",
    "torchvision is not installed",
    "will not be used, since it shares the same shape constraints",
)
_WARNING_TEXT = re.compile(r"^(\w+(?:Warning|Error)): (.*)$", re.S)


@dataclass(frozen=True)
class ExporterWarning:
    """One warning the exporter emitted, with where Python says it came from."""

    category: str
    message: str
    filename: str = ""
    lineno: int = 0

    @property
    def text(self) -> str:
        return f"{self.category}: {self.message}"

    @property
    def source(self) -> str:
        return f"{self.filename}:{self.lineno}" if self.filename else ""

    @property
    def in_torch(self) -> bool:
        """Raised inside torch's own code (not the user's forward)."""
        return in_library(self.filename)

    @classmethod
    def of(cls, text: str) -> ExporterWarning:
        """From the engine's "Category: message" strings."""
        m = _WARNING_TEXT.match(text)
        return cls(m.group(1), m.group(2)) if m else cls("UserWarning", text)


def exporter_warnings(caught: Sequence[warnings.WarningMessage]) -> list[ExporterWarning]:
    """The model's warnings from a `warnings.catch_warnings(record=True)` list, deduplicated."""
    out: dict[tuple[str, str, str], ExporterWarning] = {}
    for w in caught:
        if issubclass(w.category, (DeprecationWarning, FutureWarning)):
            continue
        found = ExporterWarning(w.category.__name__, str(w.message)[:500], str(w.filename),
                                int(w.lineno))
        if not any(n in found.text for n in _NOISE):
            out.setdefault((found.text, found.filename, str(found.lineno)), found)
    return list(out.values())


def _library_roots() -> tuple[str, ...]:
    roots = []
    for name in ("torch", "onnxscript", "onnx"):
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        if path:
            roots.append(path.rsplit("/", 1)[0] + "/")
    return tuple(roots)


def in_library(filename: str) -> bool:
    """True for a file inside torch, onnx or onnxscript (not user code)."""
    return bool(filename) and filename.startswith(_library_roots())


@dataclass(frozen=True)
class GateDims:
    """What the gate itself does with the declared dims, so the checks can tell it from the
    model. `sums`: a symbol the gate always feeds as the sum of others (a cached step's mask
    spans past and new tokens: `past_seq = past + seq`), so an assumption those sums imply
    is the gate's, not the user's hazard. `reach`: the largest size a symbol takes in the
    gate's own cases, with why (a generation's last step), which the export must accept."""

    sums: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reach: Mapping[str, tuple[int, str]] = field(default_factory=dict)

    def free(self, symbols: frozenset[str] | set[str]) -> set[str]:
        """The symbols sizes are chosen for: a sum's parts instead of the sum."""
        out = {s for s in symbols if s not in self.sums}
        for s in symbols:
            out.update(self.sums.get(s, ()))
        return out

    def complete(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """`sizes` with every sum recomputed from its parts (where they are known)."""
        out = dict(sizes)
        for symbol, parts in self.sums.items():
            if all(p in out for p in parts):
                out[symbol] = sum(out[p] for p in parts)
        return out


@dataclass
class HazardContext:
    """One module's export in one dtype, as the checks see it.

    `training` is read before the gate calls `.eval()` (`training_modules`);
    `module` is the module that was exported (eval mode, cast, on its device).
    `model` is the ONNX the cases run (optimized when `optimized`); `program` the
    program the dynamo exporter's `torch.export` captured (live in every run), and
    `decomposed()` the decomposed program its translation came from (made on demand when
    the translation was reused from the cache), and `facts` what the rules read of that
    decomposed program as data (`sizes.size_facts`: kept with a cached translation).
    `error` is the export's error text when the export failed (then only the
    rules with an `on_failure` check run).
    """

    module_name: str
    exporter: str
    inputs: Sequence[InputSpec]
    example: Sequence[Any] = ()
    export_batch: int = 2
    batch_sizes: Sequence[int] = ()
    dtype: str = ""
    module: Any = None
    training: Sequence[str] = ()
    model: bytes = b""
    optimized: bool = True
    program: Any = None
    warnings: Sequence[ExporterWarning] = ()
    target_runtime: str | None = None
    export_options: dict[str, Any] = field(default_factory=dict)
    opset: int | None = None
    error: str = ""
    graph: Any = None  # the model's skeleton (weights' data dropped), when the caller has one
    gate: GateDims = field(default_factory=GateDims)
    decompose: Callable[[], Any] | None = None  # the decomposed program, on demand
    facts: Mapping[str, Any] | None = None
    # declared symbol → (`path:line`, call) where the model's code fixed it while exporting
    fixed_at: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    reference_device: str = "cpu"  # where eager computes the reference (the manifest's)
    tf32: Sequence[str] = ()  # TF32 switches on while the reference ran (`tf32_switches`)

    def decomposed(self) -> Any:
        """The decomposed program (None without a program)."""
        return self.decompose() if self.decompose is not None else self.program

    def size_facts(self) -> Mapping[str, Any]:
        """The decomposed program's size conditions as data (`sizes.size_facts`)."""
        return self.facts if self.facts is not None else size_facts(self.decomposed())

    @cached_property
    def proto(self) -> Any:
        """The model without the data of its large weights: every rule reads the graph,
        shapes and small constants, and a full copy would cost the model's size again."""
        if self.graph is not None:
            return self.graph
        import onnx

        return skeleton(onnx.load_from_string(self.model))

    @cached_property
    def inferred(self) -> Any:
        """The graph after ONNX shape inference (symbolic dims propagated); never raises."""
        import onnx

        try:
            return onnx.shape_inference.infer_shapes(self.proto, strict_mode=False,
                                                     data_prop=True)
        except Exception:
            return self.proto

    def sizes(self) -> dict[str, int]:
        """Declared dynamic symbol → its size in the export example."""
        out: dict[str, int] = {}
        for spec, tensor in zip(self.inputs, self.example, strict=False):
            shape = tuple(getattr(tensor, "shape", ()))
            for index, symbol in spec.dynamic.items():
                if index < len(shape):
                    out.setdefault(symbol, int(shape[index]))
        return out


def tf32_switches() -> tuple[str, ...]:
    """The torch switches that let CUDA compute float32 matmuls or convolutions in TF32, as
    they stand now (the gate turns both off before the factory runs, so one that is on was
    turned on by the factory or what it imports); () when torch is not loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    on = []
    if torch.backends.cuda.matmul.allow_tf32:  # also set by float32_matmul_precision high/medium
        on.append(f"torch.backends.cuda.matmul.allow_tf32 (float32_matmul_precision "
                  f"{torch.get_float32_matmul_precision()!r})")
    if torch.backends.cudnn.allow_tf32:
        on.append("torch.backends.cudnn.allow_tf32")
    return tuple(on)


# Modules whose forward reads `self.training` (the ones a training-mode export captures).
_MODE_DEPENDENT = ("Dropout", "BatchNorm", "InstanceNorm", "RReLU", "SyncBatchNorm")


def training_modules(module: Any) -> tuple[str, ...]:
    """Submodules in training mode whose forward depends on it ("path (Class)"), read
    before `.eval()`; the root alone when it is training but nothing depends on it."""
    if not getattr(module, "training", False):
        return ()
    found = []
    for path, sub in module.named_modules():
        cls = type(sub)
        if sub.training and (any(k in cls.__name__ for k in _MODE_DEPENDENT)
                             or _reads_training(cls)):
            found.append(f"{path or '<root>'} ({cls.__name__})")
    return tuple(found) or (f"<root> ({type(module).__name__})",)


def _reads_training(cls: type) -> bool:
    """A user-defined module whose own forward reads `self.training`."""
    if cls.__module__.startswith("torch."):
        return False
    forward = cls.__dict__.get("forward")
    code = getattr(forward, "__code__", None)
    return code is not None and "training" in code.co_names


LARGE_TENSOR_BYTES = 1 << 16  # weights past this size are never a shape or a literal


def skeleton(proto: Any) -> Any:
    """`proto` with the data of every initializer over LARGE_TENSOR_BYTES dropped (in
    place; dims and dtype kept, so shapes and types still read)."""
    for tensor in proto.graph.initializer:
        if tensor.ByteSize() > LARGE_TENSOR_BYTES:
            for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                         "uint64_data", "string_data"):
                tensor.ClearField(name)
    return proto
