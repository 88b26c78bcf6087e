"""The repro an upstream report carries: a short script on the fewest elements that show it.

It needs torch and onnxruntime only, exports one op, runs it in ONNX Runtime
and prints eager, ONNX Runtime and a float64 run at the element that differs;
it fails (an assertion, or the exporter's or runtime's own error) exactly when
the defect shows. Candidates come smallest first: one element per input for an
elementwise op (the sweep recorded the differing element and its inputs),
seeded ordinary data, then the sweep's own inputs. The drafting side runs
them (`upstream_check`) and keeps the first that reproduces; none: no draft.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field, replace

import numpy as np

from parity_gate.model.results import CaseResult
from parity_gate.model.upstream import Signature, Symptom
from parity_gate.ops.inputs import make_inputs
from parity_gate.ops.records import FLOATS, OpVariant

# Where each symptom shows: the statement of the script that must raise.
EXPECTED_STAGE = {
    Symptom.EXPORT_FAILS: "export", Symptom.UNSUPPORTED: "export",
    Symptom.INVALID_MODEL: "session", Symptom.RUN_FAILS: "run",
    Symptom.MISSING_KERNEL: "session", Symptom.CRASH: "died",
}
_NOT_IMPLEMENTED = r"NOT_IMPLEMENTED|Could not find an implementation"


@dataclass(frozen=True)
class Repro:
    """A candidate script, the line of each stage in it, and where it must fail."""

    script: str
    stages: dict[int, str] = field(default_factory=dict)  # line number → stage
    expect: str = "assert"  # the stage that must fail ("died": the process is killed)
    kind: str = ""          # "one element" | "seeded" | "sweep inputs"
    needs: str = ""         # a pattern the error must show (a kernel gap names itself)
    values: dict[str, str] = field(default_factory=dict)  # one-element inputs, by name
    shows: str = ""         # a pattern its output must show (the symptom's special value)

    @property
    def lines(self) -> int:
        return self.script.count("\n") + 1


def _literal(array: np.ndarray) -> str:
    if array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        values = [_float(v) for v in array.astype(np.float64).ravel().tolist()]
        return "[" + ", ".join(values) + "]"
    return repr(array.astype(np.int64 if array.dtype.kind != "b" else bool).ravel().tolist())


def _float(v: float) -> str:
    if v != v:
        return 'float("nan")'
    if v in (float("inf"), float("-inf")):
        return 'float("inf")' if v > 0 else '-float("inf")'
    return repr(v)


def _tensor(array: np.ndarray, requires_grad: bool, seeded: bool) -> str:
    dtype = array.dtype.name
    grad = ".requires_grad_()" if requires_grad and dtype in FLOATS else ""
    shape = tuple(array.shape)
    if array.size == 0:
        return f"torch.zeros({shape}, dtype=torch.{dtype}){grad}"
    if seeded and dtype in FLOATS:
        return f"torch.randn({shape}).to(torch.{dtype}){grad}"
    if seeded and dtype == "bool":
        return f"torch.rand({shape}) < {float(array.mean()):.2g}"
    low, high = (int(array.min()), int(array.max()) + 1) if array.dtype.kind in "iu" \
        else (0, 0)
    if seeded and array.dtype.kind in "iu" and -2**31 < low < high < 2**31:
        # the sweep's range, so indices stay valid (an extreme value stays a literal)
        return f"torch.randint({low}, {high}, {shape}, dtype=torch.{dtype})"
    reshape = "" if array.ndim == 1 else f".reshape({shape})"
    text = _literal(array)
    if array.ndim == 0:
        text, reshape = text[1:-1], ""
    return f"torch.tensor({text}, dtype=torch.{dtype}){reshape}{grad}"


def _element(value: str, dtype: np.dtype, requires_grad: bool) -> str:
    grad = ".requires_grad_()" if requires_grad and dtype.name in FLOATS else ""
    number = _float(float(value)) if dtype.kind == "f" or dtype.name == "bfloat16" else \
        _integer(value, dtype)
    return f"torch.tensor([{number}], dtype=torch.{dtype.name}){grad}"


def _integer(value: str, dtype: np.dtype) -> str:
    """An integer or bool element as Python writes it: a shrunk extreme ("-100.0") is -100."""
    if dtype.kind == "b":
        return str(value.strip().lower() in ("true", "1", "1.0"))
    try:
        return str(int(value))
    except ValueError:
        return str(int(float(value)))


def _check(symptom: Symptom, k: int | None, where: str, tol: tuple[float, float]) -> list[str]:
    """The last lines: what is printed, and the statement that fails when the defect shows."""
    pick = "" if k is None else f"[{k}]"
    out = [f"got = torch.from_numpy(session.run(None, feeds){pick or '[0]'})",
           f"expected = model(*inputs){pick}.detach()",
           f"exact = model(*(t.double() if t.is_floating_point() else t for t in inputs)){pick}",
           f"print('eager:', expected{where}, '| onnxruntime:', got{where}, "
           f"'| float64:', exact{where}.item())" if where else
           "print('eager:', expected, '| onnxruntime:', got, '| float64:', exact)"]
    if symptom is Symptom.SIGNED_ZERO_LOST:
        out.append(f"assert got{where or '[0]'}.signbit() == expected{where or '[0]'}.signbit(), "
                   "'the sign of zero differs'")
    elif symptom is Symptom.WRONG_DTYPE:
        out[-1] = "print('eager:', expected.dtype, '| onnxruntime:', got.dtype)"
        out.append("assert got.dtype == expected.dtype, 'the output dtype differs'")
    elif symptom is Symptom.WRONG_SHAPE:
        out[-1] = "print('eager:', tuple(expected.shape), '| onnxruntime:', tuple(got.shape))"
        out.append("assert got.shape == expected.shape, 'the output shape differs'")
    else:
        out.append(f"torch.testing.assert_close(got, expected, equal_nan=True, atol={tol[0]!r},"
                   f" rtol={tol[1]!r})")
    return out


@dataclass(frozen=True)
class _Subject:
    """What every candidate script of one report reproduces: the signature (its
    symptom), the op variant, the sweep's lead case and the case's tolerance."""

    sig: Signature
    variant: OpVariant
    case: CaseResult
    tol: tuple[float, float]


def _script(subject: _Subject, inputs: list[str], where: str, kind: str,
            checker: bool = False, plant: tuple[str, ...] = ()) -> Repro:
    """One candidate: the op as a module on `inputs` (torch literals), exported, loaded
    (through the ONNX checker first with `checker`) and run in ONNX Runtime, ending in
    the statement that fails when the defect shows; `where` indexes the element printed."""
    sig, case = subject.sig, subject.case
    lines = _model_lines(subject.variant, inputs, kind)
    if plant:  # the one special value the defect needs, in ordinary data
        at = lines.index("model = Model().eval()")
        lines[at:at] = ["with torch.no_grad():", *(f"    {p}" for p in plant)]
    stages: dict[int, str] = {}
    low = sig.symptom is Symptom.LOW_PRECISION
    lines.append("onnx_program = torch.onnx.export(model, inputs, dynamo=True"
                 + (", optimize=False)" if low else ")"))
    stages[len(lines)] = "export"
    if checker:
        lines.append("import onnx; onnx.checker.check_model(onnx_program.model_proto, "
                     "full_check=True)")
        stages[len(lines)] = "session"
    lines.append("session = ort.InferenceSession(onnx_program.model_proto.SerializeToString(), "
                 "providers=['CPUExecutionProvider'])")
    stages[len(lines)] = "session"
    bf16 = any("bfloat16" in t for t in inputs)
    if bf16:  # numpy has no bfloat16: ONNX Runtime takes its bits
        lines.append("feeds = {i.name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type("
                     "t.detach().view(torch.int16).numpy(), 16) if t.dtype == torch.bfloat16 "
                     "else t.detach().numpy() for i, t in zip(session.get_inputs(), inputs)}")
    else:
        lines.append("feeds = {i.name: t.detach().numpy() for i, t in "
                     "zip(session.get_inputs(), inputs)}")
    _failing_lines(subject, where, bf16, lines, stages)
    needs = _NOT_IMPLEMENTED if sig.symptom is Symptom.MISSING_KERNEL else _said(case) \
        if sig.symptom in (Symptom.EXPORT_FAILS, Symptom.UNSUPPORTED) else ""
    return Repro("\n".join(lines) + "\n", stages, EXPECTED_STAGE.get(sig.symptom, "assert"),
                 kind, needs)


def _model_lines(variant: OpVariant, inputs: list[str], kind: str) -> list[str]:
    """The script's head: its imports (math and F only when the call uses them), the op
    as a module, the inputs (seeded for a "seeded" candidate) and the model."""
    params = ", ".join(variant.arg_names)
    uses = [f"import {m}" for m in ("math",) if re.search(rf"\b{m}\.", variant.call)]
    if re.search(r"(?<![\w.])F\.", variant.call):
        uses.append("import torch.nn.functional as F")
    lines = ["import torch", *uses, "import onnxruntime as ort", "", "",
             "class Model(torch.nn.Module):",
             f"    def forward(self, {params}):",
             f"        return {variant.call}", "", ""]
    if kind == "seeded":
        lines.append("torch.manual_seed(0)")
    lines += ["inputs = (", *(f"    {t}," for t in inputs), ")", "model = Model().eval()"]
    return lines


def _failing_lines(subject: _Subject, where: str, bf16: bool, lines: list[str],
                   stages: dict[int, str]) -> None:
    """The script's tail, by symptom, with the stage of each statement that may fail: a
    run that must raise (or die), the precision audit's op in the typed graph, or the
    printed values and the comparison that fails (on the output that differs)."""
    sig, case = subject.sig, subject.case
    example = case.op.example if case.op is not None else None
    k = int(example.output[1:]) if example is not None and example.output[1:].isdigit() \
        else 0
    multi = len(case.comparisons) > 1  # the op returns a tuple: pick the output that differs
    if EXPECTED_STAGE.get(sig.symptom) in ("export", "session"):
        lines.append("session.run(None, feeds)")
        stages[len(lines)] = "run"
        lines.append("print('no error')")
    elif sig.symptom in (Symptom.RUN_FAILS, Symptom.CRASH):
        lines.append("print(session.run(None, feeds))")
        stages[len(lines)] = "run"
    elif sig.symptom is Symptom.LOW_PRECISION:
        op_type = _low_op(case)
        base = len(lines)
        lines += ["import onnx",
                  "typed = onnx.shape_inference.infer_shapes(onnx_program.model_proto).graph",
                  "types = {v.name: onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type."
                  "elem_type) for v in [*typed.value_info, *typed.input, *typed.output]}",
                  f"expected = model(*inputs){f'[{k}]' if multi else ''}",
                  f"low = [(n.name, str(types.get(n.input[0]))) for n in typed.node if "
                  f"n.op_type == {op_type!r}]",
                  "print('eager returns', expected.dtype, '| the graph computes', low)",
                  "assert all(t == str(expected.dtype).split('.')[-1] for _, t in low), "
                  "'computed in lower precision than eager returns'"]
        stages[len(lines)] = "assert"
        stages[base + 2] = "session"
    else:
        checks = _check(sig.symptom, k if multi else None, where, subject.tol)
        if bf16:
            checks[0] = checks[0].replace("torch.from_numpy(session.run(None, feeds)",
                                          "torch.from_dlpack(session.run_with_ort_values("
                                          "None, {n: v if isinstance(v, ort.OrtValue) else "
                                          "ort.OrtValue.ortvalue_from_numpy(v) for n, v in "
                                          "feeds.items()})")
        base = len(lines)
        lines += checks
        stages[base + 1] = "run"
        stages[len(lines)] = "assert"


ORDINARY = 100.0  # what a huge finite input becomes in a shrunk repro (±1.7e38 → ±100)
HUGE = 1e4


def _shrink(value: str) -> str:
    """A huge finite value as an ordinary one of the same sign; anything else as is."""
    try:
        v = float(value)
    except ValueError:
        return value
    return repr(float(np.copysign(ORDINARY, v))) if np.isfinite(v) and abs(v) >= HUGE \
        else value


# What a shrunk repro's printed element must show to still be this defect (an input made
# ordinary may show another difference, or none).
SHOWS = {Symptom.NAN_INTRODUCED: r"\| onnxruntime: tensor\(nan", Symptom.NAN_DROPPED:
         r"^eager: tensor\(nan", Symptom.OVERFLOW_TO_INF: r"\| onnxruntime: tensor\(-?inf",
         Symptom.INF_LOST: r"^eager: tensor\(-?inf"}
PLAIN = "1.0"  # what a special input value becomes where the defect does not need it


def _notable(value: str) -> bool:
    try:
        v = float(value)
    except ValueError:
        return False
    return not np.isfinite(v) or abs(v) >= HUGE or (v == 0 and value.strip().startswith("-"))


def _fewer_notable(values: list[str]) -> list[list[str]]:
    """One-element inputs with as few notable values (NaN, ±inf, -0, huge) as may show the
    defect, fewest first: each notable value kept or made plain (a huge one ±100, a
    special 1.0); the full set is the caller's last resort. Three notable values at most
    (eight candidates), else the huge ones shrunk alone."""
    notable = [i for i, v in enumerate(values) if _notable(v)]
    if len(notable) > 3:
        shrunk = [_shrink(v) for v in values]
        return [shrunk] if shrunk != values else []
    # each notable value made plain differs from it: no candidate repeats another or the set
    return [[v if i in kept or i not in notable else _plain(v) for i, v in enumerate(values)]
            for keep in range(len(notable)) for kept in itertools.combinations(notable, keep)]


def _plain(value: str) -> str:
    """A notable value made ordinary: a huge one ±100, -0 +0, NaN or ±inf 1.0."""
    v = float(value)
    return _shrink(value) if np.isfinite(v) and v != 0 else "0.0" if v == 0 else PLAIN


def _shrunk(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind != "f" and array.dtype.name != "bfloat16":
        return array
    wide = array.astype(np.float64)
    big = np.isfinite(wide) & (np.abs(wide) >= HUGE)
    return np.where(big, np.copysign(ORDINARY, wide), wide).astype(array.dtype) \
        if big.any() else array


_SPECIAL = {"nan": 'float("nan")', "inf": 'float("inf")', "-inf": '-float("inf")'}


def _plants(subject: _Subject, arrays: dict[str, np.ndarray]) -> tuple[str, ...]:
    """Statements that put the example's special values (NaN, ±inf) into ordinary data at
    the element that differs; for an op that is not elementwise, the value the symptom
    needs (a NaN eager keeps, the inf it returns) at the output's index."""
    example = subject.case.op.example if subject.case.op is not None else None
    if example is None or not example.index:
        return ()
    data = [a.name for a in subject.variant.args if a.kind == "data" and not a.values]
    wanted = {n: v.lower() for n, v in example.inputs.items()
              if n in data and v.lower() in _SPECIAL}
    if not wanted and data:
        need = {Symptom.NAN_DROPPED: "nan", Symptom.INF_LOST: example.eager.lower()}
        wanted = {data[0]: need.get(subject.sig.symptom, "")}
    out = []
    for name, value in wanted.items():
        shape = arrays[name].shape
        index = example.index[-len(shape):] if shape else []
        if value in _SPECIAL and len(index) == len(shape) and all(
                0 <= i < d for i, d in zip(index, shape, strict=True)):
            at = ", ".join(map(str, index))
            out.append(f"inputs[{subject.variant.arg_names.index(name)}][{at}] = "
                       f"{_SPECIAL[value]}")
    return tuple(out)


def candidates(sig: Signature, case: CaseResult, variant: OpVariant,
               seed: int = 0) -> list[Repro]:
    """Scripts for the lead case, smallest in content first (fewest elements, ordinary
    values, one special value): the first that reproduces wins."""
    dtype, cls = case.key.dtype, case.key.inputs
    arrays = make_inputs(variant, dtype, cls, seed)
    grads = {a.name: a.requires_grad for a in variant.args}
    example = case.op.example if case.op is not None else None
    tolerance = variant.tolerance_for(dtype) if dtype in FLOATS else (0.0, 0.0)
    out: list[Repro] = []
    raises = sig.symptom.info.raises
    index = tuple(example.index) if example is not None else ()
    where = f"[{', '.join(map(str, index))}]" if index else ""
    subject = _Subject(sig, variant, case, tolerance)
    if example is not None and not raises and set(example.inputs) >= set(arrays) and all(
            a.shape == arrays[variant.arg_names[0]].shape and a.ndim for a in arrays.values()):
        values = [example.inputs[n] for n in variant.arg_names]
        for shrink in [*_fewer_notable(values), values]:
            script = _script(subject, [_element(v, arrays[n].dtype, grads.get(n, False))
                                       for v, n in zip(shrink, variant.arg_names, strict=True)],
                             "[0]", "one element")
            out.append(replace(script, values=dict(zip(variant.arg_names, shrink, strict=True)),
                               shows=SHOWS.get(sig.symptom, "") if shrink != values else ""))
    data = any(a.dtype.name in FLOATS for a in arrays.values()) and any(
        a.kind == "data" for a in variant.args)
    seeded = [_tensor(arrays[n], grads.get(n, False), _is_data(variant, n))
              for n in variant.arg_names]
    # Every input drawn from the seed in the sweep's range (masks, targets and integer data
    # too): an export or loading failure never depends on the values, and an ordinary-value
    # difference rarely does; each candidate is run, so one that loses the defect is dropped.
    drawn = [_tensor(arrays[n], grads.get(n, False), _drawable(variant, n, arrays[n]))
             for n in variant.arg_names]
    ordinary = cls in ("normal", "range") or EXPECTED_STAGE.get(sig.symptom) in (
        "export", "session")
    if ordinary:
        out.append(_script(subject, drawn, where, "seeded"))
    if cls in ("normal", "range") and data and seeded != drawn:
        out.append(_script(subject, seeded, where, "seeded"))
    plants = _plants(subject, arrays) if cls == "specials" and data and not raises else ()
    if plants:
        if drawn != seeded:
            out.append(_script(subject, drawn, where, "seeded", plant=plants))
        out.append(_script(subject, seeded, where, "seeded", plant=plants))
    given = [_tensor(arrays[n], grads.get(n, False), False) for n in variant.arg_names]
    small = [_tensor(_shrunk(arrays[n]), grads.get(n, False), False) for n in variant.arg_names]
    if small != given:
        out.append(_script(subject, small, where, "sweep inputs"))
    out.append(_script(subject, given, where, "sweep inputs"))
    if sig.symptom is Symptom.INVALID_MODEL:  # ONNX Runtime may load it: the checker does not
        out.append(_script(subject, given, where, "sweep inputs", checker=True))
    return out


def _low_op(case: CaseResult) -> str:
    """The ONNX op the precision audit named (`Softmax (node_3) computes in float16 ...`)."""
    low = case.op.low_precision if case.op is not None else None
    return low.nodes[0].split()[0] if low is not None and low.nodes else ""


def _drawable(variant: OpVariant, name: str, array: np.ndarray) -> bool:
    """Whether a candidate may draw this input from the seed: data, or any input without
    values the op's record fixes (a mask, a target) that is too long to read as literals."""
    fixed = any(a.name == name and a.values for a in variant.args)
    return _is_data(variant, name) or (not fixed and array.size > _LITERALS)


_LITERALS = 24  # more literals than this in one input and a repro stops being readable


def _is_data(variant: OpVariant, name: str) -> bool:
    return any(a.name == name and a.kind == "data" and not a.values for a in variant.args)


_UNSUPPORTED = re.compile(r"unsupported operator ([\w.:]+)")


def _said(case: CaseResult) -> str:
    """What the export error must say: the missing operator, or the sweep's message."""
    missing = _UNSUPPORTED.search(case.reason)
    if missing:
        return re.escape(missing.group(1).split(".")[-1])
    detail = case.reason.split(": ", 1)[-1]  # after the stage
    detail = re.sub(r"^\w+(?:Error|Exception|Node): ", "", detail)  # the class prints apart
    return re.escape(detail.split(". ")[0].strip()[:40])


def reproduced(repro: Repro, stage: str, error: str, output: str = "") -> bool:
    """Did the script fail where this defect shows (and, for a kernel gap or an export
    error, with what the sweep saw; for a shrunk input, printing the symptom's special
    value)? A name the script lacks is never the defect."""
    if stage != repro.expect or "NameError" in error:
        return False
    if repro.shows and re.search(repro.shows, output, re.M) is None:
        return False
    return not repro.needs or re.search(repro.needs, error) is not None


IGNORED = "IGNORED"  # what a probe prints when ONNX Runtime's output is eager's without it
_FORWARD = re.compile(r"^    def forward\(self, (.*)\):\n        return (.+)$", re.MULTILINE)


def without(call: str, kwarg: str) -> str | None:
    """The call with one keyword argument left out (`F.avg_pool2d(x, 2)`); None when the
    call does not pass it by name."""
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or not any(k.arg == kwarg for k in node.keywords):
        return None
    node.keywords = [k for k in node.keywords if k.arg != kwarg]
    return ast.unparse(node)


def needless_probe(repro: Repro, kwarg: str) -> Repro | None:
    """The repro with the call made without `kwarg`: where it still fails the same way, the
    argument is not part of the trigger (`celu(x, alpha=2.0)` computes float64 in float32
    without `alpha` too) and a title does not name it. None where the call lacks it."""
    forward = _FORWARD.search(repro.script)
    call = without(forward.group(2), kwarg) if forward else None
    if forward is None or call is None:
        return None
    start, end = forward.span(2)
    return replace(repro, script=repro.script[:start] + call + repro.script[end:])


_EXACT = re.compile(r"atol=0\.0, rtol=0\.0\)$", re.M)
FLOAT_PROBE_TOL = (1e-4, 1e-3)  # past float32 rounding of any one-element op by far
_INTEGER_INPUT = re.compile(r"(torch\.tensor\(\[)(-?\d+)(\], dtype=torch\.)(?:u?int\d+)\)")


def float_probe(repro: Repro) -> Repro | None:
    """The one-element repro with its integer inputs as float32 (`0` → `0.0`): where it
    still fails the same way, the defect is not the integer dtypes' (atan2(0, -3) is
    atan2(+0.0, -3.0)'s), and a title does not scope it "on integer inputs". None where
    the repro has no integer input to turn, or is not one element per input."""
    if repro.kind != "one element":
        return None
    head, sep, rest = repro.script.partition("\ninputs = (\n")
    block, end, tail = rest.partition("\n)\n")
    if not sep or not end:
        return None
    turned = _INTEGER_INPUT.sub(lambda m: f"{m.group(1)}{float(m.group(2))!r}{m.group(3)}"
                                          "float32)", block)
    if turned == block:
        return None
    # an integer's tolerance is none; float32 rounds: only a difference past rounding counts
    tail = _EXACT.sub(f"atol={FLOAT_PROBE_TOL[0]!r}, rtol={FLOAT_PROBE_TOL[1]!r})", tail)
    return replace(repro, script=f"{head}{sep}{turned}{end}{tail}")


def ignored_probe(repro: Repro, kwarg: str) -> str | None:
    """A script that prints IGNORED when ONNX Runtime returns what eager returns without
    `kwarg` (the repro already shows it differs from eager with it): what a title may
    then say ("ignores divisor_override"), measured rather than read off the values.
    None where the repro does not end in a comparison of values or the call lacks it."""
    lines = repro.script.rstrip("\n").split("\n")
    forward = _FORWARD.search(repro.script)
    call = without(forward.group(2), kwarg) if forward else None
    expected = next((ln for ln in lines if ln.startswith("expected = model(*inputs)")), "")
    if forward is None or call is None or not expected \
            or not lines[-1].startswith("torch.testing.assert_close(got, expected,"):
        return None
    return "\n".join([
        *lines[:-1], "", "",
        "class Without(torch.nn.Module):", f"    def forward(self, {forward.group(1)}):",
        f"        return {call}", "", "",
        expected.replace("expected = model(", "plain = Without().eval()("),
        lines[-1].replace("assert_close(got, expected,", "assert_close(got, plain,"),
        f"print({IGNORED!r})", ""])
