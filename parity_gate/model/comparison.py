"""The record of one reference/actual comparison (the maths that fills it is `compare`)."""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Any

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Real, Record


@dataclass(frozen=True, config=CONFIG)
class Tolerance(Record):
    """Elementwise tolerance: pass iff ``|got - ref| <= atol + rtol*|ref|``."""

    atol: float
    rtol: float


class Verdict(str, enum.Enum):
    """One value per outcome class; the value is the stable lower_snake name."""

    PASS = "pass"
    SHAPE = "shape"
    DTYPE = "dtype"
    NON_FINITE = "non_finite"
    REGION = "region"
    OFFSET = "offset"
    SIGN = "sign"
    ROUNDING = "rounding"
    LABEL_FLIP = "label_flip"
    COUNT = "count"  # detections: the two sides find a different number of objects
    SIGNED_ZERO = "signed_zero"
    MISMATCH = "mismatch"  # generic / scattered


@dataclass(frozen=True, config=CONFIG)
class Comparison(Record):
    """Everything known about one reference/actual pair.

    ``worst_index`` is the element furthest beyond its allowance, i.e. the
    one with the largest ``|got - ref| - rtol*|ref|`` (it sets needed_atol),
    or, when that is <= 0 everywhere, the largest ``|got - ref|``; with a
    one-sided NaN/Inf it is the first such element; for integers the first
    mismatch. ``first_index`` is the first out-of-tolerance element in
    row-major order. Indices are tuples over the full shape.
    """

    name: str
    passed: bool
    verdict: Verdict
    reason: str
    shape_ref: str
    shape_got: str
    dtype_ref: str
    dtype_got: str
    atol: Real
    rtol: Real
    max_abs: Real | None = None
    max_rel: Real | None = None
    worst_index: tuple[int, ...] | None = None
    ref_value: Real | None = None
    got_value: Real | None = None
    ref_bits: str | None = None
    got_bits: str | None = None
    ulp: int | None = None
    mismatch_count: int = 0
    total: int = 0
    mismatch_fraction: Real = 0.0
    first_index: tuple[int, ...] | None = None
    needed_atol: Real | None = None
    needed_rtol: Real | None = None
    histogram: dict[str, int] = field(default_factory=dict)
    median_abs: Real | None = None
    p99_abs: Real | None = None
    nonfinite: dict[str, Any] = field(default_factory=dict)
    signed_zeros: int | None = None
    region: dict[str, Any] | None = None
    task: str | None = None
    min_top1_agreement: Real | None = None
    top1_agreement: Real | None = None
    flipped: list[int] = field(default_factory=list)
    flipped_count: int = 0
    # top-1 changes between labels the dtype cannot tell apart (see compare.decide.TIE_ULPS):
    # reported here, apart from the flips, and left out of top1_agreement
    tied: list[int] = field(default_factory=list)
    tie_count: int = 0

    def __bool__(self) -> bool:
        return self.passed

    def headline(self) -> str:
        """One line for a JUnit failure message."""
        head = f"{self.name}: {self.verdict.value}"
        if self.verdict in (Verdict.SHAPE, Verdict.DTYPE):  # the reason names its verdict
            return f"{self.name}: {self.reason}"
        parts = [head]
        if self.total:
            parts.append(f"{self.mismatch_count}/{self.total} out of tolerance")
        if self.worst_index is not None:
            fmt = value_format(self.dtype_ref)
            ulp = "" if self.ulp is None else f" ({self.ulp} ulp)"
            parts.append(
                f"worst {list(self.worst_index)}: ref={fmt_number(self.ref_value, fmt)} "
                f"got={fmt_number(self.got_value, fmt)}{ulp}"
            )
        if self.needed_atol is not None or self.needed_rtol is not None:
            parts.append(
                f"needs atol>={fmt_number(self.needed_atol)} (rtol={self.rtol:g}) "
                f"or rtol>={fmt_number(self.needed_rtol)} (atol={self.atol:g})"
            )
        if self.top1_agreement is not None:
            ties = f" ({self.tie_count} near-tie(s) ignored)" if self.tie_count else ""
            parts.append(f"top1 agreement {self.top1_agreement:.4f}{ties}")
        return "; ".join(parts)


def fmt_number(x: float | None, spec: str = ".3g") -> str:
    return "None" if x is None else format(x, spec)


def value_format(dtype: str) -> str:
    """Enough digits to tell two values of `dtype` apart."""
    return {"float16": ".5g", "bfloat16": ".4g", "float32": ".9g"}.get(dtype, ".17g")
