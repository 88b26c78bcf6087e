"""A quantized case's record (issue 52): each output on its quantization grid (steps) or
against the float model (SQNR), each quantize node of the QDQ graph, the first node that
fails with its owner, and the quantization hazards found (compare.steps)."""

from __future__ import annotations

from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Real, Record


@dataclass(frozen=True, config=CONFIG)
class QuantOutput(Record):
    """One output: in steps of its scale (pt2e) and its SQNR against the reference."""

    name: str
    verdict: str                       # rounding | one_step | rounding_mode | defect |
    #                                    sqnr_ok | sqnr_low
    sqnr_db: Real                      # inf: identical
    scale: Real | None = None          # the output's grid (pt2e), None for a float output
    max_steps: Real | None = None
    histogram: dict[str, int] = field(default_factory=dict)  # compare.steps.STEP_BINS
    summary: str = ""
    repro: str = ""                    # the first bad node's repro folder (pt2e), if written


@dataclass(frozen=True, config=CONFIG)
class QuantNode(Record):
    """One quantize node of the QDQ graph (its output's name), in graph order."""

    name: str
    op: str                            # the op whose output it quantizes
    verdict: str = ""                  # compare.steps.Steps.verdict (pt2e), "" (runtime)
    max_steps: Real | None = None      # ONNX Runtime, optimizations on (fused kernels)
    literal_steps: Real | None = None  # ONNX Runtime, optimizations off (Q/DQ as exported)
    sqnr_db: Real | None = None        # runtime flow: float ONNX vs the QDQ graph here
    saturated: Real = 0.0              # share of eager's values clamped at the grid's ends
    histogram: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, config=CONFIG)
class QuantizedResult(Record):
    flow: str                          # pt2e | runtime
    outputs: list[QuantOutput] = field(default_factory=list)
    nodes: list[QuantNode] = field(default_factory=list)
    first_bad: str = ""                # the first node beyond one step (pt2e)
    owner: str = ""                    # exporter | onnxruntime | quantizer
    why: str = ""
    hazards: list[str] = field(default_factory=list)
    min_sqnr_db: Real | None = None    # the runtime flow's budget
    quantize_s: Real = 0.0             # quantizing, calibrating and exporting the twin
    float_s: Real = 0.0                # the float export of the same module (for the cost)
    summary: str = ""
    repro: str = ""                    # the first bad node's repro folder (pt2e), if written
