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

from parity_gate.hazards.context import in_library
from parity_gate.hazards.graph import source_of
from parity_gate.plan.probes import Assumption, Range

_SOURCE = re.compile(r"^L((?:\[[^\]]+\])+)\.size\(\)\[(\d+)\]$")
_CALL = re.compile(r"(\w+)\(")


def read_assumptions(program: Any, inputs: Sequence[Any]
                     ) -> tuple[list[Assumption], dict[str, Range]]:
    """The program's assumptions over the declared symbols of `inputs` (specs with `name`
    and `dynamic`), and each symbol's range; empty when the program keeps no ShapeEnv (the
    torchscript exporter) or cannot be read (advisory: never fails the export)."""
    try:
        return _read(program, inputs)
    except Exception:  # a torch internals change costs the probes, not the run
        import traceback

        traceback.print_exc()
        return [], {}


def _read(program: Any, inputs: Sequence[Any]) -> tuple[list[Assumption], dict[str, Range]]:
    env = _shape_env(program)
    if env is None:
        return [], {}
    import sympy  # type: ignore[import-untyped]

    names = _symbol_names(env, inputs)
    if not names:
        return [], {}
    sources = _sources(program)
    seen: dict[str, Assumption] = {}
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
        op, where = sources.get(expr, ("", ""))
        if text not in seen:
            seen[text] = Assumption(text, tuple(sorted({names[s] for s in free})), op, where)
    ranges: dict[str, Range] = {}
    for sym, name in names.items():
        vr = env.var_to_range.get(sym)
        if vr is None:
            continue
        low, high = _int(vr.lower), _int(vr.upper)
        ranges[name] = Range(max(low or 0, 0), high)
    return list(seen.values()), ranges


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
    by_dim = {(spec.name, int(i)): sym for spec in inputs for i, sym in spec.dynamic.items()}
    out: dict[Any, str] = {}
    for sym, sources in env.var_to_sources.items():
        for source in sources:
            m = _SOURCE.match(source.name)
            if not m:
                continue
            path = [p.strip("'\"") for p in re.findall(r"\[([^\]]+)\]", m.group(1))]
            path = [p for p in path if p not in ("args", "kwargs")]
            for start in range(len(path)):
                name = ".".join(path[start:])
                if (name, int(m.group(2))) in by_dim:
                    out[sym] = by_dim[(name, int(m.group(2)))]
                    break
            if sym in out:
                break
    return out


def _sources(program: Any) -> dict[Any, tuple[str, str]]:
    """Size condition → (the call its node is filed under, its user source line), from the
    program's nodes whose value is that condition. Torch files a condition under the node
    where its sizes were first read, which can be the op before the one that assumed it:
    the line is right, the call is where torch saw it ("near")."""
    out: dict[Any, tuple[str, str]] = {}
    for node in program.graph.nodes:
        trace = node.meta.get("stack_trace") or ""
        expr = getattr(getattr(node.meta.get("val"), "node", None), "expr", None)
        where = source_of(trace)
        if expr is not None and trace and expr not in out and not _library(where):
            out[expr] = (_op_of(trace), where)
    return out


def _library(source: str) -> bool:
    """A line of torch's own (a pass's, written relative: `torch/fx/passes/...`)."""
    path = source.rsplit(":", 1)[0]
    return in_library(path) or path.startswith(("torch/", "onnxscript/", "onnx/"))


_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')


def _op_of(trace: str) -> str:
    """The call that made a condition: the one the innermost user frame went into (the
    library frame below it, `F.adaptive_avg_pool2d(...)`), else the user line's first."""
    lines = trace.splitlines()
    frames = [(m.group(1), lines[i + 1].strip() if i + 1 < len(lines) else "")
              for i, line in enumerate(lines) if (m := _FRAME.match(line))]
    user = [i for i, (path, _) in enumerate(frames) if not in_library(path)]
    if user and user[-1] + 1 < len(frames):
        calls = _CALL.findall(frames[user[-1] + 1][1])
        if calls:
            return calls[-1]
    code = frames[user[-1]][1] if user else frames[-1][1] if frames else ""
    calls = _CALL.findall(code)
    return calls[0] if calls else ""


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
