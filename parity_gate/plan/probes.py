"""Probe sizes from what an export assumed (`shapes: auto`): pure maths, no torch.

The worker reads the exported program's assumptions about its dynamic dims (the range
of each, and every relation its guards and deferred runtime asserts hold: `h % 4 == 0`,
`h == w`, `seq // 4 == 5`) into `Assumption`s over the manifest's dim symbols; `derive`
turns them into the sizes worth a case each: every relation once kept and once broken,
each dim's export size +- 1, the bounds of a bounded range, and 0 and 1 where the
manifest says they occur. `resize` makes a fixture set at a probe's sizes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# What an assumption's text may call (torch's printer writes these for Min/Max/Abs).
_CALLS = {"max": max, "min": min, "abs": abs, "int": int}
NEAR = 24  # how far from the export size a kept/broken size is looked for


@dataclass(frozen=True)
class Assumption:
    """One condition the export holds about its dynamic dims: a Python expression over
    the manifest's symbols (`h % 4 == 0`), the call that made it and its source line
    (`path:line`), both "" where the export did not say."""

    text: str
    symbols: tuple[str, ...]
    op: str = ""
    source: str = ""
    kind: str = ""  # the class whose code the line is in, when known

    def holds(self, sizes: Mapping[str, int]) -> bool | None:
        """Its truth at `sizes` (every symbol it reads given); None when it cannot be
        evaluated there (a division by a size that is 0)."""
        try:
            return bool(eval(self.text, {"__builtins__": _CALLS}, dict(sizes)))
        except (ArithmeticError, NameError, TypeError, ValueError):
            return None

    def describe(self) -> str:
        """`h % 4 == 0, assumed by self.pool (nn.AdaptiveAvgPool2d) at models.py:12`: the
        model's line and the call on it that made the condition, as the export recorded
        them (the call left out where it could not be told, both where no line was)."""
        if ":" not in self.source:
            return f"{self.text} ({self.op})" if self.op else self.text
        path, line = self.source.rsplit(":", 1)
        by = f" by {self.op}" if self.op else ""
        return f"{self.text}, assumed{by} at {os.path.basename(path)}:{line}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Assumption:
        return cls(str(data["text"]), tuple(data["symbols"]), str(data.get("op", "")),
                   str(data.get("source", "")), str(data.get("kind", "")))


@dataclass(frozen=True)
class Range:
    """A dim's range as the export recorded it (`high` None: unbounded)."""

    low: int = 0
    high: int | None = None


@dataclass(frozen=True)
class Probe:
    """One probe: the sizes it changes (symbol → size) and why it is worth a case."""

    sizes: tuple[tuple[str, int], ...]
    why: str
    breaks: tuple[str, ...] = ()   # the assumptions (describe()) it breaks
    kind: str = "relation"         # relation | near | bound | small

    @property
    def changed(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.sizes)


@dataclass(frozen=True)
class ProbeSettings:
    """What the manifest says about probing one module."""

    symbols: tuple[str, ...]             # the dims `shapes: auto` covers
    cap: int = 8                         # most probes per module and dtype
    small: tuple[str, ...] = ()          # dims that may be 0 or 1 in use
    high: Mapping[str, int] = field(default_factory=dict)  # memory cap per dim


def derive(assumptions: Sequence[Assumption], sizes: Mapping[str, int],
           ranges: Mapping[str, Range], settings: ProbeSettings,
           declared: Collection[tuple[str, int]] = ()) -> list[Probe]:
    """The probes for one export, most telling first, at most `settings.cap`: for each
    relation a size that breaks it and one that keeps it (nearest the export size, the
    other dims as exported), then each dim at its export size +- 1, its range's bounds,
    and 0 and 1 for `small` dims. Sizes the manifest's own cases already run
    (`declared`: (symbol, size) pairs) are not probed again."""
    symbols = [s for s in settings.symbols if s in sizes]
    if not symbols:
        return []
    relevant = [a for a in assumptions if set(a.symbols) & set(symbols)
                and set(a.symbols) <= set(sizes)]
    # A dim torch.export fixed to its example size (a range of one point) assumes that size.
    fixed = {s: r.low for s, r in ranges.items() if s in symbols and r.high == r.low}
    texts = {a.text for a in relevant}
    relevant += [Assumption(f"{s} == {v}", (s,), "specialised during tracing")
                 for s, v in fixed.items() if f"{s} == {v}" not in texts]
    plan = _Plan(sizes, ranges, settings, fixed, relevant, set(declared))
    for a in relevant:
        plan.relation(a, [s for s in a.symbols if s in symbols])
    for s in symbols:
        plan.around(s)
    order = {"relation": 0, "near": 1, "bound": 2, "small": 3}
    ranked = sorted(plan.out.values(), key=lambda p: (order[p.kind], not p.breaks))
    return ranked[: settings.cap]


@dataclass
class _Plan:
    """The probes of one export as they are found (one per distinct set of changed dims)."""

    sizes: Mapping[str, int]
    ranges: Mapping[str, Range]
    settings: ProbeSettings
    fixed: dict[str, int]
    relevant: list[Assumption]
    declared: set[tuple[str, int]]
    out: dict[tuple[tuple[str, int], ...], Probe] = field(default_factory=dict)

    def lowest(self, symbol: str) -> int:
        floor = 0 if symbol in self.settings.small else 2
        return floor if symbol in self.fixed else \
            max(self.ranges.get(symbol, Range()).low, floor)

    def highest(self, symbol: str) -> int | None:
        high = None if symbol in self.fixed else self.ranges.get(symbol, Range()).high
        cap = self.settings.high.get(symbol)
        return min(h for h in (high, cap) if h is not None) if (high, cap) != (None, None) \
            else None

    def allowed(self, symbol: str, value: int) -> bool:
        top = self.highest(symbol)
        return value >= self.lowest(symbol) and (top is None or value <= top)

    def add(self, changed: dict[str, int], why: str, kind: str) -> None:
        at = {**self.sizes, **changed}
        key = tuple(sorted(changed.items()))
        if key in self.out or not changed or all(pair in self.declared for pair in key):
            return
        broken = tuple(a.describe() for a in self.relevant if a.holds(at) is False)
        self.out[key] = Probe(key, why, broken, kind)

    def relation(self, a: Assumption, mine: list[str]) -> None:
        """A size that breaks `a` and one that keeps it, nearest the export size."""
        if a.holds(self.sizes) is not True:
            return  # not true as exported: nothing the export relied on
        broken = _search(a, self.sizes, mine, self.allowed, want=False)
        if not broken:
            return  # true at every size probed (`batch != 1` from 2 up): restricts nothing
        self.add(broken, f"breaks {a.describe()}", "relation")
        kept = _search(a, self.sizes, mine, self.allowed, want=True)
        if kept:
            self.add(kept, f"keeps {a.describe()}", "relation")

    def around(self, s: str) -> None:
        """`s` one above and below its export size, at its range's bounds, and at 0 and 1
        where the manifest says those occur."""
        size = self.sizes[s]
        for v in (size + 1, size - 1):
            if self.allowed(s, v):
                self.add({s: v}, f"{s} one {'above' if v > size else 'below'} its export "
                         f"size {size}", "near")
        r = self.ranges.get(s, Range())
        if r.low >= 2 and self.allowed(s, r.low):
            self.add({s: r.low}, f"the lower bound of {s}'s range [{r.low}, "
                     f"{r.high if r.high is not None else 'inf'}]", "bound")
        top = self.highest(s)
        if r.high is not None and top is not None and self.allowed(s, top) \
                and s not in self.fixed:
            self.add({s: top}, f"the upper bound of {s}'s range"
                     + (f" (capped at {top} by max_case_bytes)" if top < r.high else ""),
                     "bound")
        if s in self.settings.small:
            for v in (0, 1):
                self.add({s: v}, f"{s}={v}, which the manifest says occurs (small_dims)",
                         "small")


def _search(a: Assumption, sizes: Mapping[str, int], symbols: Sequence[str],
            allowed: Any, want: bool) -> dict[str, int] | None:
    """Sizes nearest the export's at which `a` is `want` (not the export sizes
    themselves): to keep it, its dims move together first (a kept `h == w` moves both);
    to break it, one at a time first."""
    for step in (d for n in range(1, NEAR + 1) for d in (n, -n)):
        together = [{s: sizes[s] + step for s in symbols}] if len(symbols) > 1 else []
        alone = [{s: sizes[s] + step} for s in symbols]
        for changed in [*together, *alone] if want else [*alone, *together]:
            if all(allowed(s, v) for s, v in changed.items()) \
                    and a.holds({**sizes, **changed}) is want:
                return changed
    return None


def resize(fixture: Any, inputs: Sequence[Any], changed: Mapping[str, int]
           ) -> tuple[Any, int | None] | str:
    """`fixture` (a generated set) at the probe's sizes, with the batch size when the probe
    changes it (None: the case's own); or why it cannot be (a file set has only its
    file's sizes). A dim the set writes as a literal, or as a dim it shares with another
    symbol, is replaced by the probe's size where that symbol is."""
    if not hasattr(fixture, "dims"):
        return (f"fixture set is a file: it has only the sizes in its file, not "
                f"{', '.join(f'{k}={v}' for k, v in changed.items())}")
    dims = dict(fixture.dims)
    tensors = {name: spec.model_copy(update={"shape": list(spec.shape)})
               for name, spec in fixture.inputs.items()}
    declared = {(spec.name, int(i)): s for spec in inputs for i, s in spec.dynamic.items()}
    batch: int | None = None
    for (name, index), symbol in declared.items():
        tensor = tensors.get(name)
        if symbol not in changed or tensor is None or index >= len(tensor.shape):
            continue
        entry = fixture.inputs[name].shape[index]
        if entry == "batch":
            batch = changed[symbol]
        elif isinstance(entry, str) and all(
                declared.get((other, j), symbol) == symbol
                for other, spec in fixture.inputs.items()
                for j, e in enumerate(spec.shape) if e == entry):
            dims[entry] = changed[symbol]  # every use of the set's dim is this symbol
        else:  # a literal, or a set dim shared with another symbol (`[b, 3, s, s]`, h != w)
            tensor.shape[index] = changed[symbol]
    return fixture.model_copy(update={"dims": dims, "inputs": tensors}), batch


def probe_label(fixture_name: str, probe: Probe, batch_symbol: str | None) -> str:
    """The fixture id of a probe case: the set's, with each changed non-batch dim's size
    (in place of the size a `text@seq=8` id already names)."""
    label = fixture_name
    for k, v in probe.sizes:
        if k == batch_symbol:
            continue
        label, n = re.subn(rf"@{re.escape(k)}=\d+(?=@|$)", f"@{k}={v}", label)
        if not n:
            label += f"@{k}={v}"
    return label


def auto_symbols(module: Any, settings: Any) -> tuple[str, ...]:
    """The dynamic dims `shapes: auto` covers: each input's own `shapes`, else the
    module's (which inherits the defaults')."""
    out: list[str] = []
    for spec in module.inputs:
        mode = getattr(spec, "shapes", None) or settings.shapes or "declared"
        if mode == "auto":
            out += [s for s in spec.dynamic.values() if s not in out]
    return tuple(out)


def fixture_sizes(fixture: Any, inputs: Sequence[Any], batch: int) -> set[tuple[str, int]]:
    """(symbol, size) of every declared dynamic dim in a generated set at `batch`."""
    if not hasattr(fixture, "dims"):
        return set()
    out: set[tuple[str, int]] = set()
    for spec in inputs:
        tensor = fixture.inputs.get(spec.name)
        for index, symbol in spec.dynamic.items():
            if tensor is None or index >= len(tensor.shape):
                continue
            entry = tensor.shape[index]
            size = batch if entry == "batch" else fixture.dims.get(entry) \
                if isinstance(entry, str) else entry
            if isinstance(size, int):
                out.add((symbol, size))
    return out
