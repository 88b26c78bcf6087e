"""The `parity.yml` schema and its resolution into per-module settings.

The pydantic models are the single source of truth: validation, the JSON Schema
shipped for editors (`parity-gate schema`) and the README's key reference all
come from them. Loading with line numbers lives in `manifest_loader`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    PrivateAttr,
    model_validator,
)
from pydantic_core import PydanticCustomError

from parity_gate.hazards.config import HazardSettings
from parity_gate.hazards.config import merge as merge_hazards
from parity_gate.hazards.runtimes import TargetRuntime

FloatDType = Literal["float32", "float16", "bfloat16", "float64"]
TensorDType = Literal[
    "float32", "float16", "bfloat16", "float64",
    "int8", "int16", "int32", "int64", "uint8", "bool",
]
ProviderName = Literal["cpu", "cuda", "tensorrt"]
Special = Literal[
    "nan", "inf", "-inf", "zero", "neg_zero", "denormal", "tiny", "huge",
    "int_min", "int_max",
]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$", min_length=1, max_length=100)]

FLOAT_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "float64")


def _not_a_flag(value: Any) -> Any:
    if isinstance(value, bool):  # pydantic would read `true` as 1 byte
        raise PydanticCustomError("byte_size", "not a size")
    return value


def _positive(value: ByteSize) -> ByteSize:
    if value <= 0:
        raise PydanticCustomError("byte_size", "not a size")
    return value


# Bytes as an integer or a string with a unit (`2GiB`, `512MB`): pydantic's ByteSize parser.
Size = Annotated[ByteSize, BeforeValidator(_not_a_flag), AfterValidator(_positive)]

GiB = 1 << 30
DEFAULT_MAX_CASE_BYTES = 2 * GiB

# Starting points from the field (see README "Tolerances"): CPU fp32 is tight,
# half precisions lean on rtol. A team overrides them per module and output.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-3),
    "float64": (1e-7, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 2e-2),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Tolerance(_Strict):
    """Elementwise bound `|got - ref| <= atol + rtol * |ref|`."""

    atol: float = Field(ge=0, allow_inf_nan=False,
                        description="absolute floor, matters near zero")
    rtol: float = Field(ge=0, allow_inf_nan=False,
                        description="relative part, scales with |reference|")


ToleranceTable = dict[FloatDType, Tolerance]


class ExportSettings(_Strict):
    """How `torch.onnx.export` is called."""

    exporter: Literal["dynamo", "torchscript", "transformers"] = Field(
        "dynamo", description="dynamo: torch.export + onnxscript (default); torchscript: "
        "legacy; transformers: transformers' own ONNX exporter (`transformers.exporters`, its "
        "patches and fixes over torch.export; a transformers model, with its cache object "
        "when the module declares `cache`)"
    )
    opset: int | None = Field(
        None, ge=7, le=25, description="ONNX opset; default: the exporter's own default"
    )
    batch_size: int | None = Field(
        None, ge=2,
        description="batch size of the example used for the one export per module and dtype "
        "(default: smallest tested batch size >= 2, else 2; 1 would let torch.export "
        "specialise the batch dim)",
    )
    optimize: bool = Field(True, description="dynamo only: run the onnxscript graph optimizer")
    options: dict[str, Any] = Field(
        default_factory=dict, description="extra keyword arguments passed to torch.onnx.export"
    )


class PerformanceSettings(_Strict):
    """The performance check: ONNX Runtime's latency against eager's, where its nodes ran,
    and its memory (README: Performance and placement)."""

    measure: bool = Field(
        True, description="measure latency, placement and memory of every case that ran "
        "(false: none of it, and nothing below is gated)")
    max_slowdown: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="fail a case whose ONNX/eager time ratio is above this even at the lower "
        "end of its 95% interval; null (default): latency is reported, never gated, since a "
        "shared runner's load makes single figures noisy")
    max_fallback_nodes: int | None = Field(
        0, ge=0, description="on a GPU provider, fail a case with more nodes than this "
        "placed on another provider than the requested one (null: report only)")
    memcpy: Literal["fail", "warn", "off"] = Field(
        "warn", description="MemcpyToHost/MemcpyFromHost nodes ONNX Runtime inserted between "
        "devices: fail the case, warn, or ignore")
    budget_s: float = Field(
        0.05, gt=0, le=60, allow_inf_nan=False,
        description="seconds of timing per case, or a tenth of what the case's share of "
        "its module's export, check and session cost, whichever is more: eager and ONNX "
        "Runtime are timed in interleaved pairs until the ratio's 95% interval is narrow "
        "(high/low <= 1.15, at least 8 pairs) or this is spent (then on to 6 pairs, a real "
        "interval, within twice this); with max_slowdown set, a ratio whose interval still "
        "straddles it gets up to 20 times this, to decide")


class Settings(_Strict):
    """Settings a module inherits from `defaults` and may override."""

    batch_sizes: list[Annotated[int, Field(ge=1, strict=True)]] | None = Field(
        None, min_length=1, description="batch sizes every fixture set is run at"
    )
    dtypes: list[FloatDType] | None = Field(
        None, min_length=1,
        description="dtypes the module and its floating inputs are cast to, one export each",
    )
    tolerances: ToleranceTable | None = Field(
        None, description="per-dtype tolerance, merged over the built-in defaults; one set "
        "here is a contract the float64 check does not waive (docs/explanation/tolerances.md)"
    )
    export: ExportSettings | None = Field(
        None, description="how torch.onnx.export is called (merged key by key)"
    )
    timeout_s: float | None = Field(
        None, gt=0, description="wall-clock limit for one module's export and all its runs, "
        "counted from when its worker is ready (start-up is bounded apart, 120 s)"
    )
    reference_device: Literal["cpu", "cuda"] | None = Field(
        None, description="where eager computes the reference (default cpu)"
    )
    providers: list[ProviderName] | None = Field(
        None, min_length=1,
        description="subset of the manifest's providers this module runs on",
    )
    hazards: HazardSettings | None = Field(
        None, description="per export-hazard rule: fail | warn | {action: off, reason: ...} "
        "(merged rule by rule over the defaults)"
    )
    target_runtime: TargetRuntime | None = Field(
        None, description="the ONNX Runtime the models are deployed on, e.g. "
        "`onnxruntime>=1.16` (checked by the opset-too-new rule)"
    )
    max_case_bytes: Size | None = Field(
        None, description="most input bytes one case may hold (every input tensor of all its "
        "samples, from the declared shapes, dtypes, batch size and largest `dims`; for a "
        "`file` set, from its file's array headers, never its data: the rows a case takes, "
        "and the file itself, which a worker loads whole); a bigger case or file is a "
        "manifest error, found before anything runs (`check`, and `run` before any worker "
        "starts). Bytes or a size such as `8GiB`, `512MB` (default 2GiB)"
    )
    performance: PerformanceSettings | None = Field(
        None, description="the performance check: latency ratio, placement, memory "
        "(merged key by key)"
    )
    shapes: Literal["auto", "declared"] | None = Field(
        None, description="`auto`: after each export, run extra cases (probes) at sizes of "
        "the dynamic dims chosen from the export's own assumptions (its guards, deferred "
        "runtime asserts, ranges: a relation kept and broken, the export size +- 1, range "
        "bounds); `declared` (default): only the fixture sets' and batch sizes. "
        "`parity-gate check --explain` lists the probes (docs/how-to/shapes-auto.md)"
    )
    max_probes: Annotated[int, Field(ge=0)] | None = Field(
        None, description="`shapes: auto`: most probe sizes per module and dtype, most "
        "telling first (default 8)"
    )
    small_dims: list[Name] | None = Field(
        None, description="`shapes: auto`: dynamic dims that can be 0 or 1 where the model "
        "is served: also probed at 0 and 1 (torch.export specialises those sizes, so they "
        "are probed only where this says they occur)"
    )
    worker_memory: Size | None = Field(
        None, description="memory limit of the worker running this module (RLIMIT_DATA); a "
        "case that needs more is `out_of_memory` and the module's other cases still run "
        "(default: 80% of the machine's or container's memory / workers, at least 2GiB)"
    )


class InputSpec(_Strict):
    name: Name = Field(
        description="the forward() parameter it is passed as, by keyword (checked against "
        "forward()'s signature); also the graph input's name. A dotted name is a part of a "
        "structured argument: `images.0`, `images.1` pass `images=[t0, t1]` (a detector's "
        "list of images), `batch.mask` passes `batch={'mask': t}`; each part is its own "
        "fixture tensor and graph input"
    )
    dynamic: dict[int, Name] = Field(
        default_factory=lambda: {0: "batch"},
        description="dims exported as dynamic: index → symbol (default {0: batch}; {} for static)",
    )
    shapes: Literal["auto", "declared"] | None = Field(
        None, description="`auto`: also probe this input's dynamic dims at sizes chosen from "
        "what the export assumed about them; `declared`: only the fixture sets' sizes "
        "(default: the module's `shapes`)"
    )


class OutputSpec(_Strict):
    name: Name = Field(
        description="the output's name from the module's own structure (a ModelOutput field "
        "or dict key such as `logits`, `b.0` for an item of a nested tuple); outputs with no "
        "names (a tensor, a tuple) are named in order"
    )
    task: Literal["classification"] | None = Field(
        None, description="classification: also check top-1 agreement over the last axis"
    )
    min_top1_agreement: float = Field(
        1.0, ge=0, le=1, description="classification: share of samples whose top-1 must agree"
    )
    tolerances: ToleranceTable | None = Field(
        None, description="per-dtype tolerance for this output only"
    )
    ties: bool = Field(
        False, description="a discrete output (rounded, compared, an index) may differ where "
        "a float64 run shows every differing element within one rounding of a boundary "
        "(a tie: either side is a correct rounding); off: such a difference fails"
    )


class TensorSpec(_Strict):
    """One input tensor of a generated fixture set."""

    shape: list[int | str] = Field(
        description="dims: integers, `batch` (the batch size) or a symbol from `dims`"
    )
    dtype: TensorDType = Field(
        "float32", description="floating inputs are cast to the module dtype under test"
    )
    distribution: Literal["normal", "uniform", "randint", "bernoulli", "padding"] | None = Field(
        None, description="default: normal for floats, randint for ints, bernoulli for bool; "
        "padding: an attention mask, per row 1 for a random number of positions along the "
        "last axis (at least `min_length`), 0 for the padding after them"
    )
    mean: float = Field(0.0, description="normal: mean")
    std: float = Field(1.0, ge=0, description="normal: standard deviation")
    low: float | None = Field(
        None, description="uniform/randint lower bound, inclusive (default 0); per input"
    )
    high: float | None = Field(
        None, description="uniform/randint upper bound, exclusive (default: 1 for uniform; "
        "100 for randint, capped at the integer dtype's maximum + 1; for token ids use the "
        "vocabulary size); per input"
    )
    p: float = Field(0.5, ge=0, le=1, description="bernoulli probability of True/1")
    min_length: int = Field(
        1, ge=0, description="padding: fewest unpadded positions in a row (the longest is the "
        "whole axis; row 0 is always unpadded)"
    )
    padding_side: Literal["right", "left"] = Field(
        "right", description="padding: where the zeros go (left for decoder-style batches)"
    )
    specials: list[Special] | None = Field(
        None,
        description="edge sets: special values for this input (overrides the set's; [] for "
        "index inputs such as token ids that must stay in range)",
    )

    @model_validator(mode="after")
    def _bounds(self) -> TensorSpec:
        if self.low is not None and self.high is not None and self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be greater than low ({self.low})")
        return self


class _Generated(_Strict):
    inputs: dict[Name, TensorSpec] = Field(min_length=1)
    samples: int = Field(1, ge=1, le=1000, description="samples per batch size")
    seed: int | None = Field(None, description="default: the manifest seed")
    dims: dict[Name, Annotated[int, Field(ge=0)] | Annotated[
        list[Annotated[int, Field(ge=0)]], Field(min_length=1)]] = Field(
        default_factory=dict,
        description="sizes of the symbols used in shapes; a list runs each size as its own "
        "cases, e.g. `seq: [8, 32]` gives fixture ids `text@seq=8` and `text@seq=32`"
    )


class RandomFixture(_Generated):
    """Seeded random tensors."""

    kind: Literal["random"]


class EdgeFixture(_Generated):
    """Normal data with the dtype's special values mixed in."""

    kind: Literal["edge"]
    specials: list[Special] | None = Field(
        None,
        description="special values to mix in (default: all that apply to each dtype)",
    )
    fraction: float = Field(
        0.05, gt=0, le=1, description="share of elements replaced by special values"
    )
    empty: bool = Field(True, description="also run an empty batch (batch size 0)")


class FileFixture(_Strict):
    """Recorded inputs from `.npy`, `.npz` or `.pt` (loaded with weights_only=True)."""

    kind: Literal["file"]
    path: str = Field(description="relative to the manifest's folder")
    keys: dict[Name, str] = Field(
        default_factory=dict,
        description="input name → array key in the file (default: the input name)",
    )
    samples: int = Field(
        1, ge=1, le=1000,
        description="samples per batch size; rows are taken in order along axis 0 and wrap",
    )


FixtureSet = Annotated[RandomFixture | EdgeFixture | FileFixture, Field(discriminator="kind")]


class ProviderSettings(_Strict):
    required: bool = Field(
        False, description="true: an unavailable provider is an error, not a skip"
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="ONNX Runtime provider options"
    )


class DetectionSpec(_Strict):
    """How a detector's outputs are compared (`compare.detection`)."""

    iou: float = Field(0.5, gt=0, le=1, description="least IoU (with the same label) for an "
                       "ONNX box to count as the same object as an eager one")


class CacheSpec(_Strict):
    """The module is a decoder with a KV cache (transformers' `past_key_values`)."""

    kind: Literal["decoder", "encoder_decoder"] = Field(
        "decoder", description="decoder: a `DynamicCache` (GPT-2, Llama, Qwen2); "
        "encoder_decoder: the decoder of an encoder-decoder model (T5, Whisper) with an "
        "`EncoderDecoderCache`, taking `encoder_hidden_states` as an input (the encoder "
        "runs once, outside the graph)")
    past_lengths: list[Annotated[int, Field(ge=0, strict=True)]] = Field(
        default_factory=lambda: [0, 7], min_length=1,
        description="cache lengths to test, each its own cases (fixture id `text@past=7`); "
        "0 is the prefill. The gate builds the cache tensors from the model's config "
        "(layers, key/value heads, head dim), graph inputs `past_<i>_key`/`past_<i>_value` "
        "with the past length a dynamic dim, and compares every present-cache output "
        "(`present.<i>.key`, `present.<i>.value`) as its own output")
    mask: Name | None = Field(
        None, description="the input that spans past and new tokens (its last dim becomes "
        "past + sequence; the past is attended); default `attention_mask` for a decoder "
        "when it is an input, none for an encoder-decoder (its `attention_mask` is the "
        "encoder's)")


class GenerationSpec(_Strict):
    """A greedy-generation parity check of a module with a `cache`."""

    steps: int = Field(16, ge=1, le=512, description="greedy steps (step 1 is the prefill)")
    prompt: Name = Field(
        description="fixture set of the prompt: `input_ids` for a decoder; the encoder's "
        "inputs (e.g. `input_ids`, `input_features`) for an encoder-decoder")
    batch_size: int = Field(1, ge=1, le=64, description="prompts generated side by side")


class TaskSpec(_Strict):
    """Task-metric parity on a labelled slice (compare.task): the metric for eager and for
    each exported run on the same samples, the paired delta with its interval, and a
    verdict on the interval's bound against `max_drop`."""

    name: Name = Field("task", description="the slice's name: the case id's fixture part "
                       "is `<name>@task`")
    data: str | None = Field(
        None, description="the slice, relative to the manifest's folder: an `.npz` file, or "
        "a folder of `.npy` files (read by memory map, batch by batch), holding every input "
        "and the labels")
    keys: dict[Name, str] = Field(
        default_factory=dict, description="input name → array key (file stem for a folder; "
        "default: the input name)")
    labels: str = Field("labels", description="the labels' array key")
    loader: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$",
        description="instead of `data`: `package.module:callable` taking the batch size and "
        "returning an iterable of (inputs by name, labels) batches of numpy arrays")
    output: str | None = Field(None, description="the output the metric reads (default: the "
                               "first)")
    metric: Literal["top1", "topk", "f1_macro", "f1_micro", "mae", "mse"] = Field(
        "top1", description="top-1 / top-k accuracy, F1 (macro, micro) over the argmax, or "
        "mean absolute / squared error of a regression output")
    k: int = Field(5, ge=1, le=1000, description="topk: how many of the best scores count")
    max_drop: float = Field(
        0.5, ge=0, description="the largest worsening tolerated: points of accuracy or F1 "
        "(0.5 = half a percentage point), the error's own unit for mae and mse")
    level: float = Field(0.95, gt=0.5, lt=1, description="the interval's confidence level")
    batch_size: int = Field(256, ge=1, le=65536, description="samples per ONNX Runtime run")
    samples: int = Field(0, ge=0, description="the first N samples only (0: all)")
    resamples: int = Field(2000, ge=200, le=100000, description="paired bootstrap resamples")
    seed: int = Field(0, description="the bootstrap's seed (a run is reproducible)")

    @model_validator(mode="after")
    def _one_source(self) -> TaskSpec:
        if (self.data is None) == (self.loader is None):
            raise ValueError("give exactly one of `data` (a file or folder of arrays) and "
                             "`loader` (an import path)")
        return self


def _one_step() -> dict[Literal["int8", "uint8"], float]:
    return {"int8": 1.0, "uint8": 1.0}


class QuantizeSpec(_Strict):
    """Quantized parity (docs/how-to/quantized-models.md): the module quantized to int8
    and checked as a QDQ graph, in float32, on each fixture set and provider."""

    flow: Literal["pt2e", "runtime"] = Field(
        description="pt2e: quantized in PyTorch (torchao's prepare_pt2e/convert_pt2e, X86 "
        "quantizer, outputs quantized too), exported to a QDQ graph, compared with the "
        "converted model in eager in quantization steps; runtime: the float export "
        "quantized by ONNX Runtime's quantize_static (QDQ), compared with the float model "
        "by SQNR per output and per node")
    calibration: Name = Field(description="the fixture set that calibrates the activation "
                              "ranges")
    calibration_batches: int = Field(4, ge=1, le=256, description="calibration batches "
                                     "(samples of the set)")
    batch_size: int = Field(8, ge=1, le=4096, description="rows per calibration batch and "
                            "per checked batch (case id `<set>@quant=<flow>/b<batch_size>`)")
    reduce_range: bool = Field(
        True, description="weights on 7 bits: ONNX Runtime's uint8 x int8 kernels on x86 "
        "CPUs without VNNI add products in pairs into int16 and saturate with full-range "
        "weights (false: full range, as an AVX512-VNNI or ARM target runs it)")
    max_steps: dict[Literal["int8", "uint8"], Annotated[float, Field(ge=1)]] = Field(
        default_factory=_one_step, description="pt2e flow: the "
        "tolerance of an output on an int8 / uint8 grid, in steps of its scale (1: a tie or "
        "rounding-mode difference passes, more fails; never below 1)")
    min_sqnr_db: float = Field(20.0, description="runtime flow: the least SQNR (dB) of each "
                               "output against the float model")
    per_channel: bool = Field(True, description="runtime flow: per-channel weight scales")


class ModuleSpec(Settings):
    name: Name = Field(description="unique; the first part of every case id")
    factory: str = Field(
        pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$",
        description="`package.module:callable` returning the nn.Module",
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="factory keyword arguments")
    inputs: list[InputSpec] = Field(min_length=1)
    outputs: list[OutputSpec] | None = Field(
        None, description="checks (task, tolerances) of some outputs, by name; default names "
        "come from the module's outputs (ModelOutput fields, dict keys, `b.0`), else "
        "output0, output1, ..."
    )
    fixtures: list[Name] = Field(min_length=1, description="fixture sets to run")
    detections: DetectionSpec | None = Field(
        None, description="the module returns detections, per image `boxes` [N, 4], `scores` "
        "[N] and `labels` [N] of data-dependent count (torchvision's detectors): each image's "
        "are compared as a set (the count, then boxes matched by IoU with the same label, "
        "coordinates and scores within the tolerance), not element by element")
    cache: CacheSpec | None = Field(
        None, description="a decoder with a KV cache: cases per past length, the cache "
        "passed as the model expects and every present-cache output compared")
    generation: GenerationSpec | None = Field(
        None, description="also run N greedy steps in eager and in ONNX Runtime (each step's "
        "present cache fed back as the next past) and compare tokens and every step's logits "
        "(case id `<module>/<dtype>/<prompt>@generate=<steps>/b<batch>/<provider>`); needs "
        "`cache`")
    task: TaskSpec | None = Field(
        None, description="also check the task metric on a labelled slice, eager against "
        "each exported run on the same samples (case id `<module>/<dtype>/<name>@task/"
        "b<batch_size>/<provider>`)")
    quantize: QuantizeSpec | None = Field(
        None, description="also check the module quantized to int8 (case id `<module>/"
        "float32/<set>@quant=<flow>/b<batch_size>/<provider>`; needs float32 in `dtypes`); "
        "with `task` and the runtime flow, the task metric on the QDQ graph too "
        "(`<name>@task@quant=runtime`)")
    skip: str | None = Field(None, description="skip every case of this module, with this reason")
    # "inputs[1].name" -> "parity.yml:31:9: modules[2].inputs[1].name", filled by the loader so
    # that problems only the worker can see (forward()'s signature) are reported where to edit.
    _where: dict[str, str] = PrivateAttr(default_factory=dict)

    def locate(self, key: str) -> str:
        """`file:line:col: key.path` of `key` (e.g. `inputs[1].name`) of this module."""
        return self._where.get(key) or self._where.get("") or f"module {self.name}: {key}"


def _cpu_only() -> dict[ProviderName, ProviderSettings]:
    return {"cpu": ProviderSettings(required=True)}


class LocaliseSettings(_Strict):
    """The follow-up checks on failing cases (`parity-gate run --no-localise` skips them)."""

    max_cases: Annotated[int, Field(ge=0)] = Field(
        3, description="failing cases (worst first) that get the expensive checks: first "
        "divergent layer, the op to blame, repro folders; the others get the cheap ones")
    step_timeout_s: Annotated[float, Field(gt=0)] = Field(
        120.0, description="time limit of one check of one case")
    artefacts: Literal["fail", "pass"] = Field(
        "fail", description="a mismatch the float64 check calls a tolerance artefact (ONNX "
        "Runtime as close to float64 as eager is): `fail` keeps it failing, `pass` passes it "
        "with that reason")


class Manifest(_Strict):
    """Top level of `parity.yml`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra={
        "anyOf": [{"required": ["include"]}, {"required": ["fixtures", "modules"]}]})

    version: Literal[1] = Field(1, description="manifest format version")
    include: list[str] = Field(
        default_factory=list,
        description="other manifests (relative to this one) whose fixture sets, modules, "
        "providers and defaults join this one; this file's own settings win",
    )
    python_path: list[str] = Field(
        default_factory=list,
        description="folders (relative to the manifest) added to sys.path for factories",
    )
    seed: int = Field(0, description="base seed for fixtures and torch")
    defaults: Settings = Field(
        default_factory=Settings, description="settings every module inherits"
    )
    providers: dict[ProviderName, ProviderSettings] = Field(
        default_factory=_cpu_only, min_length=1,
        description="ONNX Runtime execution providers to run every case on",
    )
    fixtures: dict[Name, FixtureSet] = Field(
        default_factory=dict, description="named fixture sets; a set provides every input of "
        "a module (required, here or in an included file)"
    )
    modules: list[ModuleSpec] = Field(
        default_factory=list,
        description="the modules under test (required, here or in an included file)",
    )
    localise: LocaliseSettings = Field(
        default_factory=LocaliseSettings,
        description="follow-up checks on failing cases: how many get the expensive ones, "
        "their time limit, and whether a tolerance artefact still fails")
    # (fixture set, key) → "parity.yml:12:5: fixtures.NAME.key", filled by the loader, so
    # that problems found when a set's file is opened are reported where to edit.
    _fixture_where: dict[tuple[str, str], str] = PrivateAttr(default_factory=dict)

    def locate_fixture(self, name: str, key: str = "") -> str:
        """`file:line:col: fixtures.NAME[.key]` of a fixture set, or of one of its keys."""
        return (self._fixture_where.get((name, key)) or self._fixture_where.get((name, ""))
                or f"fixtures.{name}" + (f".{key}" if key else ""))


# ---------------------------------------------------------------------------
# Resolution: defaults + module overrides → what the worker needs.

BUILTIN_SETTINGS = Settings(
    batch_sizes=[1, 4, 7],
    dtypes=["float32"],
    tolerances={k: Tolerance(atol=a, rtol=r) for k, (a, r) in DEFAULT_TOLERANCES.items()},
    export=ExportSettings(),
    timeout_s=600.0,
    reference_device="cpu",
    max_case_bytes=ByteSize(DEFAULT_MAX_CASE_BYTES),
    performance=PerformanceSettings(),
    shapes="declared",
    max_probes=8,
)


def merge_tolerances(*tables: ToleranceTable | None) -> dict[FloatDType, Tolerance]:
    out: dict[FloatDType, Tolerance] = {}
    for table in tables:
        out.update(table or {})
    return out


def merge_export(*layers: ExportSettings | None) -> ExportSettings:
    """Field-wise merge: a module overriding `opset` keeps the defaults' `exporter`."""
    data: dict[str, Any] = {}
    for layer in layers:
        if layer is not None:
            data.update({k: getattr(layer, k) for k in layer.model_fields_set})
    return ExportSettings(**data)


def merge_performance(*layers: PerformanceSettings | None) -> PerformanceSettings:
    """Field-wise merge: a module setting `max_slowdown` keeps the defaults' `memcpy`."""
    data: dict[str, Any] = {}
    for layer in layers:
        if layer is not None:
            data.update({k: getattr(layer, k) for k in layer.model_fields_set})
    return PerformanceSettings(**data)


def resolve_settings(manifest: Manifest, module: ModuleSpec) -> Settings:
    """The effective settings of one module (every field set)."""
    layers = (BUILTIN_SETTINGS, manifest.defaults, module)

    def pick(attr: str) -> Any:
        value = None
        for layer in layers:
            v = getattr(layer, attr)
            if v is not None:
                value = v
        return value

    return Settings(
        batch_sizes=pick("batch_sizes"),
        dtypes=pick("dtypes"),
        tolerances=merge_tolerances(*(layer.tolerances for layer in layers)),
        export=merge_export(*(layer.export for layer in layers)),
        timeout_s=pick("timeout_s"),
        reference_device=pick("reference_device"),
        providers=pick("providers") or list(manifest.providers),
        hazards=merge_hazards(*(layer.hazards for layer in layers)),
        target_runtime=pick("target_runtime"),
        max_case_bytes=pick("max_case_bytes"),
        worker_memory=pick("worker_memory"),
        shapes=pick("shapes"),
        max_probes=pick("max_probes"),
        small_dims=pick("small_dims"),
        performance=merge_performance(*(layer.performance for layer in layers)),
    )


def output_names(module: ModuleSpec, count: int) -> list[str]:
    named = [o.name for o in module.outputs or []]
    return named + [f"output{i}" for i in range(len(named), count)]


def manifest_dir(path: Path) -> Path:
    return path.resolve().parent
