"""Upstream reports as their maintainers write them, each with a repro that was run first.

For every searched signature without a confident match: repro candidates
(fewest elements first) run in a torch process of their own; the first that
fails where the defect shows is the repro, and its printed values, the
exported graph's nodes and the lowering's `file:line` go into the report. No
candidate reproduces: no report, and the signature says why. The title and
sections follow the owner's repository (onnxscript `[torchlib] ...`, pytorch
`[ONNX] ...`, onnxruntime's bug template). Every value from the run passes the
neutraliser (model.text) on its way in; the fingerprint is an HTML comment.
"""

from __future__ import annotations

import ast
import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from parity_gate.engine.fixtures import is_float_dtype, special_values
from parity_gate.engine.runtime import status_message
from parity_gate.github.upstream import (
    UpstreamOptions,
    _replace,
    fingerprint,
    issue_url,
    own_fingerprint,
)
from parity_gate.model.files import atomic_write, make_folder
from parity_gate.model.findings import Example
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import code_block, code_span, md_link, md_text, one_line
from parity_gate.model.upstream import (
    TRIGGER_PHRASE,
    OpRef,
    Owner,
    Signature,
    Symptom,
    UpstreamReport,
)
from parity_gate.ops import causes, elements, upstream_check, upstream_repro
from parity_gate.ops.jobs import SOURCES, source_of

TITLE_LIMIT = 256  # GitHub rejects longer issue titles
VERSIONS = ("torch", "onnxscript", "onnx", "onnxruntime", "onnxruntime-gpu", "python")
HOW_FOUND = ("Found by an op sweep that exports single-op modules with "
             "`torch.onnx.export(..., dynamo=True)` on every dtype eager accepts and on "
             "ordinary, special-value and empty inputs, runs them in ONNX Runtime and "
             "compares with eager; differences are checked against an exact or float64 "
             "reference before they are reported.")
Drafted = dict[str, tuple[str, str, str]]  # signature key → (repository, title, body)


def scope(sig: Signature) -> str:
    """`float32, float16; special values, empty inputs`: where the defect shows."""
    words = {"normal": "ordinary values", "range": "ordinary-range values",
             "specials": "special values (NaN, ±inf, ±0, extremes)", "empty": "empty inputs"}
    return f"{', '.join(sig.dtypes)}; {', '.join(words.get(c, c) for c in sig.input_classes)}"


def _value(text: str) -> str:
    """An example value as a title writes it: `0`, `-3.403e+38`, `NaN`, `inf`, `True`,
    `float16` (a dtype)."""
    if text in ("True", "False") or text in _DTYPE_NAMES:
        return text
    try:
        v = float(text)
    except ValueError:
        return "a different value"
    return "NaN" if v != v else "inf" if v == float("inf") else "-inf" if v == -float("inf") \
        else f"{v:.4g}"


_DTYPE_NAMES = frozenset({"float64", "float32", "float16", "bfloat16", "int64", "int32",
                          "int16", "int8", "uint8", "bool", "complex64", "complex128"})


def _values(example: Example) -> dict[str, str]:
    """Eager's and ONNX Runtime's values for a title: 4 significant digits, or as printed
    where those read alike (int64 -92233720368547759 vs -92233718306963456)."""
    eager, got = _value(example.eager), _value(example.onnx)
    return {"eager": eager, "got": got} if eager != got else \
        {"eager": example.eager, "got": example.onnx}


def _notable(text: str, dtype: str) -> str:
    """An input value a title names as the trigger: a special (NaN, ±inf, -0), a subnormal,
    a huge finite value (as it is: `8.988e+307`); "" for an ordinary one."""
    try:
        v = float(text)
    except ValueError:
        return ""
    if v != v or v in (float("inf"), -float("inf")):
        return _value(text)
    if v == 0:
        return "-0" if str(text).strip().startswith("-") else ""
    tiny = special_values(dtype, ["tiny"])[0] if is_float_dtype(dtype) else 0.0
    if abs(v) < tiny:
        return "subnormal"
    # a finite input the repro keeps this large is the trigger (shrunk where it is not)
    return f"{v:.4g}" if abs(v) >= upstream_repro.HUGE else ""


def _special(example: Example | None, dtype: str = "") -> str:
    """The input values an example needs, as a trigger: the one special (NaN, ±inf, -0),
    a subnormal, a huge finite value ("for an inf input", "for 8.988e+307")."""
    values = {_notable(v, dtype) for v in (example.inputs.values() if example is not None
                                          else ())} - {""}
    if not values:
        return ""
    if values == {"subnormal"}:
        return "for a subnormal input"
    specials = sorted(values)
    if len(specials) == 1 and specials[0] in ("NaN", "inf", "-inf", "-0"):
        article = "an" if specials[0].startswith("i") else "a"
        return f"for {article} {specials[0]} input"
    plain = all(v in ("NaN", "inf", "-inf", "-0") for v in specials)
    return f"for {_and(specials)}{' inputs' if plain else ''}" if len(specials) <= 2 else ""


def _dtypes_of(sig: Signature, cause: causes.Cause | None) -> list[str]:
    members = [s for s, _ in cause.members] if cause is not None else [sig]
    return list(dict.fromkeys(d for s in members for d in s.dtypes))


def trigger_words(sig: Signature, cause: causes.Cause | None, example: Example | None,
                  needless: Sequence[str] = (), kinds: Mapping[str, str] | None = None,
                  scoped: bool = True) -> list[str]:
    """What it takes to show the defect, as a title says it: the input class ("on an empty
    input"), the notable input value, the one dtype a value defect shows on or the dtypes
    an error alone shows on ("on bfloat16"), the keyword arguments every call of it
    passes."""
    cls = sig.input_classes[0] if sig.input_classes else ""
    phrase = bool(sig.symptom.info.phrase) and causes.family(sig.symptom) == "values"
    dtypes = _dtypes_of(sig, cause)
    # An empty input is the trigger whatever the symptom (an export that fails only on it);
    # a special value only where the symptom names a value.
    words = [TRIGGER_PHRASE.get(cls, "") if phrase or cls == "empty" else "",
             _special(example, dtypes[0] if dtypes else "") if cls == "specials" and phrase
             else ""]
    # a sweep's value defect on one of the dtypes swept, or on its integer dtypes alone (a
    # model run has one dtype: no cause); float32 is what a reader assumes
    said = sig.trigger or (cause.trigger if cause is not None and not phrase
                           and cause.trigger not in TRIGGER_PHRASE else "")
    on = _dtype_words(said.split(",")) if said and said != "empty" else \
        dtypes if phrase and len(dtypes) == 1 and cause is not None \
        and dtypes != ["float32"] else \
        ["integer inputs"] if phrase and cause is not None and len(dtypes) > 1 \
        and all(d.startswith(("int", "uint")) for d in dtypes) else []
    words.append(f"on {_and(on)}" if on and scoped else "")
    return [w for w in (*words, _with(sig, cause, needless, kinds)) if w]


def _dtype_words(dtypes: list[str]) -> list[str]:
    """Dtypes as a title says them: three or more integer dtypes (and bool) are "integer
    inputs" ("integer and bool inputs")."""
    ints = [d for d in dtypes if d.startswith(("int", "uint"))]
    rest = [d for d in dtypes if d not in ints]
    if len(ints) >= 3 and set(rest) <= {"bool"}:
        return ["integer and bool inputs" if rest else "integer inputs"]
    return dtypes


def _with(sig: Signature, cause: causes.Cause | None, needless: Sequence[str],
          kinds: Mapping[str, str] | None = None) -> str:
    """The keyword arguments a title names as the trigger, each as a reader can act on it:
    a string every call passes with its value (`with reduce=mean`), a tensor option with
    its kind (`with a float32 attn_mask`, `kinds`), any other by name; a string argument
    whose value differs between the calls ("with reduce" alone) is left to the body, and
    one the repro fails without (`needless`) is no trigger."""
    names = set(cause.args) if cause is not None else {a.split("=")[0] for a in sig.args}
    members = [s for s, _ in cause.members] if cause is not None else [sig]
    valued = {a.split("=")[0] for s in members for a in s.args if "=" in a}
    shared = set.intersection(*({a for a in s.args if "=" in a} for s in members))
    said = []
    for arg in sig.args:
        name = arg.split("=")[0]
        if name not in names or name in needless or (name in valued and arg not in shared):
            continue
        kind = (kinds or {}).get(name, "")
        if kind.endswith(" tensor"):
            said.append(f"a {kind.removesuffix(' tensor')} {name}")
        elif "=" in arg:
            said.append(arg)
        else:  # a number with its value where every call passes the same one
            value = _numeric(name, [c for s in members for c in s.calls])
            if value is not None:
                said.append(f"{name}={value}" if value else name)
    return f"with {', '.join(said)}" if said else ""


def _numeric(name: str, calls: Sequence[str]) -> str | None:
    """What the calls pass `name` where it is a number: its value where every call passes
    the same one (`p=2`), "" where they differ (`divisor_override`: the name alone is the
    trigger); None for a flag (`include_self=False`) or a tensor (`attn_mask=m`), which
    is no trigger by its name."""
    values: set[str] = set()
    for call in calls:
        try:
            tree = ast.parse(call, mode="eval")
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == name:
                inner = node.value.operand if isinstance(node.value, ast.UnaryOp) \
                    else node.value
                if not (isinstance(inner, ast.Constant) and type(inner.value) in (int, float)):
                    return None
                values.add(ast.unparse(node.value))
    return None if not values else values.pop() if len(values) == 1 else ""


def _and(words: Sequence[str]) -> str:
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def raised_title(sig: Signature, cause: causes.Cause | None, status: str) -> str:
    """An ONNX Runtime kernel that raises on a graph ONNX defines, as its maintainers
    title it: the kernel, the dtypes (where a few), an empty input, and what it says
    ("Pad raises on an empty input: Unexpected mode of 3")."""
    dtypes = _dtypes_of(sig, cause)
    on = f" on {_and(dtypes)}" if 0 < len(dtypes) <= 3 else ""
    empty = " on an empty input" if sig.input_classes == ["empty"] else ""
    said = status.split(". ", 1)[0].rstrip(".")
    return f"CPUExecutionProvider: {sig.kernel} raises{on}{empty}" + (f": {said}" if said else "")


def title(sig: Signature, cause: causes.Cause | None = None,
          example: Example | None = None, ignored: Sequence[str] = (), status: str = "",
          needless: Sequence[str] = (), kinds: Mapping[str, str] | None = None,
          call: str = "", scoped: bool = True) -> str:
    """A title as a user writes it, raw text to paste: the repository's prefix (onnxscript
    `[torchlib]`, pytorch `[ONNX]`), the op the user calls, the symptom with the values
    seen, and the trigger ("on an empty input", "with divisor_override"); a keyword
    argument measured not to be needed (`needless`: the repro fails without it) is no
    trigger; one measured to be ignored (`ignored`: ONNX Runtime returns eager's result
    without it) is the symptom ("avg_pool2d ignores divisor_override"); a kernel that
    raises, with what ONNX Runtime said (`status`). A one-element repro's `call`
    (`atan2(0.0, -2.0)`) names the op with its trigger: no other trigger word then (but a
    sweep's options and dtypes). Not
    `scoped`: the dtypes are measured not to be the trigger (no "on integer inputs")."""
    if cause is not None and cause.listing:
        text = gap_title(cause)
    elif sig.owner is Owner.KERNEL and sig.symptom is Symptom.MISSING_KERNEL:
        text = (f"CPUExecutionProvider has no kernel for {sig.kernel} with "
                f"{', '.join(sig.dtypes)}")
    elif sig.owner is Owner.KERNEL and sig.symptom is Symptom.RUN_FAILS and sig.kernel:
        text = raised_title(sig, cause, status)
    else:
        info = sig.symptom.info
        typed = example is not None and example.eager in _DTYPE_NAMES \
            and example.onnx in _DTYPE_NAMES
        what = info.phrase.format(**_values(example)) \
            if info.phrase and example is not None and \
            (typed or causes.family(sig.symptom) != "types") else info.title
        words = trigger_words(sig, cause, example, needless, kinds, scoped)
        if ignored:  # the values stay in the body
            what = f"ignores {' and '.join(ignored)}"
            words = [w for w in words if not w.startswith("with ")]
        # a kernel's wrong value is its ONNX op's, as ONNX Runtime's reports name it
        named = sig.kernel.split("(")[0].split(" ")[0] if sig.owner is Owner.KERNEL \
            and sig.kernel and sig.kernel[:1].isupper() else sig.op_name
        # a call on its values is the trigger; a sweep's still says its dtypes and options
        kept = [w for w in words if w.startswith(("with ", "on "))] if cause is not None \
            else []
        text = " ".join([call, what, *kept] if call else [named, what, *words])
        if sig.owner is Owner.KERNEL:
            text = f"CPUExecutionProvider: {text}"
    return one_line(f"{sig.owner.route.prefix} {_plain(text)}".strip())[:TITLE_LIMIT]


def on_values(name: str, example: Example | None, scoped: bool) -> str:
    """A sweep call on the verified one-element repro's own values, where every one is
    plain and ordinary (`atan2(0.0, -3.0)`: a special value is said as "for a NaN input"
    instead); integers as floats where the integer scope was measured wrong (`scoped`
    off: the float32 repro fails the same way); "" otherwise."""
    values = list(example.inputs.values()) if example is not None else []
    if not values or len(values) > 3 or not all(elements.plain(v) for v in values) \
            or any(_notable(v, "") for v in values):
        return ""
    if not scoped:
        values = [repr(float(v)) if v.lstrip("-").isdigit() else v for v in values]
    return f"{name}({', '.join(values)})"


def _gap_names(cause: causes.Cause) -> list[str]:
    """What a dtype gap's report lists: the kernels (ONNX Runtime's), or the ops a user
    calls (torchlib's), each once, the lead first."""
    kernel = cause.lead.symptom is Symptom.MISSING_KERNEL
    return list(dict.fromkeys(s.kernel if kernel else s.op_name for s, _ in cause.members))


def gap_title(cause: causes.Cause, room: int = TITLE_LIMIT - 30) -> str:
    """"CPUExecutionProvider has no float64 kernel for 12 ops: Acos(7), ...", or "23 ops
    emit ONNX ops whose type constraints exclude bfloat16: acos, ...": as many names as
    fit, then how many more."""
    names, dtype = _gap_names(cause), cause.trigger
    count = f"{len(names)} op" + ("s" if len(names) > 1 else "")
    head = (f"{cause.function} has no {dtype} kernel for {count}: "
            if cause.lead.symptom is Symptom.MISSING_KERNEL else
            f"{count} emit{'' if len(names) > 1 else 's'} ONNX nodes whose type constraints "
            f"exclude {dtype}: ")
    shown: list[str] = []
    for name in names:
        rest = len(names) - len(shown) - 1
        text = head + ", ".join([*shown, name]) + (f" and {rest} more" if rest else "")
        if len(text) > room and shown:
            break
        shown.append(name)
    rest = len(names) - len(shown)
    return head + ", ".join(shown) + (f" and {rest} more" if rest else "")


def gap_list(cause: causes.Cause) -> list[str]:
    """A dtype gap's members, one line per ONNX node and op: the node, the op a user calls
    and the calls that emit it."""
    calls: dict[tuple[str, str], list[str]] = {}
    for sig, _ in cause.members:
        calls.setdefault((sig.kernel, sig.user_op or sig.op_name), []).extend(sig.calls)
    lines = []
    for (node, op), seen in calls.items():
        seen = list(dict.fromkeys(seen)) or [op]
        more = f" and {len(seen) - 1} more call(s)" if len(seen) > 1 else ""
        lines.append(f"- {code_span(node)}: {code_span(op)} ({code_span(seen[0])}{more})")
    return lines


# What a title keeps of the names and values a results file supplies: words, numbers and
# the punctuation of a call, so the raw title is inert where markdown renders it (no tag,
# link, mention or emphasis can be spelled) and pasteable as it is.
_UNSAFE = re.compile(r"[^\w.,:=()+\- ]")


def _plain(text: str) -> str:
    return " ".join(_UNSAFE.sub("", text).split())


def _what(sig: Signature, case: CaseResult | None = None) -> str:
    calls = ", ".join(code_span(c) for c in sig.calls[:4])
    more = f" and {len(sig.calls) - 4} more calls" if len(sig.calls) > 4 else ""
    raised = case.op.raised if case is not None and case.op is not None else None
    if sig.symptom is Symptom.RUN_FAILS and sig.owner is Owner.KERNEL and raised is not None:
        values = "eager's answer" if raised.with_eager else "values (not eager's)"
        return (f"The ONNX model that {code_span('torch.onnx.export(..., dynamo=True)')} "
                f"writes for {calls}{more} passes {code_span('onnx.checker')} "
                f"({code_span('full_check=True')}), and {md_text(raised.oracle)} runs it "
                f"to {values}, but ONNX Runtime's {code_span('CPUExecutionProvider')} raises "
                f"in its {code_span(sig.kernel)} kernel. Affected: {md_text(scope(sig))}.")
    if sig.symptom is Symptom.MISSING_KERNEL:
        return (f"The ONNX model that {code_span('torch.onnx.export(..., dynamo=True)')} "
                f"writes for {calls}{more} is valid, but ONNX Runtime's "
                f"{code_span('CPUExecutionProvider')} has no kernel for "
                f"{code_span(sig.kernel)} with {md_text(', '.join(sig.dtypes))}, so the "
                "session cannot be created.")
    if sig.symptom in _AT_EXPORT:
        return (f"{code_span('torch.onnx.export(..., dynamo=True)')} of {calls}{more} "
                f"fails: the op {md_text(sig.symptom.info.title)}. Affected: "
                f"{md_text(scope(sig))}.")
    return (f"{calls}{more} exported with "
            f"{code_span('torch.onnx.export(..., dynamo=True)')} "
            f"{md_text(sig.symptom.info.title)} when run in ONNX Runtime "
            f"({code_span('CPUExecutionProvider')}). Affected: {md_text(scope(sig))}.")


def _what_gap(cause: causes.Cause) -> str:
    """A dtype gap's description: the general rule, the dtype and the first member."""
    lead, dtype = cause.lead, md_text(cause.trigger)
    first = f"{code_span(lead.user_op or lead.op_name)}, {code_span(lead.kernel)}"
    if lead.symptom is Symptom.MISSING_KERNEL:
        return (f"The ONNX models that {code_span('torch.onnx.export(..., dynamo=True)')} "
                f"writes for the ops below on {dtype} inputs are valid, but ONNX Runtime's "
                f"{code_span(cause.function)} has no {dtype} kernel for the ONNX op each "
                f"uses, so the session cannot be created. The repro shows the first ({first})"
                "; every op listed fails the same way on its own node:")
    return (f"{code_span('torch.onnx.export(..., dynamo=True)')} translates the ops below "
            f"on {dtype} inputs to ONNX nodes whose type constraints (at the exported opset) "
            f"exclude {dtype}, so the model is invalid: {code_span('onnx.checker')} rejects "
            f"it. The repro shows the first ({first}); every op listed fails the same way on "
            "its own node:")


def _aten(overload: str) -> str:
    return overload.replace("aten.", "aten::", 1).removesuffix(".default")


def measured(case: CaseResult | None) -> str:
    """What the sweep measured about ONNX Runtime's part, and nothing it did not: the re-run
    with graph optimizations off, and the graph run by ONNX's definition."""
    rc = case.recheck if case is not None else None
    said = []
    if rc is not None and rc.unoptimized is not None and rc.unoptimized.error is None:
        said.append("the difference vanishes with graph optimizations off (a fusion or "
                    "rewrite)" if rc.unoptimized.vanishes else "the difference persists "
                    "with graph optimizations off (`ORT_DISABLE_ALL`), so it is not a fusion")
    if rc is not None and rc.definition is not None and rc.definition.owner is Owner.KERNEL:
        said.append(f"the graph computes eager's answer by {md_text(rc.definition.oracle)}")
    return "; ".join(said)


# A node line of the verified repro's graph: "[node_max_pool1d] max_pool1d = MaxPool <...>".
_NODE_OP = re.compile(r"^\[[^\]]*\] [^=]*= (\w+)")


def node_ops(nodes: Sequence[str]) -> list[str]:
    """The ONNX op types of a repro's node lines, each once, in graph order."""
    return list(dict.fromkeys(m.group(1) for m in map(_NODE_OP.match, nodes) if m))


def _where(sig: Signature, cause: causes.Cause | None = None,
           case: CaseResult | None = None, nodes: Sequence[str] = ()) -> str:
    """Whose code it is: the kernel (with what was measured; a value's kernel is the ONNX
    op of the repro's graph), the torchlib function of the node at fault (the cause's
    culprit, not the first node of a decomposition), or the decomposition when no node
    was isolated."""
    if sig.owner is Owner.KERNEL and cause is not None and cause.listing:
        return (f"ONNX Runtime's {code_span(cause.function)}: its {md_text(cause.trigger)} "
                "kernel registrations (one missing per ONNX op listed).")
    if sig.owner is Owner.KERNEL:
        seen = measured(case) if sig.symptom is not Symptom.MISSING_KERNEL else ""
        ops = [sig.kernel] if sig.kernel else node_ops(nodes)
        which = ", ".join(code_span(o) for o in ops) if ops else "graph's"
        return (f"The {which} kernel{'s' if len(ops) > 1 else ''} of ONNX Runtime's CPU "
                f"execution provider{f' ({seen})' if seen else ''}.")
    said = f"{case.reason}\n{case.detail}" if case is not None else ""
    if sig.owner is Owner.CAPTURE:  # no ATen graph exists yet: no lowering is involved
        line = _CAUSED_BY.search(said)
        at = f", at {code_span(f'{line.group(1)} in {line.group(2)}')}" if line else ""
        return (f"`torch.export` (step 1/3 of `torch.onnx.export`), before any translation"
                f"{at}.")
    culprit = cause.culprit if cause is not None and cause.culprit and not cause.listing \
        else ""  # a dtype gap's draft is about its lead's own op (_blamed)
    calling = _CALLING.search(said)
    if calling and not sig.lowering and sig.symptom in _AT_EXPORT:
        at = f" in {code_span(calling.group(2))}" if calling.group(2) else ""
        return (f"{code_span(calling.group(1))}{at} raises while translating "
                f"{code_span(_aten(culprit or sig.overload))}'s decomposition (the call "
                "above, from the export error).")
    missing = _NO_FUNCTION.search(said)
    if missing and not sig.lowering:
        op = _aten(culprit or sig.overload)
        if (missing.group(1), missing.group(2)) == ("aten", OpRef(culprit or sig.overload).name):
            return (f"No torchlib function is registered for {code_span(op)}, and torch "
                    "registers no decomposition of it for export.")
        return (f"{code_span(op)} is decomposed before translation; its "
                f"{code_span(missing.group(1) + '::' + missing.group(2))} has no translation "
                "(no torchlib function is registered for it).")
    if sig.lowering:
        at = f" in {code_span(sig.lowering_at)}" if sig.lowering_at else ""
        return (f"{code_span(sig.lowering)}{at}, the torchlib function registered for "
                f"{code_span(_aten(culprit or sig.overload))}" + (
                    f" (the {code_span(sig.op_name)} call reaches it through its "
                    "decomposition)." if culprit and culprit != sig.overload else "."))
    if cause is not None and not culprit and case is not None and case.op is not None:
        nodes = ", ".join(code_span(_aten(o)) for o in case.op.aten_ops[:8])
        return (f"{code_span(sig.user_op or sig.op_name)} is decomposed before translation "
                f"(into {nodes}); the node that departs was not isolated.")
    return (f"The translation of {code_span(_aten(culprit or sig.overload))}: no torchlib "
            "function is registered under that name (it is decomposed first).")


def also_seen(cause: causes.Cause | None, limit: int = 15) -> str:
    """The cause's other ops, one line each with the symptoms and a call that shows them
    (one draft per root cause, not per symptom, keyword argument or call)."""
    if cause is None or not cause.also:
        return ""
    by_op: dict[str, list[Signature]] = {}
    for other in cause.also:
        by_op.setdefault(other.user_op or other.op_name, []).append(other)
    lines = []
    for op, sigs in by_op.items():
        symptoms = "; ".join(dict.fromkeys(s.symptom.info.title for s in sigs))
        calls = [c for s in sigs for c in s.calls[:1]]
        more = f" and {len(calls) - 1} more call(s)" if len(calls) > 1 else ""
        lines.append(f"- {code_span(op)}: {md_text(symptoms)} "
                     f"({code_span(calls[0]) if calls else ''}{more})")
    rest = f"\n- and {len(lines) - limit} more ops" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + rest


def body(sig: Signature, run: RunResult, repro: str, answer: Mapping[str, Any] | None,
         report: UpstreamReport, cause: causes.Cause | None = None,
         case: CaseResult | None = None) -> str:
    """The report, sections in the owner's repository's order, every outside value inert;
    one per root cause, its other calls and symptoms listed as "also seen"."""
    output = "\n".join(line for line in str((answer or {}).get("output", "")).splitlines()
                       if not line.startswith("[torch.onnx]")).strip()
    error = str((answer or {}).get("error", ""))
    actual = "\n".join(p for p in (output, error) if p) or "(not run)"
    nodes = list((answer or {}).get("nodes") or [])
    shown_nodes = code_block("\n".join(nodes[:upstream_check.NODE_LIMIT])
                             + ("\n..." if len(nodes) > upstream_check.NODE_LIMIT else ""))
    related = "\n".join(f"- {md_link(m.title[:100], issue_url(m.repo, m.number))} "
                        f"({m.kind.value.replace('_', ' ')}; {md_text('; '.join(m.why))})"
                        for m in report.related)
    versions = "\n".join(f"- {name}: {md_text(run.versions[name])}" for name in VERSIONS
                         if name in run.versions)
    where = _where(sig, cause, case, nodes)
    listing = cause is not None and cause.listing
    what = f"{_what_gap(cause)}\n\n" + "\n".join(gap_list(cause)) \
        if cause is not None and listing else _what(sig, case)  # the template's sections stay
    if sig.owner is Owner.KERNEL:  # onnxruntime's bug template
        graph = f"\n\nThe exported graph:\n\n{shown_nodes}" if nodes else ""
        sections = [("Describe the issue", f"{what}{graph}\n\n{_expected(sig)}"),
                    ("To reproduce", f"{code_block(repro, 'python')}\n\nOutput:\n\n"
                                     f"{code_block(actual)}"),
                    ("Urgency", "None (found by a test sweep)."),
                    ("Platform", md_text(platform.system() or "Linux")),
                    ("ONNX Runtime Installation", "Released Package"),
                    ("ONNX Runtime Version or Commit ID",
                     md_text(run.versions.get("onnxruntime", ""))),
                    ("ONNX Runtime API", "Python"),
                    ("Architecture", md_text(platform.machine() or "X64")),
                    ("Execution Provider", "Default CPU"),
                    ("Where", where), ("Versions", versions)]
    else:
        sections = [("🐛 Describe the bug", what),
                    ("Repro", code_block(repro, "python")),
                    ("Expected vs actual", f"{_expected(sig)}\n\nOutput of the repro:\n\n"
                                           f"{code_block(actual)}"),
                    ("ONNX nodes involved", shown_nodes if nodes else
                     "(no model was produced)"),
                    ("Where it fails" if sig.owner is Owner.CAPTURE else
                     "Where the lowering lives", where), ("Versions", versions)]
    if cause is not None and cause.also and not listing:
        sections.insert(1, ("Also seen (same cause)", also_seen(cause)))
    if related:
        sections.append(("Possibly related", related))
    sections.append(("How it was found", md_text(HOW_FOUND)))
    text = "\n\n".join(f"### {head}\n\n{block}" for head, block in sections)
    return f"{text}\n\n<!-- {fingerprint(sig)} -->\n"


_EXPECTED = {
    Symptom.MISSING_KERNEL: "Expected: the session is created and returns what eager returns.",
    Symptom.INVALID_MODEL: "Expected: a valid model that ONNX Runtime loads and that returns "
                           "what eager returns.",
    Symptom.RUN_FAILS: "Expected: the model runs and returns what eager returns.",
    Symptom.EXPORT_FAILS: "Expected: the export succeeds.",
    Symptom.UNSUPPORTED: "Expected: the export succeeds; actual: no ONNX function is found "
                         "for the operator (below).",
    Symptom.CRASH: "Expected: the model runs; the process is killed instead.",
    Symptom.WRONG_DTYPE: "Expected: ONNX Runtime returns the dtype eager returns; actual: "
                         "another dtype.",
    Symptom.LOW_PRECISION: "Expected: the graph computes in the dtype eager returns (the "
                           "`dtype=` the call asks for); actual: a node computes in a "
                           "narrower one.",
}
# What fails before ONNX Runtime runs anything: the description says the export does.
# Where torch.export stopped (its "Caused by" line), and the operator no ONNX function was
# found for.
_CAUSED_BY = re.compile(r"Caused by: \(([\w/.]+:\d+) in (\w+)\)")
_NO_FUNCTION = re.compile(r"(?:No ONNX function found for <OpOverload\(op='|unsupported "
                          r"operator )(\w+)\.(\w+)")
_CALLING = re.compile(r"Error calling function '(\w+)'(?:[^\n]*?defined at '[^']*?"
                      r"(onnxscript/[^']+)')?")
_AT_EXPORT = frozenset({Symptom.EXPORT_FAILS, Symptom.UNSUPPORTED})


def _expected(sig: Signature) -> str:
    return _EXPECTED.get(sig.symptom, "Expected: ONNX Runtime returns what eager returns "
                         "(the float64 value is printed as the reference); actual: it "
                         f"{sig.symptom.info.title}.")


def _variants(leads: list[CaseResult]) -> tuple[dict[str, Any], dict[str, str]]:
    """The variants the leads were swept from: the catalogue's, and PyTorch's OpInfo
    samples for `oi.*` cases (built once per torch version, then cached). A source that
    cannot be loaded here costs only its own drafts: the reason, by variant prefix."""
    from parity_gate.ops.registry import load_variants

    out: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name, source in SOURCES.items():
        if not any(source_of(c.id) == source for c in leads):
            continue
        try:
            out.update(load_variants((source,)))
        except Exception as exc:  # e.g. OpInfo without `expecttest`
            failed[source] = f"the {name} variants could not be loaded here: " + \
                one_line(f"{type(exc).__name__}: {exc}")[:200]
    return out, failed


def _leads(reports: list[UpstreamReport], found: list[tuple[Signature, list[CaseResult]]]
           ) -> tuple[dict[str, causes.Cause], dict[str, Signature]]:
    """Each signature's cause, and per cause the signature its draft is written for: the
    first (most direct) of its signatures searched without a confident match."""
    cause_of = causes.of(causes.group(found))
    todo = {r.signature.key for r in reports
            if r.match is None and r.searched and r.signature is not None}
    leads: dict[str, Signature] = {}
    for key in todo:
        cause = cause_of[key]
        if cause.key not in leads:
            leads[cause.key] = next(s for s, _ in cause.members if s.key in todo)
    return cause_of, leads


def _why_not(built: list[upstream_repro.Repro], not_loaded: str | None, unavailable: str) -> str:
    return (f"no repro could be built ({not_loaded})" if not_loaded else
            "no repro could be built (the op is not in the catalogue)" if not built else
            f"the repro could not be run here ({unavailable})" if unavailable else
            "no repro candidate reproduced it on its own (the finding depends on the "
            "sweep's batch, or is flaky)")


def prepare(run: RunResult, reports: list[UpstreamReport],
            found: list[tuple[Signature, list[CaseResult]]], options: UpstreamOptions,
            ) -> tuple[list[UpstreamReport], Drafted, list[str]]:
    """One draft per root cause without a confident match, for its lead signature, whose
    repro reproduces (every one with `verify` off); every signature of the cause shares
    it. Reports gain the lowering of the node at fault and, where nothing reproduced, why."""
    cases = {sig.key: cs for sig, cs in found}
    cause_of, leads = _leads(reports, found)
    variants, unloaded = _variants([cases[s.key][0] for s in leads.values()]) \
        if leads else ({}, {})
    built: dict[str, list[upstream_repro.Repro]] = {}
    for sig in leads.values():
        lead = cases[sig.key][0]
        variant = variants.get(lead.op.variant) if lead.op is not None else None
        if variant is not None:
            try:
                built[sig.key] = upstream_repro.candidates(sig, lead, variant)
            except Exception:
                built[sig.key] = []
    overloads = [_blamed(cause_of[s.key], s) for s in leads.values()
                 if s.owner is not Owner.KERNEL and built.get(s.key)]
    chosen, answers, lowerings, unavailable = _verify(run, built, overloads, options)
    ignored, needless, unscoped = measured_args(
        run, chosen, {s.key: cause_of[s.key].args for s in leads.values()},
        {s.key for s in leads.values() if causes.family(s.symptom) == "values"}, options)
    drafted: Drafted = {}
    done: dict[str, Signature | str] = {}  # cause key → the drafted signature, or why not
    for key, sig in leads.items():
        cause = cause_of[sig.key]
        where = [*(lowerings.get(_blamed(cause, sig)) or []), "", ""]
        sig = Signature.from_dict({**sig.to_dict(), "lowering": where[0],
                                   "lowering_at": where[1]})
        pick = chosen.get(sig.key)
        if pick is None and not options.verify:  # unverified (tests of the wording only)
            pick = upstream_repro.Repro("# no repro: the op is not in the catalogue\n")
        if pick is None:
            done[key] = _why_not(built.get(sig.key, []),
                                 unloaded.get(source_of(cases[sig.key][0].id)), unavailable)
            continue
        done[key] = sig
        report = _known(next(r for r in reports if r.signature and r.signature.key == sig.key),
                        reports, cause, cause_of)
        lead = cases[sig.key][0]
        example = as_printed(lead.op.example if lead.op is not None else None,
                             answers.get(sig.key), pick.values if sig.key in answers else None)
        status = status_message(lead.detail or lead.reason)
        scoped = sig.key not in unscoped
        # the verified one-element repro's values name a wrong value's trigger
        # (`atan2(0.0, -3.0)`); a dtype is wrong whatever the values
        call = on_values(sig.op_name, example, scoped) if sig.key in answers \
            and pick.kind == "one element" and sig.owner is not Owner.KERNEL \
            and causes.family(sig.symptom) == "values" else ""
        text = (sig.owner.route.repo, title(sig, cause, example, ignored.get(sig.key, ()),
                                            status, needless.get(sig.key, ()),
                                            call=call, scoped=scoped),
                body(sig, run, pick.script, answers.get(sig.key),
                     _replace(report, signature=sig.to_dict()), cause, lead))
        drafted.update({member.key: text for member, _ in cause.members})
    return _settle(reports, cause_of, done), drafted, []


def _blamed(cause: causes.Cause, lead: Signature) -> str:
    """The ATen overload whose lowering a draft points at: the cause's culprit, but for a
    dtype gap (many ops, each its own node) the lead's own op, which the repro shows."""
    return lead.overload if cause.listing else cause.culprit or lead.overload


_PRINTED = re.compile(r"^eager: tensor\((\S+?)[,)].*?\| onnxruntime: tensor\((\S+?)[,)]",
                      re.M)
# What a dtype repro prints: eager's dtype and ONNX Runtime's, or the dtype eager returns
# and the narrower one the graph computes in.
_DTYPES = re.compile(r"^eager: torch\.(\w+) \| onnxruntime: torch\.(\w+)$", re.M)
_COMPUTES = re.compile(r"^eager returns torch\.(\w+) \| the graph computes \[\('[^']*', "
                       r"'(\w+)'\)", re.M)


def as_printed(example: Example | None, answer: Mapping[str, Any] | None,
               inputs: Mapping[str, str] | None = None) -> Example | None:
    """The example with the values the verified repro printed, where it printed one element
    each side (or the two dtypes): the title then quotes what the reader's run of the repro
    shows (a shrunk input gives other values than the sweep's); `inputs`, the repro's own
    one-element inputs where it has them: a verified repro of another kind (`{}`) shows
    the defect on many values, so the sweep's values at the worst element are no trigger
    (a scatter's output element is not fed by the inputs at its index)."""
    output = str((answer or {}).get("output", ""))
    typed = _DTYPES.search(output) or _COMPUTES.search(output)
    if example is None and typed is None:
        return None
    if typed is not None:
        return Example(example.output if example else "o0", example.index if example else [],
                       typed.group(1), typed.group(2), dict(inputs or {}))
    assert example is not None
    found = _PRINTED.search(output)
    given = dict(inputs) if inputs is not None else example.inputs
    if found is None or found.group(1).startswith("["):
        return Example(example.output, example.index, example.eager, example.onnx, given)
    eager, onnx = found.groups()
    # torch prints 4 or 5 significant digits: 1.7977e+308 reads back as inf, so a printed
    # value that overflows when read keeps the sweep's own
    eager, onnx = (seen if _value(seen) not in ("inf", "-inf") or "inf" in seen else swept
                   for seen, swept in ((eager, example.eager), (onnx, example.onnx)))
    return Example(example.output, example.index, eager, onnx, given)


def _known(report: UpstreamReport, reports: list[UpstreamReport], cause: causes.Cause,
           cause_of: dict[str, causes.Cause]) -> UpstreamReport:
    """A listing's draft cites the reports its members already have (a report of one node
    claims that node only): first among the possibly related."""
    if not cause.listing:
        return report
    claimed = [r.match for r in reports if r.match is not None and r.signature is not None
               and cause_of[r.signature.key] is cause]
    unique = {(m.repo, m.number): m for m in [*claimed, *report.related]}
    return _replace(report, related=[m.to_dict() for m in unique.values()])


def _settle(reports: list[UpstreamReport], cause_of: dict[str, causes.Cause],
            done: dict[str, Signature | str]) -> list[UpstreamReport]:
    """Each report with its cause's outcome: the lead gains its lowering; a signature whose
    cause was not drafted says why."""
    out = []
    for r in reports:
        sig = r.signature
        state = done.get(cause_of[sig.key].key) if sig is not None else None
        if isinstance(state, Signature) and sig is not None and state.key == sig.key:
            r = _replace(r, signature=state.to_dict())
        elif isinstance(state, str):
            r = _replace(r, not_drafted=state)
        out.append(r)
    return out


def _salt(run: RunResult) -> str:
    """What a cached answer depends on besides its script: the versions that ran it."""
    return "|".join(f"{k}={run.versions.get(k, '')}" for k in ("torch", "onnxscript",
                                                               "onnxruntime"))


def measured_args(run: RunResult, chosen: Mapping[str, upstream_repro.Repro],
                  wanted: Mapping[str, Sequence[str]], values: set[str],
                  options: UpstreamOptions
                  ) -> tuple[dict[str, list[str]], dict[str, list[str]], set[str]]:
    """Signature key → (the keyword arguments of `wanted` ONNX Runtime was measured to
    ignore, those the defect was measured not to need), and the keys whose integer scope
    was measured wrong. Ignored: a probe on the chosen repro's inputs finds its output
    equal to eager's without the argument (upstream_repro.ignored_probe; value defects,
    `values`, only). Not needed: the repro without it still fails the same way
    (upstream_repro.needless_probe), so the title does not name it as the trigger. Not
    the integers': the one-element repro on float32 inputs fails the same way
    (upstream_repro.float_probe; value defects), so the title does not say "on integer
    inputs". Nothing is claimed unverified."""
    probes: list[dict[str, Any]] = []
    needless: dict[str, upstream_repro.Repro] = {}
    for key in values:
        repro = chosen.get(key)
        floated = upstream_repro.float_probe(repro) if repro is not None else None
        if floated is not None:
            needless[f"float\n{key}\n"] = floated
            probes.append({"key": f"float\n{key}\n", "script": floated.script,
                           "stages": floated.stages})
    for key, names in wanted.items():
        repro = chosen.get(key)
        if repro is None:
            continue
        for name in names:
            script = upstream_repro.ignored_probe(repro, name) if key in values else None
            if script is not None:
                probes.append({"key": f"ignored\n{key}\n{name}", "script": script,
                               "stages": {}})
            bare = upstream_repro.needless_probe(repro, name)
            if bare is not None:
                needless[f"needless\n{key}\n{name}"] = bare
                probes.append({"key": f"needless\n{key}\n{name}", "script": bare.script,
                               "stages": bare.stages})
    if not probes or not options.verify:
        return {}, {}, set()
    checked = upstream_check.check_all(probes, [], options.check_cache, _salt(run))
    ignored: dict[str, list[str]] = {}
    unneeded: dict[str, list[str]] = {}
    unscoped: set[str] = set()
    for item in probes:
        answer = checked.answers.get(item["key"]) or {}
        kind, key, name = str(item["key"]).split("\n", 2)
        same = bool(answer) and kind in ("needless", "float") and upstream_repro.reproduced(
            needless[item["key"]], answer["stage"], answer["error"],
            str(answer.get("output", "")))
        if kind == "ignored" and answer.get("stage") == "ok" \
                and upstream_repro.IGNORED in str(answer.get("output")):
            ignored.setdefault(key, []).append(name)
        elif kind == "needless" and same:
            unneeded.setdefault(key, []).append(name)
        elif kind == "float" and same:
            unscoped.add(key)
    return ignored, unneeded, unscoped


def _verify(run: RunResult, built: dict[str, list[upstream_repro.Repro]], overloads: list[str],
            options: UpstreamOptions) -> tuple[dict[str, upstream_repro.Repro],
                                               dict[str, dict[str, Any]],
                                               dict[str, list[str]], str]:
    """Run the candidates in rounds (first candidates of all, then the next of those not
    yet reproduced); the chosen repro per signature, its answer, the lowerings, and why
    nothing could run here (torch or onnxruntime missing), if so."""
    if not options.verify:
        return ({k: c[0] for k, c in built.items() if c}, {}, {}, "")
    salt = _salt(run)
    chosen: dict[str, upstream_repro.Repro] = {}
    answers: dict[str, dict[str, Any]] = {}
    lowerings: dict[str, list[str]] = {}
    rounds = max((len(c) for c in built.values()), default=0)
    for i in range(max(rounds, 1 if overloads else 0)):
        batch = {k: c[i] for k, c in built.items() if k not in chosen and i < len(c)}
        checked = upstream_check.check_all(
            [{"key": k, "script": r.script, "stages": r.stages} for k, r in batch.items()],
            sorted(set(overloads)) if i == 0 else [], options.check_cache, salt)
        if checked.unavailable:
            return chosen, answers, lowerings, checked.unavailable
        lowerings.update(checked.lowerings)
        for k, r in batch.items():
            answer = checked.answers.get(k)
            if answer and upstream_repro.reproduced(r, answer["stage"], answer["error"],
                                                    str(answer.get("output", ""))):
                chosen[k], answers[k] = r, answer
    return chosen, answers, lowerings, ""


def write(reports: list[UpstreamReport], drafted: Drafted, folder: Path) -> list[UpstreamReport]:
    """One markdown file per drafted cause, its title raw on the first heading (pasted as
    GitHub's title; `title` keeps it to characters markdown cannot turn into anything);
    reports gain the draft's path."""
    out = []
    paths: dict[str, Path] = {}  # fingerprint → the file written for it
    for report in reports:
        sig = report.signature
        if sig is not None and sig.key in drafted:
            repo, head, text = drafted[sig.key]
            fp = own_fingerprint(text) or fingerprint(sig)
            if fp not in paths:
                make_folder(folder.parent, folder)
                paths[fp] = folder / f"{_slug(head, fp)}.md"  # the cause's lead's title
                atomic_write(paths[fp], f"<!-- open at https://github.com/{repo}/issues/new "
                                        f"-->\n# {head}\n\n{text}")
            report = _replace(report, draft=str(paths[fp]))
        out.append(report)
    return out


def _slug(head: str, fp: str) -> str:
    """A draft's file name: its title's words (the repository's prefix dropped) and the
    fingerprint's last digits, which keep two causes with one title apart."""
    words = re.sub(r"[^\w.-]+", "_", head.split("] ", 1)[-1]).strip("_")
    return f"{words[:100]}-{fp[-6:]}"
