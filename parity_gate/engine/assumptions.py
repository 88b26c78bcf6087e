"""What an exported program assumed about its dynamic dims, in the manifest's symbols.

Worker side (reads a live torch.export program). torch.onnx's export keeps the
ShapeEnv its tracing filled: every guard and deferred runtime assert on a size
(`Eq(Mod(s53, 4), 0)` from a decomposition of adaptive_avg_pool2d, `Eq(s0, s53)` from
`x + x.transpose(2, 3)`), the symbols' ranges, and which input dim each symbol is.
The ONNX graph keeps none of these checks, so they are what a probe should test.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from parity_gate.plan.probes import Assumption, Range

_SOURCE = re.compile(r"^L((?:\[[^\]]+\])+)\.size\(\)\[(\d+)\]$")


def read_assumptions(program: Any, inputs: Sequence[Any],
                     sources: Mapping[str, Any] | None = None
                     ) -> tuple[list[Assumption], dict[str, Range]]:
    """The program's assumptions over the declared symbols of `inputs` (specs with `name`
    and `dynamic`), each with where it came from (`sources`: condition text →
    guard_sources.GuardSource, recorded while the export ran), and each symbol's range;
    empty when the program keeps no ShapeEnv (the torchscript exporter) or cannot be read
    (advisory: never fails the export)."""
    try:
        return _read(program, inputs, sources or {})
    except Exception:  # a torch internals change costs the probes, not the run
        import traceback

        traceback.print_exc()
        return [], {}


def _read(program: Any, inputs: Sequence[Any], sources: Mapping[str, Any]
          ) -> tuple[list[Assumption], dict[str, Range]]:
    fixed = specialised(sources, inputs)
    env = _shape_env(program)
    if env is None:
        return fixed, {}
    import sympy  # type: ignore[import-untyped]

    names = _symbol_names(env, inputs)
    if not names:
        return fixed, {}
    seen: dict[str, Assumption] = {a.text: a for a in fixed}
    exprs = [g.expr for g in getattr(env, "guards", [])]
    exprs += [r.expr for asserts in env.deferred_runtime_asserts.values() for r in asserts]
    for expr in exprs:
        free = {s for s in expr.free_symbols}
        if not free or not all(s in names for s in free):
            continue  # a symbol that is no input's dim (an unbacked or derived one)
        if expr in (sympy.true, sympy.false):
            continue
        text = _python(expr.xreplace({s: sympy.Symbol(names[s], integer=True) for s in free}))
        if text in ("True", "False"):
            continue
        source = sources.get(str(expr))
        if text not in seen:
            seen[text] = Assumption(text, tuple(sorted({names[s] for s in free})),
                                    source.op if source else "", source.where if source else "")
    ranges: dict[str, Range] = {}
    for sym, name in names.items():
        vr = env.var_to_range.get(sym)
        if vr is None:
            continue
        low, high = _int(vr.lower), _int(vr.upper)
        ranges[name] = Range(max(low or 0, 0), high)
    return list(seen.values()), ranges


def specialised(sources: Mapping[str, Any], inputs: Sequence[Any]) -> list[Assumption]:
    """`batch == 4` for each declared dim the export fixed to a number, with the line and
    call that fixed it (guard_sources.Specialised, recorded while the export ran): the
    program itself keeps no trace of it (torch.onnx captured again with the dim static)."""
    from parity_gate.engine.guard_sources import SPECIALISED

    out: dict[str, Assumption] = {}
    for key, fixed in sources.items():
        if not key.startswith(SPECIALISED):
            continue
        symbol = input_symbol(key.removeprefix(SPECIALISED), inputs)
        if symbol is None:
            continue
        text = f"{symbol} == {fixed.value}"
        out.setdefault(text, Assumption(text, (symbol,), fixed.source.op, fixed.source.where,
                                        fixed.source.kind))
    return list(out.values())


def input_symbol(source: str, inputs: Sequence[Any]) -> str | None:
    """The manifest's symbol of the input dim a ShapeEnv source names (`L['x'].size()[2]`,
    `L['kwargs']['images'][0].size()[2]` for `images.0`); None for any other source."""
    by_dim = {(spec.name, int(i)): sym for spec in inputs for i, sym in spec.dynamic.items()}
    m = _SOURCE.match(source)
    if not m:
        return None
    path = [p.strip("'\"") for p in re.findall(r"\[([^\]]+)\]", m.group(1))]
    path = [p for p in path if p not in ("args", "kwargs")]
    for start in range(len(path)):
        name = ".".join(path[start:])
        if (name, int(m.group(2))) in by_dim:
            return by_dim[(name, int(m.group(2)))]
    return None


def _shape_env(program: Any) -> Any:
    for node in getattr(getattr(program, "graph", None), "nodes", []):
        val = node.meta.get("val") if node.op == "placeholder" else None
        mode = getattr(val, "fake_mode", None)
        if mode is not None and getattr(mode, "shape_env", None) is not None:
            return mode.shape_env
    return None


def _symbol_names(env: Any, inputs: Sequence[Any]) -> dict[Any, str]:
    """ShapeEnv symbol → manifest symbol, through the input dim each symbol came from
    (`L['x'].size()[2]`, `L['kwargs']['images'][0].size()[2]` for `images.0`)."""
    out: dict[Any, str] = {}
    for sym, sources in env.var_to_sources.items():
        found = next((n for s in sources if (n := input_symbol(s.name, inputs)) is not None),
                     None)
        if found is not None:
            out[sym] = found
    return out


def _python(expr: Any) -> str:
    from torch.utils._sympy.printers import PythonPrinter

    text = PythonPrinter().doprint(expr)
    return re.sub(r"^\((.*)\)( [=!<>]=? .*)$", r"\1\2", text)


def _int(value: Any) -> int | None:
    if not getattr(value, "is_integer", False) and not isinstance(value, int):
        return None  # infinite (int_oo) or not a number
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    return number if abs(number) < (1 << 62) else None


def export_sizes(example: Mapping[str, Any], inputs: Sequence[Any]) -> dict[str, int]:
    """Declared symbol → its size in the export example."""
    out: dict[str, int] = {}
    for spec in inputs:
        shape = tuple(getattr(example.get(spec.name), "shape", ()))
        for index, symbol in spec.dynamic.items():
            if int(index) < len(shape):
                out.setdefault(symbol, int(shape[int(index)]))
    return out
