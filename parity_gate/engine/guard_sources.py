"""Where each size assumption of an export came from: the user's line and the call on it.

Worker side. torch keeps no usable record of it in the exported program: a deferred runtime
assert's stack is dropped when torch.onnx copies the program, and the graph nodes that
check it carry the metadata of the node they were inserted after (the first op that reads
those sizes), not of the op that assumed it. So the export is watched while it runs: each
time the ShapeEnv adds a guard or a runtime assert, its provenance is read there, from

- the Python stack, while torch.export traces the model's own code: the innermost frame
  in the model's files is the line, and the expression it is executing (its column span)
  the call (`x.view`, `self.conv (nn.Conv2d)`, the `+` of `a + b`);
- the FX node being decomposed, when torch.onnx's decompositions assume it: the node's
  `stack_trace` gives the line; the call is the torch module the line called (from
  `nn_module_stack`) or the torch function it called (`torch_fn`), named as the line
  writes it.

A condition whose call cannot be told keeps only its line; one with no user frame, neither.

A dim declared dynamic that the code fixes to a constant (`n = int(x.shape[0])`) leaves no
condition at all in the program: torch.onnx's capture retries with the dim static, so the
program has no symbol for it. Its specialisation is recorded the same way, by the input
dim it came from (`L['x'].size()[0]`) and its value, when the ShapeEnv replaces the
symbol with a number.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GuardSource:
    """The model's line (`path:line`) and the call on it that made a condition (`F.conv2d`,
    `self.pool (nn.AdaptiveAvgPool2d)`, `+`; "" when it cannot be told)."""

    where: str
    op: str = ""
    kind: str = ""  # the class whose code the line is in (its forward's module), when known


@dataclass(frozen=True)
class Specialised:
    """An input dim the export fixed to `value`, and the line and call that fixed it."""

    value: int
    source: GuardSource


# The sources of specialisations, beside the conditions, in the one dict `recording` fills:
# "specialised L['x'].size()[0]" → Specialised.
SPECIALISED = "specialised "


@contextlib.contextmanager
def recording(is_model_file: Any) -> Iterator[dict[str, Any]]:
    """While the block runs, each size condition torch adds (its sympy text, as added and
    canonicalised) → where it came from (GuardSource), the first time it is added; and each
    input dim fixed to a number (`SPECIALISED` + the dim's source name → Specialised).
    Advisory: when torch's internals differ, nothing is recorded and the export runs as
    without."""
    found: dict[str, Any] = {}
    try:
        from torch.fx.experimental.symbolic_shapes import ShapeEnv, canonicalize_bool_expr
    except ImportError:
        yield found
        return
    original = getattr(ShapeEnv, "_log_guard", None)
    replacing = getattr(ShapeEnv, "_set_replacement", None)
    if original is None or replacing is None:
        yield found
        return

    def log_guard(self: Any, prefix: str, g: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            keys = {str(g), str(canonicalize_bool_expr(g))}
            if not keys <= found.keys():
                source = _source(sys._getframe(1), is_model_file)
                for key in keys:
                    if source is not None:
                        found.setdefault(key, source)
        except Exception:  # provenance is advisory; the export must not notice
            pass
        return original(self, prefix, g, *args, **kwargs)

    def set_replacement(self: Any, a: Any, tgt: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if getattr(tgt, "is_Integer", False):
                names = [SPECIALISED + s.name for s in self.var_to_sources.get(a, [])]
                if names and not set(names) <= found.keys():
                    source = _source(sys._getframe(1), is_model_file)
                    for name in names:
                        if source is not None:
                            found.setdefault(name, Specialised(int(tgt), source))
        except Exception:  # advisory, as above
            pass
        return replacing(self, a, tgt, *args, **kwargs)

    ShapeEnv._log_guard = log_guard  # type: ignore[method-assign]
    ShapeEnv._set_replacement = set_replacement  # type: ignore[method-assign]
    try:
        yield found
    finally:
        ShapeEnv._log_guard = original  # type: ignore[method-assign]
        ShapeEnv._set_replacement = replacing  # type: ignore[method-assign]


def _source(frame: Any, is_model_file: Any) -> GuardSource | None:
    from torch.fx import traceback as fx_traceback

    meta = fx_traceback.get_current_meta() or {}
    if meta.get("stack_trace"):
        return from_node(meta, is_model_file)
    return _from_stack(frame, is_model_file)


def _from_stack(frame: Any, is_model_file: Any) -> GuardSource | None:
    """The innermost model frame on the live stack, and what it is executing."""
    inner: list[Any] = []  # library frames below the model's, innermost first
    while frame is not None and not is_model_file(frame.f_code.co_filename):
        inner.append(frame)
        frame = frame.f_back
    if frame is None:
        return None
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    node = _executing(frame)
    owner = frame.f_locals.get("self")
    kind = type(owner).__name__ if _is_module(owner) else ""
    if node is None:
        return GuardSource(where, kind=kind)
    op = _op_text(node)
    module = next((_module_name(f.f_locals.get("self")) for f in reversed(inner)
                   if f.f_code.co_name == "forward" and _module_name(f.f_locals.get("self"))),
                  "")
    if op and module and isinstance(node, ast.Call):
        op = f"{op} ({module})"
    return GuardSource(where, op, kind)


def _executing(frame: Any) -> ast.AST | None:
    """The expression `frame` is executing, from its instruction's column span (3.11+)."""
    try:
        positions = list(frame.f_code.co_positions())[frame.f_lasti // 2]
    except (AttributeError, IndexError):
        return None
    start, end, col, end_col = positions
    if None in (start, end, col, end_col):
        return None
    lines = [linecache.getline(frame.f_code.co_filename, n) for n in range(start, end + 1)]
    if not lines or not lines[0]:
        return None
    lines[-1] = lines[-1][:end_col]
    lines[0] = lines[0][col:]
    try:
        return ast.parse("".join(lines).strip(), mode="eval").body
    except SyntaxError:
        return None


_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
              ast.Mod: "%", ast.MatMult: "@", ast.Pow: "**"}


def _op_text(node: ast.AST) -> str:
    """A call's callee as written (`F.interpolate`, `x.view`), a binary operator's sign."""
    if isinstance(node, ast.Call):
        return _callee(node.func)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return f"operator {_OPERATORS[type(node.op)]}"
    return ""


def _callee(func: ast.expr) -> str:
    """`F.interpolate`, `x.view`; a method of a computed value as `.reshape`."""
    value = func
    while isinstance(value, ast.Attribute):
        value = value.value
    if isinstance(value, ast.Name) or not isinstance(func, ast.Attribute):
        return ast.unparse(func)
    return f".{func.attr}"


def _is_module(value: Any) -> bool:
    try:
        from torch import nn
    except ImportError:
        return False
    return isinstance(value, nn.Module)


def _module_name(module: Any) -> str:
    """`nn.Conv2d` for a torch module; "" for anything else (a frame's `self`)."""
    cls = type(module)
    path = f"{cls.__module__}.{cls.__qualname__}"
    if not path.startswith("torch.nn.modules."):
        return ""
    return f"nn.{cls.__qualname__}"


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)\n(.*)$', re.M)


def from_node(meta: dict[str, Any], is_model_file: Any) -> GuardSource | None:
    """The line and call of an FX node being decomposed, from its metadata: its stack's
    innermost model frame; the call is the torch module that line entered (its
    `forward` is the next frame) or else the first torch function it called."""
    frames = _FRAME.findall(meta.get("stack_trace") or "")
    user = [i for i, (path, *_rest) in enumerate(frames) if is_model_file(path)]
    if not user:
        return None
    path, line, _name, code = frames[user[-1]]
    where = f"{path}:{line}"
    stack = list((meta.get("nn_module_stack") or {}).values())
    below = frames[user[-1] + 1:]
    if below and below[0][2] in ("forward", "_call_impl", "_wrapped_call_impl"):
        cls = str(stack[-1][1]) if stack else ""
        kind = str(stack[-2][1]).rsplit(".", 1)[-1] if len(stack) > 1 else ""
        if not cls.startswith("torch.nn.modules."):
            return GuardSource(where, kind=kind)
        attribute = str(stack[-1][0]).rsplit(".", 1)[-1]
        called = _called(code, attribute)
        name = f"nn.{cls.rsplit('.', 1)[-1]}"
        return GuardSource(where, f"{called} ({name})" if called else name, kind)
    kind = str(stack[-1][1]).rsplit(".", 1)[-1] if stack else ""
    function = below[0][2] if below else str((meta.get("torch_fn") or ("", ""))[1])
    return GuardSource(where, _called(code, function.rsplit(".", 1)[-1]), kind)


def _called(code: str, name: str) -> str:
    """The callee, as `code` writes it, of its one call to something named `name`."""
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return ""
    callees = {_callee(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
               and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) == name}
    return callees.pop() if len(callees) == 1 else ""
