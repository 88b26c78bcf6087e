"""Declarative op records, in the spirit of onnxscript's `TorchLibOpInfo`.

A variant is data, not code: its call is a Python expression over named
arguments (`"torch.atan2(y, x)"`), so a record pickles into a worker, prints
into a standalone repro script and is compiled only where torch is imported.
Expectations chain (`.xfail(...)`, `.skip(...)`) and always carry a reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Literal

from parity_gate.manifest.models import DEFAULT_TOLERANCES

FLOATS: tuple[str, ...] = ("float32", "float64", "float16", "bfloat16")
SIGNED_INTS: tuple[str, ...] = ("int8", "int32", "int64")
INTS: tuple[str, ...] = (*SIGNED_INTS, "uint8")
NUMERIC: tuple[str, ...] = (*FLOATS, *INTS)
ALL: tuple[str, ...] = (*NUMERIC, "bool")
DTYPES: tuple[str, ...] = ALL

# Input classes, in the order reports list them.
NORMAL = "normal"      # finite ordinary data (ints: small values, divisors non-zero)
SPECIALS = "specials"  # floats: NaN, ±inf, ±0, denormals, tiny, huge; ints: extremes, 0, -1
EMPTY = "empty"        # a zero-size dim (the last one, so dim=-1 reductions reduce nothing)
RANGE = "range"        # floats: the ordinary range, magnitudes 1e-4 .. 1e4 log-spaced, both signs
INPUT_CLASSES: tuple[str, ...] = (NORMAL, SPECIALS, EMPTY)
# Where approximations break is inside the ordinary range (erfcx at moderate x, lgamma
# near its poles), not only at the extremes `specials` tries: these families get `range`.
RANGED_FAMILIES: tuple[str, ...] = ("special", "unary")


def input_classes_for(dtype: str) -> tuple[str, ...]:
    """bool has no special values beyond True/False, so no `specials` class."""
    return (NORMAL, EMPTY) if dtype == "bool" else INPUT_CLASSES


ArgKind = Literal["data", "index", "mask", "prob", "choice", "fixed", "sample"]


@dataclass(frozen=True)
class Arg:
    """One graph input of a variant.

    kind: `data` follows the case dtype and input class; `index` is int64 in
    [low, high) (plus some `values`, e.g. an ignore_index; `unique` makes
    each last-dim row distinct, so scatter/index_put are deterministic);
    `mask` is bool; `prob` holds rows that sum to 1 along dim 1 in the case
    dtype (probability targets); `choice` draws from `values` (e.g. ±1
    targets) in `dtype` or the case dtype; `fixed` has `dtype` whatever the
    case dtype, with normal data.
    """

    name: str
    shape: tuple[int, ...]
    kind: ArgKind = "data"
    low: float | None = None
    high: float | None = None
    values: tuple[float, ...] = ()
    dtype: str | None = None
    specials: bool = True
    nonzero_int: bool = False
    masked_rows: tuple[int, ...] = ()
    unique: bool = False
    requires_grad: bool = False
    empty_shape: tuple[int, ...] | None = None
    sample: bytes = b""
    stored: str | None = None

    @property
    def follows(self) -> bool:
        """Data that takes the case dtype and input class (given values or generated)."""
        return self.kind == "data" or (self.kind == "sample" and self.dtype is None)


@dataclass(frozen=True)
class Expectation:
    """A known failure (`xfail`, still run) or a case not to run (`skip`), with why."""

    kind: Literal["xfail", "skip"]
    reason: str
    dtypes: tuple[str, ...] = ()
    input_classes: tuple[str, ...] = ()
    link: str | None = None  # the upstream issue

    def applies(self, dtype: str, input_class: str) -> bool:
        return ((not self.dtypes or dtype in self.dtypes)
                and (not self.input_classes or input_class in self.input_classes))


@dataclass(frozen=True)
class OpVariant:
    """One op with one set of arguments, and what the sweep should expect of it.

    `call` is an expression over the arg names, with `torch`, `F`
    (torch.nn.functional) and `math` in scope. `shape_only` lists outputs
    (by flat index) that are legitimately nondeterministic (indices of ties,
    scatter with duplicate indices): compared by shape and dtype only.
    `tolerance` maps dtype → (atol, rtol), overriding the defaults.
    """

    id: str
    family: str
    call: str
    args: tuple[Arg, ...]
    dtypes: tuple[str, ...] = FLOATS
    input_classes: tuple[str, ...] = INPUT_CLASSES
    tolerance: dict[str, tuple[float, float]] = field(default_factory=dict)
    shape_only: tuple[int, ...] = ()
    signed_zeros: bool = False
    expectations: tuple[Expectation, ...] = ()
    ranged: bool | None = None  # gets the `range` class; None: by family (RANGED_FAMILIES)

    def __post_init__(self) -> None:
        if not self.args:
            raise ValueError(f"{self.id}: every value must be a graph input; give at least one arg")
        unknown = set(self.dtypes) - set(DTYPES)
        if unknown:
            raise ValueError(f"{self.id}: unknown dtypes {sorted(unknown)}")

    def xfail(self, reason: str, link: str | None = None, *, dtypes: tuple[str, ...] = (),
              input_classes: tuple[str, ...] = ()) -> OpVariant:
        """A known finding, with the human reason and upstream link the baseline carries."""
        return self._expect(Expectation("xfail", reason, dtypes, input_classes, link))

    def skip(self, reason: str, *, dtypes: tuple[str, ...] = (),
             input_classes: tuple[str, ...] = ()) -> OpVariant:
        return self._expect(Expectation("skip", reason, dtypes, input_classes))

    def _expect(self, e: Expectation) -> OpVariant:
        if not e.reason.strip():
            raise ValueError(f"{self.id}: an {e.kind} needs a reason")
        return replace(self, expectations=(*self.expectations, e))

    def expectation(self, kind: str, dtype: str, input_class: str) -> Expectation | None:
        return next((e for e in self.expectations
                     if e.kind == kind and e.applies(dtype, input_class)), None)

    def classes_for(self, dtype: str) -> tuple[str, ...]:
        classes = tuple(c for c in input_classes_for(dtype) if c in self.input_classes)
        wants = self.family in RANGED_FAMILIES if self.ranged is None else self.ranged
        ranged = (wants and dtype in FLOATS and NORMAL in classes
                  and any(a.follows and a.specials for a in self.args))
        return (*classes, RANGE) if ranged else classes

    def tolerance_for(self, dtype: str) -> tuple[float, float]:
        """Integers and booleans compare exactly whatever is given here."""
        if dtype in self.tolerance:
            return self.tolerance[dtype]
        return DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float32"])

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)


def variant_case_id(variant_id: str) -> str:
    """CaseKey.module for a variant: ids read `op/<variant>/<dtype>/<class>/<provider>`."""
    return f"op/{variant_id}"


_OPERATORS = {ast.Add: "torch.add", ast.Sub: "torch.sub", ast.Mult: "torch.mul",
              ast.Div: "torch.div", ast.Pow: "torch.pow", ast.FloorDiv: "torch.floor_divide",
              ast.Mod: "torch.remainder", ast.Eq: "torch.eq", ast.NotEq: "torch.ne",
              ast.Lt: "torch.lt", ast.LtE: "torch.le", ast.Gt: "torch.gt", ast.GtE: "torch.ge"}
_ALIASES = {"F": "torch.nn.functional"}


def user_op(call: str) -> str:
    """The op as a user calls it, read from the call text: `torch.isfinite`,
    `torch.nn.functional.cross_entropy`, `Tensor.masked_fill`, `Tensor.__getitem__`,
    `torch.add` for `x + 2.5`. The outermost call names it (`(x - y) ** 2` is a pow)."""
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return ""
    if isinstance(node, ast.Call):
        parts: list[str] = []
        func = node.func
        while isinstance(func, ast.Attribute):
            parts.insert(0, func.attr)
            func = func.value
        if isinstance(func, ast.Name) and func.id in ("torch", "F", "math"):
            return ".".join([_ALIASES.get(func.id, func.id), *parts])
        return "Tensor." + ".".join(parts) if parts else ""
    if isinstance(node, ast.BinOp):
        return _OPERATORS.get(type(node.op), "")
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _OPERATORS.get(type(node.ops[0]), "")
    if isinstance(node, ast.Subscript):
        return "Tensor.__getitem__"
    return ""
