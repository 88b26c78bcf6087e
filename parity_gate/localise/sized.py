"""A failure at sizes other than the export's, localised to the size assumption it breaks.

The commonest export defect is a size the model's own code fixed while it was exported:
`n = int(h.shape[0])` makes the batch a Python number, torch.export specialises the dim
to the example's size, and the ONNX model accepts no other (ONNX Runtime refuses the
input, or a constant reshape silently keeps the export's batch). The ONNX Runtime error
names the graph input, not the cause. The cause is the line the export recorded for the
assumption the failing sizes break (engine.guard_sources): that line, the call on it, the
model's code as owner, the fix an engineer would write for that kind of line (`FIXES`),
and a repro folder whose script fails the same way on the gate's model.

Pure apart from `write_repro` (files, and running the script as a user would).
"""

from __future__ import annotations

import json
import linecache
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate.localise import repro
from parity_gate.model.files import remove, source_from
from parity_gate.model.localisation import Culprit
from parity_gate.model.upstream import Owner
from parity_gate.plan.probes import Assumption

_FIXED = re.compile(r"^(\w+) == (\d+)$")


@dataclass(frozen=True)
class Broken:
    """The assumption a case's sizes break, read for a report: the symbol, the value the
    export fixed it to (None: a relation, not a fixed size), the line and its code."""

    assumption: Assumption
    symbol: str
    value: int | None
    code: str

    @property
    def fixed(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class Fix:
    """A fix sentence for one kind of line: `applies` reads the broken assumption (its op,
    its code), `text` writes the sentence."""

    name: str
    applies: Callable[[Broken], bool]
    text: Callable[[Broken], str]


_NUMBER_CALLS = ("int", "float", "math.", "range", "len", ".item", ".tolist", "np.", "numpy.")
_SHAPE_CALLS = (".reshape", ".view", ".expand", ".repeat", ".new_zeros", ".new_ones",
                "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.arange")


def _calls_number(b: Broken) -> bool:
    op = b.assumption.op
    return any(op == c or op.startswith(c) for c in _NUMBER_CALLS)


def _branches(b: Broken) -> bool:
    return bool(re.match(r"\s*(if|elif|while|assert)\b", b.code)) or " if " in b.code


def _literal_shape(b: Broken) -> bool:
    op = b.assumption.op.split(" ", 1)[0]
    return op.endswith(_SHAPE_CALLS) and b.value is not None and \
        re.search(rf"\b{b.value}\b", b.code) is not None


def _size_of(b: Broken) -> str:
    """The size expression the line reads (`h.shape[0]`, `x.size(0)`), else a generic one."""
    m = re.search(r"\w+(?:\.shape\[\d+\]|\.size\(\d*\))", b.code)
    return m.group(0) if m else "x.shape[0]"


FIXES: tuple[Fix, ...] = (
    Fix("python-number", lambda b: b.fixed and _calls_number(b),
        lambda b: f"`{call_text(b.assumption.op, b.code)}` makes the {b.symbol} size a "
                  "Python number, so "
                  f"torch.export fixed it to {b.value}: pass the size on as it is "
                  f"(`{_size_of(b)}` stays symbolic), or let the op infer it (`-1` in a "
                  "reshape, `flatten(1)`)"),
    Fix("branch", lambda b: b.fixed and _branches(b),
        lambda b: f"the Python branch on the {b.symbol} size fixed it to {b.value} while "
                  "exporting: compute both cases with tensor ops (`torch.where`, "
                  "`torch.cond`), or, when other sizes never occur, drop the dim from "
                  "`dynamic`"),
    Fix("literal-size", _literal_shape,
        lambda b: f"a literal {b.value} in `{b.assumption.op.split(' ', 1)[0]}` fixes the "
                  f"{b.symbol} size: take it from the input (`{_size_of(b)}`) or write "
                  "`-1`"),
    Fix("fixed", lambda b: b.fixed,
        lambda b: f"this line needs the {b.symbol} size as a constant, so the export fixed "
                  f"it to {b.value}: keep the size a tensor size there, or drop the dim "
                  "from `dynamic` if other sizes never occur"),
    Fix("relation", lambda b: True,
        lambda b: f"the export assumed `{b.assumption.text}` here and the ONNX graph does "
                  "not check it: feed only sizes that hold it (declare it: a fixture "
                  "shape or the dim's range), or change the line so it holds for any "
                  "size"),
)


def broken(assumptions: Sequence[Assumption], sizes: Mapping[str, int]) -> Broken | None:
    """The assumption `sizes` break that best explains a failure there: a fixed size
    before a relation, one with a source line before one without; None when they break
    none the export recorded."""
    found = [a for a in assumptions if set(a.symbols) <= set(sizes)
             and a.holds(sizes) is False]
    if not found:
        return None
    best = min(found, key=lambda a: (not _FIXED.match(a.text), not a.source))
    m = _FIXED.match(best.text)
    return Broken(best, m.group(1) if m else ", ".join(best.symbols),
                  int(m.group(2)) if m else None, _code(best.source))


def _code(source: str) -> str:
    path, _, line = source.rpartition(":")
    return linecache.getline(path, int(line)).strip() if path and line.isdigit() else ""


def call_text(op: str, code: str) -> str:
    """The call as the line writes it (`int(h.shape[0])` for op `int`), else the op."""
    callee = op.split(" (", 1)[0]
    if not callee or callee.startswith("operator"):
        return op or code
    at = code.find(f"{callee}(")
    if at < 0:
        return op
    while at > 0 and (code[at - 1].isalnum() or code[at - 1] in "_.[]") and \
            callee.startswith("."):
        at -= 1
    depth, end = 0, at + len(callee)
    for i in range(end, len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return code[at:i + 1]
    return op


def fix_for(b: Broken) -> str:
    return next(f.text(b) for f in FIXES if f.applies(b))


def culprit(b: Broken, scope: str, base: Path | None) -> Culprit:
    """The culprit record of a broken size assumption: the model's code owns it."""
    a = b.assumption
    what = (f"the export fixed {b.symbol} to {b.value} here" if b.fixed
            else f"the export assumed {a.text} here")
    return Culprit(scope=scope, kind=a.kind, aten="", call=call_text(a.op, b.code),
                   source=source_from(a.source, base), code=b.code, owner=Owner.MODEL,
                   owned_by=what, fix=fix_for(b))


def scope_of(module: Any, kind: str) -> str:
    """The module path of the one submodule of class `kind` ("(root)" for the root), or
    the class name where several or none have it."""
    if not kind:
        return "(root)"
    paths = [p for p, m in module.named_modules() if type(m).__name__ == kind]
    if len(paths) == 1:
        return paths[0] or "(root)"
    return kind


SCRIPT = '''#!/usr/bin/env python3
"""Reproduce {case_id}: the model exported at {export} run at {sizes}, where eager runs.

Generated by parity-gate {version}. Needs numpy and onnxruntime only:
    python repro.py            # exit 1: it fails as in the gate; 0: it does not
"""
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

''' + repro.GUARD + '''feeds = dict(np.load(HERE / "inputs.npz"))
so = ort.SessionOptions()
so.log_severity_level = 3
session = ort.InferenceSession(str(HERE / "model.onnx"), so, providers=META["providers"])
try:
    got = session.run(None, {{i.name: feeds[i.name] for i in session.get_inputs()}})
except Exception as exc:  # the error the gate met
    print(f"ONNX Runtime raises at {{META['sizes']}}: {{str(exc).strip().splitlines()[0]}}")
    sys.exit(1)
shapes = [list(g.shape) for g in got]
if shapes != META["eager_shapes"]:
    print(f"output shapes {{shapes}} where eager gives {{META['eager_shapes']}}")
    sys.exit(1)
print("ONNX Runtime gives eager's output shapes: it does not reproduce")
sys.exit(0)
'''


@dataclass(frozen=True)
class SizedCase:
    """What the repro of one size failure needs."""

    case_id: str
    model: bytes | str
    inputs: dict[str, np.ndarray]
    eager_shapes: list[list[int]]
    sizes: dict[str, int]
    export_sizes: dict[str, int]
    provider: str
    version: str


def write_repro(folder: Path, case: SizedCase) -> tuple[bool, str]:
    """The gate's model, the case's inputs and a script that fails as the gate saw; kept
    only when it exits 1 (True, what it printed), else removed (False, why)."""
    out = repro._Folder(folder)
    out.put("model.onnx", case.model if isinstance(case.model, bytes) else Path(case.model))
    out.put("inputs.npz", repro._npz(case.inputs))
    out.put("case.json", json.dumps({"case": case.case_id, "providers": [case.provider],
                                     "sizes": case.sizes, "export_sizes": case.export_sizes,
                                     "eager_shapes": case.eager_shapes}, indent=1) + "\n",
            binary=False)
    out.withheld()
    label = ", ".join(f"{k}={v}" for k, v in case.sizes.items())
    export = ", ".join(f"{k}={v}" for k, v in case.export_sizes.items())
    out.put("repro.py", SCRIPT.format(case_id=case.case_id, export=export or "its sizes",
                                      sizes=label or "other sizes", version=case.version,
                                      withheld=repro.WITHHELD), binary=False)
    code, printed = repro.run_script(folder)
    if code == 1:
        return True, printed.strip().splitlines()[0] if printed.strip() else ""
    remove(folder)
    return False, f"the repro exits {code}, not 1: not presented"
