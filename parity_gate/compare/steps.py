"""Quantized outputs measured in quantization steps, and quantization error as SQNR.

Pure maths on arrays. A float tolerance says nothing about an int8 graph: the unit that
matters is one step of the tensor's grid (its scale). Two correct implementations of the
same quantize agree exactly except where the value before rounding sits on a tie (a
half-way point: round-half-even in PyTorch and ONNX Runtime, half away from zero
elsewhere) or within float roundoff of one (eager multiplies by 1/scale, a fused kernel
requantizes an int32 sum): there they differ by exactly one step. So:

- <= 0.5 step: rounding of a dequantized float (the same grid point);
- exactly one step at or near a tie: a tie or rounding-mode difference, named;
- one step far from any tie on more than `OFF_TIE_SHARE` of the elements: a rounding
  rule that is not round-to-nearest (a floor, a truncation): a defect;
- more than one step anywhere: a defect.

The runtime flow's error is quantization by design: it is judged by the signal to
quantization-noise ratio against the float model (`sqnr_db`), not in steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

TIE_BAND = 0.02        # |fraction - 0.5| within this many steps: a near tie (float roundoff)
OFF_TIE_SHARE = 0.1    # one-step differences away from ties on more elements: not rounding
# (fewer are taken as carried from an upstream one-step difference: eager's value before
# rounding is computed from its own inputs, not ONNX Runtime's)
STEP_BINS = ("0", "<=0.5", "1", "2", "3-7", ">=8")  # the step histogram's bins


@dataclass(frozen=True)
class Steps:
    """One tensor compared on its quantization grid."""

    elements: int
    max_steps: float
    histogram: dict[str, int]           # STEP_BINS -> element count
    one_step: int = 0                   # elements exactly one step apart
    ties: int = 0                       # ... of them at an exact tie of eager's value
    near_ties: int = 0                  # ... within TIE_BAND of one
    off_tie: int = 0                    # ... far from any tie
    tie_rule: str = ""                  # "half_even_vs_away" when the ties say so
    first: tuple[int, ...] = field(default=())  # the first element beyond the limit
    limit: float = 1.0                  # steps tolerated (the manifest's int8/uint8 entry)

    @property
    def verdict(self) -> str:
        """rounding | one_step | rounding_mode | defect."""
        if self.max_steps > max(1.0, self.limit) + 1e-6:
            return "defect"
        if self.off_tie > max(1, OFF_TIE_SHARE * self.elements):
            return "rounding_mode"
        return "one_step" if self.one_step else "rounding"

    @property
    def failed(self) -> bool:
        return self.verdict in ("defect", "rounding_mode")

    def describe(self) -> str:
        head = f"{self.max_steps:.3g} step(s) at most over {self.elements} elements"
        if self.verdict == "defect":
            at = f" (first at {list(self.first)})" if self.first else ""
            return f"{head}: more than {max(1.0, self.limit):g} step(s){at}, a defect"
        if self.verdict == "rounding_mode":
            return (f"{head}: {self.off_tie} element(s) one step apart far from any tie: "
                    "a rounding rule that is not round-to-nearest (floor or truncation)")
        if self.verdict == "one_step":
            rule = {"half_even_vs_away": "round-half-even vs half away from zero"}.get(
                self.tie_rule, "rounding of a value within float roundoff of a tie")
            return (f"{head}: {self.one_step} one-step difference(s), {self.ties} at exact "
                    f"ties and {self.near_ties} near one ({rule})")
        return f"{head}: rounding only"


def histogram(steps: np.ndarray) -> dict[str, int]:
    """Element counts per STEP_BINS bin of |difference| in steps."""
    a = np.abs(np.asarray(steps, np.float64)).ravel()
    r = np.rint(a)
    edges = [a == 0, (a > 0) & (a <= 0.5), (a > 0.5) & (r <= 1), r == 2,
             (r >= 3) & (r <= 7), r >= 8]
    return {label: int(np.count_nonzero(m)) for label, m in zip(STEP_BINS, edges, strict=True)}


def in_steps(ref: np.ndarray, got: np.ndarray, scale: np.ndarray | float,
             pre: np.ndarray | None = None, zero_point: np.ndarray | float = 0,
             limit: float = 1.0) -> Steps:
    """`got` against `ref` in units of `scale` (broadcast: per tensor or per channel).
    `pre`: eager's value before rounding, in steps (x / scale + zero point), which tells a
    tie from a rounding-mode difference (`zero_point` says where zero is on that grid);
    without it every one-step difference counts as a near tie. `limit`: steps tolerated
    (never below one: a tie is no defect)."""
    r = np.asarray(ref, np.float64)
    g = np.asarray(got, np.float64)
    s = np.asarray(scale, np.float64)
    with np.errstate(all="ignore"):
        d = np.where(np.isnan(r) & np.isnan(g), 0.0, np.abs(g - r) / s)
    d = np.where(np.isfinite(d), d, np.inf)
    hist = histogram(d)
    biggest = float(d.max()) if d.size else 0.0
    first: tuple[int, ...] = ()
    bound = max(1.0, limit) + 1e-6
    if biggest > bound:
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(d > bound)), d.shape))
    one = (d > 0.5) & (np.rint(d) == 1)
    ones = int(np.count_nonzero(one))
    if pre is None or not ones:
        return Steps(int(d.size), biggest, hist, ones, 0, ones, 0, "", first, limit)
    frac = np.abs(np.asarray(pre, np.float64) - np.floor(np.asarray(pre, np.float64)) - 0.5)
    frac = np.broadcast_to(frac, d.shape)
    ties = one & (frac == 0)
    near = one & (frac > 0) & (frac <= TIE_BAND)
    off = one & (frac > TIE_BAND)
    rule = ""
    if np.any(ties):  # eager rounds half to even: is the other side away from zero?
        p = np.broadcast_to(np.asarray(pre, np.float64), d.shape)[ties]
        other = np.broadcast_to(g / s, d.shape)[ties] - np.broadcast_to(r / s, d.shape)[ties]
        zp = np.broadcast_to(np.asarray(zero_point, np.float64), d.shape)[ties]
        away = np.sign(other) == np.sign(p - zp)
        rule = "half_even_vs_away" if bool(np.all(away)) else "tie"
    return Steps(int(d.size), biggest, hist, ones, int(np.count_nonzero(ties)),
                 int(np.count_nonzero(near)), int(np.count_nonzero(off)), rule, first, limit)


def int_steps(ref_q: np.ndarray, got_q: np.ndarray, pre: np.ndarray | None = None,
              zero_point: np.ndarray | float = 0) -> Steps:
    """Two quantized (integer) tensors of the same grid: their difference is in steps."""
    return in_steps(np.asarray(ref_q, np.int64), np.asarray(got_q, np.int64), 1.0, pre,
                    zero_point)


def sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    """Signal to quantization-noise ratio of `got` against `ref`, in dB (inf: identical;
    -inf: a non-finite value on one side, or a zero signal with noise)."""
    r = np.asarray(ref, np.float64).ravel()
    g = np.asarray(got, np.float64).ravel()
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(g))):
        return -math.inf
    noise = float(np.sum((r - g) ** 2))
    signal = float(np.sum(r ** 2))
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


@dataclass(frozen=True)
class NodeSteps:
    """One quantize node of the QDQ graph: eager's grid values against ONNX Runtime's,
    with all optimizations (the fused QLinear kernels) and with none (the graph as
    exported, Q/DQ run literally); its parameters on both sides."""

    name: str
    optimized: Steps
    literal: Steps | None
    params_match: bool = True       # scale, zero point and axis as eager's node has them
    params_note: str = ""
    representable: bool = True      # a normal float32 scale, a zero point inside the range
    saturated: float = 0.0          # share of eager's values clamped at the range's ends


OWNERS = ("exporter", "onnxruntime", "quantizer")


def blame(nodes: list[NodeSteps]) -> tuple[NodeSteps, str, str] | None:
    """The first node (in graph order) that fails, its owner and why: the exporter when
    its Q/DQ parameters differ from eager's or the graph run literally already fails there;
    the quantizer when its scale or zero point is not representable; ONNX Runtime's fused
    kernel when only the optimized run fails. None: every node within one step."""
    for node in nodes:
        if not node.optimized.failed and not (node.literal and node.literal.failed):
            continue
        if not node.params_match:
            return node, "exporter", f"the exported Q/DQ parameters differ: {node.params_note}"
        if not node.representable:
            return node, "quantizer", f"the quantizer's parameters: {node.params_note}"
        if node.literal is not None and node.literal.failed:
            return node, "exporter", ("the exported graph run op by op (no fusion) already "
                                      f"differs: {node.literal.max_steps:.3g} step(s), "
                                      f"{node.literal.verdict.replace('_', ' ')}")
        literal = f"{node.literal.max_steps:.3g}" if node.literal is not None else "not run"
        return node, "onnxruntime", (
            f"only ONNX Runtime's fused kernel differs: {node.optimized.max_steps:.3g} step(s) "
            f"fused, {literal} op by op")
    return None
