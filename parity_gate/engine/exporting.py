"""One `torch.onnx.export` call per (module, dtype), and what its failures mean.

The batch dim and every other declared dim are exported as dynamic so a
single model serves all batch sizes; a declared dim that still comes out as a
constant is the "baked shape" defect, recorded here before anything runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import sysconfig
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from parity_gate.engine.binding import leaf_paths, nest
from parity_gate.manifest.models import ExportSettings, InputSpec
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ExportCause, ExportStage
from parity_gate.model.text import strip_control

# Above this many bytes of weights an export is written with ONNX external data: a
# protobuf cannot hold 2 GiB. The variable exists so tests can cross it with a small model.
EXTERNAL_DATA_BYTES = int(os.environ.get("PARITY_GATE_EXTERNAL_DATA_BYTES", 2**31 - 2**27))


@dataclass
class ExportedModel:
    """One export. A large model's weights are external: `path` is its .onnx file (weights
    beside it in `<path>.data`) and `model` the graph alone."""

    model: bytes
    warnings: list[str] = field(default_factory=list)
    # (input name, dim index, symbol, constant it was baked to)
    baked_dims: list[tuple[str, int, str, int]] = field(default_factory=list)
    opset: int | None = None
    ir_version: int | None = None
    # for the hazard checks, in the worker only: every warning, and torch.export's program
    raw_warnings: list[Any] = field(default_factory=list)
    program: Any = None
    path: str | None = None
    graph: Any = None  # the parsed model without its weights' data, for the hazard rules
    # what torch.export assumed about the dynamic dims (plan.probes.Assumption, Range), read
    # from the live program once and cached with the export: `shapes: auto` probes them
    assumptions: list[Any] = field(default_factory=list)
    ranges: dict[str, Any] = field(default_factory=dict)
    # where each size condition came from, recorded while the export ran (guard_sources)
    guard_sources: dict[str, Any] = field(default_factory=dict)
    # the ONNX translation came from the export cache (the program was captured in this run)
    reused: bool = False
    # the program torch.export captured (`program` is the decomposed one the translation
    # came from, None when the translation was reused), and what the hazard rules read of
    # the decomposed program as data (hazards.sizes.size_facts; kept with a translation)
    captured: Any = None
    facts: dict[str, Any] | None = None
    redo: Any = None  # () -> the decomposed program, translated afresh (for `decomposed`)
    # seconds of the dynamo exporter's steps: capture_s, translate_s (0 when reused)
    timings: dict[str, float] = field(default_factory=dict)

    def decomposed(self) -> Any:
        """The decomposed program the translation came from; when the translation was
        reused, made now by translating the captured program again (rarely asked for: a
        reused translation's cases passed, and only a hazard rule with work to do asks)."""
        if self.program is None and self.redo is not None:
            self.program = self.redo()
        return self.program

    @property
    def source(self) -> bytes | str:
        """What ONNX Runtime and the checker load: the file when weights are external."""
        return self.path if self.path is not None else self.model


@dataclass(frozen=True)
class Translated:
    """One ONNX translation of a captured program, as the export cache keeps it: the model
    (graph alone when its weights are external: `path` is then its .onnx file, weights in
    `<path>.data`) and the warnings the translation raised, (category, text, file, line)."""

    model: bytes
    path: str | None = None
    warnings: tuple[tuple[str, str, str, int], ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)  # hazards.sizes.size_facts


class Translations(Protocol):
    """Where translations are reused (engine.cached): a key is a digest of the program
    captured in this run and of the export call; None means "do not reuse" (an editable
    exporter, say)."""

    def key(self, program: str, call: Mapping[str, Any]) -> str | None: ...

    def get(self, key: str) -> Translated | None: ...

    def put(self, key: str, translated: Translated) -> None: ...


class ExportFailure(Exception):
    """Export failed; `outcome` says whether it is a missing op or something else,
    `cause` what the root of the exception chain was and what to try."""

    def __init__(self, outcome: Outcome, reason: str, detail: str,
                 cause: ExportCause | None = None) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.detail = detail
        self.cause = cause
        self.hazards: list[Any] = []  # what the hazard rules read in the error (worker side)


@dataclass(frozen=True)
class Hint:
    """A workaround worth trying when an export failure's root cause matches `message`
    (and, when given, its source location matches `where`); one record per rule."""

    message: str
    text: str
    where: str = ""
    exporter: str = ""  # only for failures of this exporter ("" = either)

    def applies(self, cause: ExportCause, exporter: str) -> bool:
        return (re.search(self.message, cause.key) is not None
                and (not self.where or re.search(self.where, cause.where) is not None)
                and (not self.exporter or self.exporter == exporter))


HINTS: tuple[Hint, ...] = (
    # The SDPA attention path reshapes a transposed tensor; the decomposition turns that
    # reshape into a view the symbolic strides do not allow (T5, Swin in the zoo).
    Hint(r"Cannot view a tensor", '`attn_implementation="eager"` in the model\'s config '
         "(its SDPA attention path is what fails)", where=r"(?i)attn|attention"),
    # SDPA's `is_causal = q_len > 1` from an example with one new token: a decode step
    # exported from a seq-1 example (tests/data/decoders/repro_sdpa_symbool.py).
    Hint(r"is_causal.*SymBool", "an export example with more than one new token (a size "
         "above 1 on the sequence dim in one of the fixture sets), or "
         '`attn_implementation="eager"`'),
    Hint(r"data-dependent|GuardOnDataDependent",
         "replacing the Python `if` on tensor values at that line with torch.where or "
         "torch.cond"),
    # A guard on an unbacked size (u0: a count that depends on the data, such as a
    # detector's number of boxes after a score filter): bounds let torch.export reason.
    Hint(r"GuardOnDataDependent.*\bu(\d+|#)",
         "telling torch.export what the data-dependent size at that line can be "
         "(`torch._check(n >= 0)`, `torch._check_is_size(n)` before it is used as a size), "
         "or the model's own export path where it has one"),
    Hint(r"Constraints violated|specializ",
         "fewer dims in `dynamic` (one declared dynamic was specialised to a constant)"),
    Hint(r".", "`export: {exporter: torchscript}` (the legacy exporter traces one path)",
         exporter="dynamo"),
)

_STEP = re.compile(r"step (\d)/3")
_STAGES = {"1": ExportStage.CAPTURE, "2": ExportStage.DECOMPOSE, "3": ExportStage.TRANSLATE}
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*([^\n]*)')
_TARGET = re.compile(r"target=torch\.ops\.([\w.]+)")


def exception_chain(exc: BaseException) -> list[BaseException]:
    """`exc`, what it was raised from, and so on down to the root (cycles cut)."""
    chain = [exc]
    while True:
        last = chain[-1]
        nxt = last.__cause__ or (None if last.__suppress_context__ else last.__context__)
        if nxt is None or any(nxt is e for e in chain):
            return chain
        chain.append(nxt)


def root_cause(exc: BaseException, exporter: str) -> ExportCause:
    """The root of the chain as one record: its type and first line, the export step, the
    FX op and the model's source line the exporter names, and the hints that apply."""
    chain = exception_chain(exc)
    root = chain[-1]
    texts = [strip_control(str(e)) for e in chain]
    text = texts[-1]
    message = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(root).__name__)
    steps = [m.group(1) for t in texts for m in [_STEP.search(t)] if m]
    stage = ExportStage.TORCHSCRIPT if exporter == "torchscript" else \
        _STAGES.get(steps[0] if steps else "", ExportStage.UNKNOWN)
    # the innermost frame outside torch, from the text nearest the root that names one
    frames = next((f for t in reversed(texts) if (f := list(_FRAME.finditer(t)))), [])
    where = source = ""
    if frames:
        last = next((f for f in reversed(frames) if "/torch/" not in f.group(1)), frames[-1])
        where = f"{last.group(1).rsplit('/', 1)[-1]}:{last.group(2)}: {last.group(4).strip()}"
        if _model_file(last.group(1)):  # a line of the model's own code, not a library's
            source = f"{last.group(1)}:{last.group(2)}"
    target = next((m.group(1) for t in texts for m in [_TARGET.search(t)] if m), "")
    cause = ExportCause(type(root).__name__, message[:300], stage, target, where[:200])
    hints = [h.text for h in HINTS if h.applies(cause, exporter)]
    return ExportCause(cause.kind, cause.message, stage, target, cause.where, hints, source)


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
    example: Sequence[Any] | Mapping[str, Any],
    inputs: Sequence[InputSpec],
    output_names: Sequence[str],
    settings: ExportSettings,
    translations: Translations | None = None,
) -> ExportedModel:
    """Export with every declared dim dynamic; raise ExportFailure with a classification.

    `example` is a mapping (forward()'s parameter name → tensor, passed by keyword, in
    forward()'s order) or, for callers that bind by position, a sequence. The dynamo
    exporter's translation is taken from `translations` when the program captured now has
    one there (the capture itself always runs).
    """
    import torch

    from parity_gate.engine.guard_sources import recording

    names = [i.name for i in inputs]
    with warnings.catch_warnings(), _recorded_at_model_lines() as caught, \
            recording(_model_file) as sources:
        warnings.simplefilter("always")
        timings: dict[str, float] = {}
        dynamo = _Dynamo()
        try:
            program, path, reused = None, None, False
            if settings.exporter == "dynamo":
                model, program, path, reused = _export_dynamo(
                    torch, module, example, inputs, names, output_names, settings,
                    translations, caught, timings, dynamo)
            elif settings.exporter == "transformers":
                model = _export_transformers(module, example, settings)
            else:
                model = _export_torchscript(torch, module, example, inputs, names, output_names,
                                            settings)
        except Exception as exc:  # the exporter raises many unrelated types
            import traceback

            cause = root_cause(exc, settings.exporter)
            chain = "\n".join(f"{type(e).__name__}: {e}" for e in exception_chain(exc))
            outcome, reason = classify_export_error(chain)
            if outcome is Outcome.EXPORT_ERROR:
                reason = cause.describe()
            raise ExportFailure(outcome, reason, traceback.format_exc()[-4000:],
                                cause) from None
    messages = _interesting_warnings(caught)
    import onnx

    from parity_gate.hazards.context import exporter_warnings, skeleton

    proto = skeleton(onnx.load_from_string(model))  # the graph; weights are in `model`
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    return ExportedModel(model, messages, find_baked_dims(proto, inputs), opset,
                         proto.ir_version, exporter_warnings(caught), program, path, proto,
                         guard_sources=sources, reused=reused, timings=timings,
                         captured=dynamo.captured if dynamo.captured is not None else program,
                         facts=dynamo.facts, redo=dynamo.redo)


def _export_dynamo(torch: Any, module: Any, example: Sequence[Any] | Mapping[str, Any],
                   inputs: Sequence[InputSpec], names: list[str], output_names: Sequence[str],
                   settings: ExportSettings, translations: Translations | None,
                   caught: list[warnings.WarningMessage], timings: dict[str, float],
                   dynamo: _Dynamo) -> tuple[bytes, Any, str | None, bool]:
    """torch.onnx.export's three steps, the first (capture: it runs the model's code) always
    done here, the other two (decomposition and translation, most of the time) reused from
    `translations` when the captured program has been translated before. A capture that
    fails is left to torch.onnx.export itself, so its error reads as the exporter's."""
    symbols: dict[str, Any] = {}
    shapes = {
        spec.name: {dim: symbols.setdefault(sym, torch.export.Dim(sym))
                    for dim, sym in spec.dynamic.items()} or None
        for spec in inputs
    }
    kwargs: dict[str, Any] = {
        "dynamo": True,
        "output_names": list(output_names) or None,
        "optimize": settings.optimize,
        "verbose": False,
        **settings.options,
    }
    if settings.opset is not None:
        kwargs["opset_version"] = settings.opset
    if isinstance(example, Mapping):  # by keyword: graph inputs take the (dotted) leaf names
        leaves = leaf_paths(example)
        kwargs["dynamic_shapes"] = nest({name: shapes[name] for name in leaves})
        kwargs["input_names"] = leaves
        args, call_kwargs = (), dict(example)
    else:
        kwargs["dynamic_shapes"] = tuple(shapes[n] for n in names)
        kwargs["input_names"] = names
        args, call_kwargs = tuple(example), {}
    t0 = time.perf_counter()
    captured = _capture(torch, module, args, call_kwargs, kwargs["dynamic_shapes"])
    timings["capture_s"] = time.perf_counter() - t0
    if captured is None:  # torch.onnx.export captures again and says why it fails
        return (*_translate(torch, module, args, call_kwargs, kwargs), False)
    dynamo.captured = captured
    dynamo.redo = lambda: _translate(torch, captured, (), None, kwargs)[1]
    key = None
    if translations is not None:
        from parity_gate.engine.programs import program_digest

        call = {**kwargs, "dynamic_shapes": [(spec.name, spec.dynamic) for spec in inputs],
                "external_data_bytes": EXTERNAL_DATA_BYTES}
        key = translations.key(program_digest(captured), call)
    hit = translations.get(key) if translations is not None and key is not None else None
    if hit is not None:
        for category, text, filename, lineno in hit.warnings:
            caught.append(warnings.WarningMessage(text, _category(category), filename, lineno))
        dynamo.facts = hit.facts
        return hit.model, None, hit.path, True
    first, t0 = len(caught), time.perf_counter()
    model, decomposed, path = _translate(torch, captured, (), None, kwargs)
    timings["translate_s"] = time.perf_counter() - t0
    from parity_gate.hazards.sizes import size_facts

    dynamo.facts = size_facts(decomposed)
    if translations is not None and key is not None:
        translations.put(key, Translated(model, path, tuple(
            (w.category.__name__, str(w.message), str(w.filename), int(w.lineno))
            for w in caught[first:]), dynamo.facts))
    return model, decomposed, path, False


@dataclass
class _Dynamo:
    """What the dynamo path learns beside its result: the captured program, how to get the
    decomposed one again, and what the hazard rules read of the decomposed one."""

    captured: Any = None
    redo: Any = None
    facts: dict[str, Any] | None = None


def _capture(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
             dynamic_shapes: Any) -> Any:
    """Step 1 of torch.onnx.export, as it does it: its capture strategies in order, with
    `torch.onnx.is_in_onnx_export()` true (a model's export-only branch is what gets
    exported). None when none captures, or when this torch has no such strategies."""
    try:
        from torch.onnx._internal.exporter import _capture_strategies, _flags
        exporting = _flags.set_onnx_exporting_flag
        strategies = _capture_strategies.CAPTURE_STRATEGIES
    except (ImportError, AttributeError):
        return None

    def first() -> Any:
        for strategy in strategies:
            try:
                result = strategy(verbose=False, dump=False, artifacts_dir=".", timestamp="")(
                    module, args, kwargs, dynamic_shapes=dynamic_shapes)
            except Exception:  # a strategy of another signature: the exporter's own path
                return None
            if result.success and result.exported_program is not None:
                return result.exported_program
        return None

    return exporting(first)()


def _translate(torch: Any, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None,
               options: dict[str, Any]) -> tuple[bytes, Any, str | None]:
    """torch.onnx.export of a module (all three steps) or of a captured program (the last
    two); the model's bytes, the program it captured and the external-data path."""
    program = torch.onnx.export(model, args, kwargs=kwargs, **options)
    captured = getattr(program, "exported_program", None)
    if _weight_bytes(program) <= EXTERNAL_DATA_BYTES:
        return program.model_proto.SerializeToString(), captured, None
    path = os.path.join(tempfile.mkdtemp(prefix="export-"), "model.onnx")  # worker scratch
    program.save(path, external_data=True)
    with open(path, "rb") as fh:
        return fh.read(), captured, path


def _category(name: str) -> type[Warning]:
    """A stored warning's category: the builtin of that name, else a UserWarning by name."""
    import builtins

    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, Warning):
        return found
    return type(name, (UserWarning,), {})


def _export_transformers(module: Any, example: Sequence[Any] | Mapping[str, Any],
                         settings: ExportSettings) -> bytes:
    """transformers' own ONNX exporter. A cached step (`engine.kvcache`) exports its model
    with the cache object and renames the graph's inputs and outputs to the gate's."""
    import onnx_ir
    from transformers.exporters.configs import OnnxConfig
    from transformers.exporters.exporter_onnx import OnnxExporter

    if not isinstance(example, Mapping):
        raise TypeError("exporter: transformers passes inputs by keyword (a forward() with "
                        "named parameters)")
    config = OnnxConfig(dynamic=True, optimize=settings.optimize,
                        opset_version=settings.opset, **settings.options)
    hook = getattr(module, "transformers_inputs", None)
    target, inputs, rename, keep = hook(dict(example)) if hook else (module, dict(example),
                                                                     {}, [])
    program, _ = OnnxExporter().export_program(target, inputs, config)
    graph = program.graph
    for value in [*graph.inputs, *graph.outputs]:
        if value.name in rename:
            value.name = rename[value.name]
    if keep:  # the step's outputs, in its order (not the encoder's states, nor cross caches)
        by_name = {str(v.name): v for v in graph.outputs}
        missing = [n for n in keep if n not in by_name]
        if missing:
            raise ValueError(f"transformers' export has no output(s) {', '.join(missing)} "
                             f"(it has: {', '.join(by_name)})")
        graph.outputs.clear()
        graph.outputs.extend(by_name[n] for n in keep)
    return bytes(onnx_ir.to_proto(program).SerializeToString())


def _weight_bytes(program: Any) -> int:
    return sum(v.const_value.nbytes for v in program.model.graph.initializers.values()
               if v.const_value is not None)


def _export_torchscript(torch: Any, module: Any, example: Sequence[Any] | Mapping[str, Any],
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
        "input_names": leaf_paths(example) if isinstance(example, Mapping) else names,
        "output_names": list(output_names),
        "dynamic_axes": dynamic_axes,
        **settings.options,
    }
    if settings.opset is not None:
        kwargs["opset_version"] = settings.opset
    if isinstance(example, Mapping):
        torch.onnx.export(module, (), buffer, kwargs=dict(example), **kwargs)
    else:
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


@contextlib.contextmanager
def _recorded_at_model_lines() -> Iterator[list[warnings.WarningMessage]]:
    """Record warnings (inside a `catch_warnings()`), each placed at the model's own line.

    Python files a warning where `stacklevel` points, which for a warning raised in a
    generator context manager or a library helper is `contextlib.py:144` or torch's
    code: the innermost frame of the call stack outside the standard library, torch,
    onnx, onnxscript and parity-gate is where the model asked for it."""
    caught: list[warnings.WarningMessage] = []

    def keep(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        if not _model_file(filename):
            frame = sys._getframe(1)
            while frame is not None and not _model_file(frame.f_code.co_filename):
                frame = frame.f_back  # type: ignore[assignment]
            if frame is not None:
                filename, lineno = frame.f_code.co_filename, frame.f_lineno
        caught.append(warnings.WarningMessage(message, category, filename, lineno, file, line))

    warnings.showwarning = keep  # restored by the enclosing catch_warnings()
    yield caught


_NOT_MODEL = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}) + tuple(
    os.path.dirname(m.__file__ or "") + os.sep for m in (warnings, contextlib))


def _model_file(filename: str) -> bool:
    """A file of the model's own (not the stdlib, nor torch/onnx/onnxscript/parity-gate)."""
    from parity_gate.hazards.context import in_library

    if not filename or filename.startswith(("<", _OWN)) or in_library(filename):
        return False
    return filename.startswith(_PACKAGES) or not filename.startswith(_NOT_MODEL)


_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Installed packages (a model library such as transformers) are model code, even where
# site-packages lies inside the standard library's folder.
_PACKAGES = tuple({sysconfig.get_paths()[k] + os.sep for k in ("purelib", "platlib")})


def _interesting_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    out: list[str] = []
    for w in caught:
        if issubclass(w.category, (DeprecationWarning, FutureWarning)):
            continue  # about the exporter's own API, not about the user's model
        text = f"{w.category.__name__}: {w.message}"
        if not any(n in text for n in _NOISE) and text not in out:
            out.append(text[:500])
    return out
