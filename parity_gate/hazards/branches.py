"""Which side of an export probe's branch the captured program took.

A forward that asks whether it is being exported (`if torch.compiler.is_exporting():`)
exports something other than what eager computes only when the capture took the side eager
does not, and that side computes something else. The code alone cannot tell: the condition
may hold other terms (`is_exporting() and self.fast`), the side may compute nothing (`x =
x.contiguous()` on a contiguous input), and both sides may be the same code. The captured
program can: each of its nodes records the source lines it was traced from (its stack
trace), so the lines of each side that hold operations show which side ran.

Pure functions of the class's source (`probe_sites`) and of the program's lines
(`program_lines`), and the rule between them (`verdict`): no torch import here.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import replace as _replace
from typing import Any

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_JUMPS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_VALUE_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)


@dataclass(frozen=True)
class Side:
    """One side of a branch: the lines only it holds, whether it computes a value (assigns
    or returns a call's or an operator's result, or calls an in-place method) and the
    literal values it assigns (`scale = 2.0`: they reach later operations without an
    operation of their own)."""

    lines: frozenset[int] = frozenset()
    computes: bool = False
    sets: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ProbeSite:
    """One call to an export probe in a class body, and the branch its value decides.

    `eager` / `export`: the branch condition's value with the probe false (eager) / true
    (the exporter's capture); None where the rest of the condition decides it, or the
    call decides no branch the code shows (then `when_true`/`when_false` are None).
    `function`: the lines of the function that holds the call (a side that ran leaves no
    operation when the function never ran in the capture); `forward`: that function is a
    `forward`, the only frames whose lines torch.export records in a node's stack trace."""

    file: str
    line: int
    code: str
    probe: str
    condition: str = ""
    eager: bool | None = None
    export: bool | None = None
    when_true: Side | None = None
    when_false: Side | None = None
    same: bool = False
    function: frozenset[int] = frozenset()
    forward: bool = False

    @property
    def source(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Verdict:
    """What the program shows about one probe site: `message` ("" for nothing to report);
    `certain` False where the program cannot show which side ran (an informational note)."""

    message: str = ""
    certain: bool = True


def verdict(site: ProbeSite, ran: frozenset[int], reached: bool = False) -> Verdict:
    """The finding for `site`, given the lines of its file that hold operations of the
    captured program (`ran`). `reached`: the function holding the call certainly ran in the
    capture (the root module's forward) even if it left no operation.

    Claimed only where the program shows it: it holds operations of the side eager does not
    take, or it provably took that side and lacks the operations of eager's side, or that
    side sets values eager's does not (they flow into later operations unseen). Outside
    a `forward` method the program cannot show it (`_unrecorded`)."""
    if not site.forward:
        return _unrecorded(site)
    sides = (site.when_true.lines | site.when_false.lines
             if site.when_true is not None and site.when_false is not None else frozenset())
    if not (reached or (site.function | sides) & ran):
        return Verdict()  # the capture never ran the function (a helper it does not call)
    if site.when_true is None or site.when_false is None or site.eager is None:
        why = ("its value decides no branch the code shows" if site.when_true is None else
               f"eager's side depends on the rest of the condition ({site.condition})")
        return Verdict(f"which side the export took could not be told: {why}", certain=False)
    if site.same:
        return Verdict()  # both sides are the same code
    eager, other = ((site.when_true, site.when_false) if site.eager
                    else (site.when_false, site.when_true))
    extra = other.lines & ran
    if extra:
        instead = f"; eager runs {_lines(eager.lines)} instead" if eager.lines else ""
        return Verdict(f"the exported program holds the operations of {_lines(extra)}, "
                       f"which eager does not run{instead}")
    if eager.lines & ran:
        return Verdict()  # the capture took eager's side
    if site.export is None or site.export == site.eager:
        return Verdict()  # neither side left an operation, and the capture may take eager's
    if not eager.lines and not other.lines:
        if eager.computes or other.computes or eager.sets != other.sets:
            return Verdict(f"the export takes the side of `{site.condition}` eager does not; "
                           f"both sides are on line {site.line}, so the program cannot show "
                           "whether they compute the same")
        return Verdict()
    if eager.computes:
        return Verdict(f"the exported program holds no operation of {_lines(eager.lines)}, "
                       "which eager runs: the export took the other side")
    if other.sets and other.sets != eager.sets:
        return Verdict(f"the export runs {_lines(other.lines)}, which eager does not: no "
                       f"operation, but it sets {', '.join(sorted(other.sets))}, which later "
                       "operations read")
    return Verdict()  # the export's side computes nothing the program shows, nor skips any


def _unrecorded(site: ProbeSite) -> Verdict:
    """A probe in a helper (a method other than `forward`, a nested function): torch.export
    records the lines of `forward` frames only, so the program cannot show which side ran,
    and the code decides: a condition the probe alone flips is reported, as before."""
    if site.when_true is None or site.eager is None or site.export is None:
        why = ("its value decides no branch the code shows" if site.when_true is None else
               f"the rest of the condition decides it ({site.condition})")
        return Verdict(f"which side the export took could not be told: {why}, and the "
                       "program records the lines of `forward` methods only", certain=False)
    if site.same or site.export == site.eager:
        return Verdict()
    return Verdict(f"the export takes the side of `{site.condition}` eager does not; the "
                   "program records the lines of `forward` methods only, so it cannot show "
                   "what that side computes")


def _lines(lines: Iterable[int]) -> str:
    """`line 7`, `lines 7-9`, `lines 7, 12-13`."""
    runs: list[list[int]] = []
    for n in sorted(lines):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)
    return f"line{'s' if len(runs) > 1 or len(runs[0]) > 1 else ''} {text}" if runs else ""


# --------------------------------------------------------------------------- the program


def program_lines(program: Any) -> dict[str, frozenset[int]]:
    """File (`real` path) → the lines the captured program's operations were traced from,
    every frame of each node's stack trace (an op inside a helper marks the line that
    called it too), in every (sub)graph (a torch.cond branch)."""
    found: dict[str, set[int]] = {}
    for _, module in program.graph_module.named_modules():
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            for path, line in _FRAME.findall(node.meta.get("stack_trace") or ""):
                found.setdefault(real(path), set()).add(int(line))
    return {path: frozenset(lines) for path, lines in found.items()}


@functools.lru_cache(maxsize=1024)
def real(path: str) -> str:
    """One name per file: a stack trace's and `inspect`'s may differ by a link."""
    return os.path.realpath(path)


# --------------------------------------------------------------------------- the source


@functools.lru_cache(maxsize=256)
def probe_sites(cls: type, probes: frozenset[str], known: frozenset[str] = frozenset()
                ) -> tuple[ProbeSite, ...]:
    """Each call in the class body to one of `probes` (true while this exporter traces),
    with the branch it decides: the `if`/conditional expression whose condition holds the
    call, or holds a name assigned from it (`exporting = torch.compiler.is_exporting()`),
    in the same function. `known`: every probe, all false in eager; those not in `probes`
    are false in this exporter's capture too (`torch.jit.is_tracing()` under dynamo)."""
    try:
        lines, start = inspect.getsourcelines(cls)
        path = inspect.getsourcefile(cls) or "?"
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return ()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    offset = start - 1
    out: list[ProbeSite] = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if _name(call.func) not in probes:
            continue
        head = ProbeSite(path, offset + call.lineno,
                         lines[call.lineno - 1].strip(), ast.unparse(call.func))
        function = _enclosing(call, parents, (ast.FunctionDef, ast.AsyncFunctionDef))
        if function is not None:
            head = _replace(head, function=_span(function, offset),
                            forward=function.name == "forward")
        branches = list(_branches(call, parents, function, probes))
        if not branches:
            out.append(head)
        for branch, names in branches:
            out.append(_site(head, branch, names, parents, offset, probes, known | probes))
    return tuple(sorted(set(out), key=lambda s: (s.line, s.condition)))


def _branches(call: ast.Call, parents: Mapping[ast.AST, ast.AST], function: ast.AST | None,
              probes: frozenset[str]) -> Iterator[tuple[ast.If | ast.IfExp, dict[str, ast.expr]]]:
    """The branches whose condition holds the call, or a name assigned from it."""
    node: ast.AST = call
    while node in parents:
        parent = parents[node]
        if isinstance(parent, (ast.If, ast.IfExp)) and parent.test is node:
            yield parent, {}
            return
        if isinstance(parent, ast.Assign) and parent.value is node:
            if function is None or len(parent.targets) != 1 or \
                    not isinstance(parent.targets[0], ast.Name):
                return
            name = parent.targets[0].id
            bound = {name: parent.value}
            for branch in ast.walk(function):
                if isinstance(branch, (ast.If, ast.IfExp)) and any(
                        isinstance(n, ast.Name) and n.id == name for n in ast.walk(branch.test)):
                    yield branch, bound
            return
        if isinstance(parent, ast.stmt):
            return
        node = parent


def _site(head: ProbeSite, branch: ast.If | ast.IfExp, names: Mapping[str, ast.expr],
          parents: Mapping[ast.AST, ast.AST], offset: int, probes: frozenset[str],
          known: frozenset[str]) -> ProbeSite:
    if isinstance(branch, ast.IfExp):
        yes: list[ast.AST] = [branch.body]
        no: list[ast.AST] = [branch.orelse]
    else:
        yes, no = list(branch.body), list(branch.orelse)
        if not no and isinstance(branch.body[-1], _JUMPS):
            no = _after(branch, parents)  # `if p(): return a` then eager's `return b`
    true_lines = _lines_of(yes, offset)
    false_lines = _lines_of(no, offset)
    return _replace(
        head, condition=ast.unparse(branch.test), same=_dump(yes) == _dump(no),
        eager=_truth(branch.test, {p: False for p in known}, names),
        export=_truth(branch.test, {p: p in probes for p in known}, names),
        when_true=Side(true_lines - false_lines, _computes(yes), _sets(yes)),
        when_false=Side(false_lines - true_lines, _computes(no), _sets(no)))


def _after(node: ast.stmt, parents: Mapping[ast.AST, ast.AST]) -> list[ast.AST]:
    """The statements after `node` in the block that holds it."""
    parent = parents.get(node)
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and node in block:
            return list(block[block.index(node) + 1:])
    return []


def _truth(test: ast.expr, probes: Mapping[str, bool], names: Mapping[str, ast.expr]
           ) -> bool | None:
    """The condition's value with each probe call's value from `probes`: None where
    another term decides it (three-valued: `p() and x` is False with p() false, unknown
    with it true)."""
    if isinstance(test, ast.Call) and _name(test.func) in probes:
        return probes[_name(test.func)]
    if isinstance(test, ast.Name) and test.id in names:
        return _truth(names[test.id], probes, {})
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _truth(test.operand, probes, names)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [_truth(v, probes, names) for v in test.values]
        decisive = isinstance(test.op, ast.Or)  # True decides `or`, False decides `and`
        if decisive in values:
            return decisive
        return None if None in values else not decisive
    return None


def _computes(nodes: Iterable[ast.AST]) -> bool:
    """A value computed by a call or an operator that the side assigns or returns, or an
    in-place method call (`x.add_(1)`). Bare calls for their effect (logging, warnings,
    checks) and raises compute nothing the graph holds."""
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, _VALUE_STATEMENTS) and node.value is not None and any(
                isinstance(n, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Subscript))
                for n in ast.walk(node.value)):
            return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                _name(node.value.func).endswith("_") and not _name(node.value.func).startswith("_"):
            return True
    # a conditional expression's side is an expression: it computes if it calls or operates
    return any(isinstance(top, ast.expr) and any(
        isinstance(n, (ast.Call, ast.BinOp, ast.Subscript)) for n in ast.walk(top))
        for top in nodes)


def _sets(nodes: Iterable[ast.AST]) -> frozenset[str]:
    """`target = literal` assignments (and a conditional expression's literal side)."""
    out = set()
    for top in nodes:
        if isinstance(top, ast.expr) and _literal(top):
            out.add(ast.unparse(top))
        for node in ast.walk(top):
            value = getattr(node, "value", None)
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and \
                    value is not None and _literal(value):
                out.add(ast.unparse(node).strip())
    return frozenset(out)


def _literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_literal(e) for e in node.elts)
    return False


def _lines_of(nodes: Iterable[ast.AST], offset: int) -> frozenset[int]:
    return frozenset(line for node in nodes for line in _span(node, offset))


def _span(node: ast.AST, offset: int) -> frozenset[int]:
    first = getattr(node, "lineno", 0)
    last = getattr(node, "end_lineno", None) or first
    return frozenset(range(offset + first, offset + last + 1)) if first else frozenset()


def _enclosing(node: ast.AST, parents: Mapping[ast.AST, ast.AST], kinds: tuple[type, ...]
               ) -> Any:
    while node in parents:
        node = parents[node]
        if isinstance(node, kinds):
            return node
    return None


def _dump(nodes: list[ast.AST]) -> str:
    return "\n".join(ast.dump(n) for n in nodes)


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


