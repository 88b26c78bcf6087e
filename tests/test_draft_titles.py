"""Draft titles name the trigger and the symptom as a maintainer writes them, from what
the verified repro printed; an error that shows only on part of a call's inputs is its own
defect. Pure: no torch process (the repros these read are verified elsewhere)."""

from __future__ import annotations

from test_github_upstream import make_run, op_case

from parity_gate.github import drafts
from parity_gate.model.findings import Example
from parity_gate.model.outcomes import Outcome
from parity_gate.model.upstream import Owner, Signature, Symptom
from parity_gate.ops import causes, signatures, upstream_repro


def _sig(op: str, symptom: Symptom, dtypes: list[str], classes: list[str],
         args: list[str] | None = None, trigger: str = "") -> Signature:
    return Signature(user_op=op, overload=f"aten.{op.rsplit('.', 1)[-1]}.default",
                     symptom=symptom, owner=Owner.TRANSLATION, args=args or [],
                     dtypes=dtypes, input_classes=classes, trigger=trigger)


def test_a_dtype_defect_is_titled_with_the_dtypes_the_repro_printed() -> None:
    prod = _sig("torch.prod", Symptom.WRONG_DTYPE, ["float16", "bfloat16"], ["normal"])
    printed = drafts.as_printed(None, {"output": "eager: torch.float16 | onnxruntime: "
                                                 "torch.float32\nAssertionError"})
    assert drafts.title(prod, None, printed) == \
        "[torchlib] prod returns float32 instead of float16"
    # nothing printed: the symptom's words, never a made-up dtype
    assert drafts.title(prod, None, None) == "[torchlib] prod returns the wrong dtype"


def test_a_keyword_the_repro_fails_without_is_not_named_as_the_trigger() -> None:
    celu = _sig("torch.nn.functional.celu", Symptom.LOW_PRECISION, ["float64"], ["normal"],
                ["alpha"])
    printed = drafts.as_printed(None, {"output": "eager returns torch.float64 | the graph "
                                                 "computes [('node_Celu_1', 'float32')]"})
    assert drafts.title(celu, None, printed, needless=["alpha"]) == \
        "[torchlib] celu computes float64 in float32"
    # a keyword by its name alone is no trigger a reader can act on: no dangling "with alpha"
    assert drafts.title(celu, None, printed) == "[torchlib] celu computes float64 in float32"
    gelu = _sig("torch.nn.functional.gelu", Symptom.LOW_PRECISION, ["float64"], ["normal"],
                ["approximate='tanh'"])
    assert drafts.title(gelu, None, printed).endswith("in float32 with approximate=tanh")
    assert drafts.title(gelu, None, printed, needless=["approximate"]).endswith("float32")


def test_no_title_ends_in_a_dangling_keyword_name() -> None:
    """"with reduce", "with attn_mask": a keyword named without its value is left to the
    body; a value every call passes is the trigger ("with reduce=mean")."""
    run = make_run(
        op_case("scatter_reduce.mean", "aten.scatter_reduce.two", cls="normal",
                call="torch.scatter_reduce(x, 0, i, s, reduce='mean', include_self=False)",
                example=("1.0", "2.0")),
        op_case("sdpa.mask", "aten._scaled_dot_product_flash_attention.default",
                cls="normal", call="F.scaled_dot_product_attention(q, k, v, attn_mask=m)",
                example=("1.0", "2.0")))
    found = signatures.group(run)
    titles = [drafts.title(c.lead, c, None) for c in causes.group(found)]
    assert titles[0].endswith("with reduce=mean"), titles
    assert not any(t.endswith(("with include_self", "with attn_mask", "with reduce"))
                   for t in titles), titles


def test_a_value_title_names_the_notable_input_and_the_one_dtype() -> None:
    """A boolean is True or False; a huge finite input is quoted; a subnormal named; a
    value defect seen on one dtype names it; an ordinary input is no trigger."""
    isinf = _sig("torch.isinf", Symptom.WRONG_VALUES, ["float64"], ["specials"])
    seen = Example("o0", [0], "0", "1", {"x": "8.98846567e+307"})
    printed = drafts.as_printed(seen, {"output": "eager: tensor(False) | onnxruntime: "
                                                 "tensor(True) | float64: False"})
    (cause,) = causes.group([(isinf, [])])  # a sweep's: float64 of the dtypes swept
    assert drafts.title(isinf, cause, printed) == ("[torchlib] isinf returns True where eager "
                                                   "returns False for 8.988e+307 on float64")
    # a model run has the one dtype it ran on: not a trigger
    assert drafts.title(isinf, None, printed).endswith("for 8.988e+307")
    isclose = _sig("torch.isclose", Symptom.WRONG_VALUES, ["float32", "float64"], ["specials"])
    tiny = Example("o0", [0], "True", "False", {"x": "4.20389539e-45", "y": "0.0"})
    assert drafts.title(isclose, None, tiny) == ("[torchlib] isclose returns False where eager "
                                                 "returns True for a subnormal input")
    logsig = _sig("torch.nn.functional.logsigmoid", Symptom.OVERFLOW_TO_INF,
                  ["float32", "float16"], ["specials"])
    assert drafts.title(logsig, None, Example("o0", [0], "-100", "-inf", {"x": "-100.0"})) == \
        "[torchlib] logsigmoid returns -inf instead of -100"
    rem = _sig("torch.remainder", Symptom.NAN_INTRODUCED, ["float32", "float64"], ["specials"])
    assert drafts.title(rem, None, Example("o0", [0], "0", "nan", {"x": "0.0", "y": "inf"})) \
        == "[torchlib] remainder returns NaN instead of 0 for an inf input"


def test_an_error_seen_only_on_part_of_the_inputs_is_its_own_defect_and_says_where() -> None:
    """cross_entropy: a zero-size Reshape on every empty input and a type error on
    bfloat16 are two defects, not one "produces an invalid model"; an export error on
    every input stays one."""
    reshape = "onnxruntime load: Node () Op (Reshape) Invalid Target shape product of 0"
    typed = "onnxruntime load: Type Error: Type 'tensor(bfloat16)' of input parameter (X)"
    cases = [op_case("ce", "aten.cross_entropy_loss.default", Outcome.INVALID_MODEL, d, "empty",
                     reason=reshape) for d in ("float32", "bfloat16")]
    cases += [op_case("ce", "aten.cross_entropy_loss.default", Outcome.PASS, "float32", "normal"),
              op_case("ce", "aten.cross_entropy_loss.default", Outcome.INVALID_MODEL, "bfloat16",
                      "normal", reason=typed)]
    cases += [op_case("median", "aten.median.default", Outcome.UNSUPPORTED_OP, d, c,
                      reason="translation: unsupported operator aten.median.default")
              for d in ("float32", "int64") for c in ("normal", "empty")]
    found = signatures.group(make_run(*cases))
    got = {(s.op_name, s.trigger, tuple(s.dtypes), tuple(s.input_classes)) for s, _ in found}
    assert got == {("ce", "empty", ("float32", "bfloat16"), ("empty",)),
                   ("ce", "bfloat16", ("bfloat16",), ("normal",)),
                   ("median", "", ("float32", "int64"), ("normal", "empty"))}
    heads = sorted(drafts.title(c.lead, c) for c in causes.group(found))
    assert heads == ["[torchlib] ce produces an invalid model on an empty input",
                     "[torchlib] ce produces an invalid model on bfloat16",
                     "[torchlib] median has no translation"], heads


def test_a_shrunk_repro_keeps_only_the_notable_values_the_defect_needs() -> None:
    """logaddexp2(1.7e38, -inf) overflows without the -inf: candidates keep fewer notable
    values first (each made plain: huge ±100, NaN/inf 1.0, -0 +0), the sweep's own last."""
    got = upstream_repro._fewer_notable(["1.7e38", "-inf"])
    assert got == [["100.0", "1.0"], ["1.7e38", "1.0"], ["100.0", "-inf"]]
    assert upstream_repro._fewer_notable(["0.0", "inf"]) == [["0.0", "1.0"]]
    assert upstream_repro._fewer_notable(["0.5", "2.0"]) == []
    shrunk = upstream_repro.Repro("...", shows=upstream_repro.SHOWS[Symptom.OVERFLOW_TO_INF])
    # an input made plain that shows another difference is not this defect
    assert not upstream_repro.reproduced(shrunk, "assert", "AssertionError",
                                         "eager: tensor(3.) | onnxruntime: tensor(4.)")
    assert upstream_repro.reproduced(shrunk, "assert", "AssertionError",
                                     "eager: tensor(1.7014e+38) | onnxruntime: tensor(inf)")


def test_the_needless_probe_drops_one_keyword_from_the_call_only() -> None:
    script = ("class Model(torch.nn.Module):\n    def forward(self, x):\n"
              "        return F.celu(x, alpha=2.0)\n\n\nmodel = Model().eval()\n")
    probe = upstream_repro.needless_probe(upstream_repro.Repro(script, {7: "export"}), "alpha")
    assert probe is not None and "return F.celu(x)\n" in probe.script
    assert probe.stages == {7: "export"} and probe.script.endswith("model = Model().eval()\n")
    assert upstream_repro.needless_probe(upstream_repro.Repro(script), "beta") is None


def test_where_an_export_fails_is_read_from_its_error() -> None:
    """torch.export stopping on a data-dependent guard names its line, not a torchlib
    function; a decomposition that reaches an operator without translation names that
    operator; a torchlib function that raises while translating a decomposition is named
    with its file:line; an op without any translation says so plainly."""
    guard = op_case("gaussian_nll_loss", "aten.lt.Scalar", Outcome.EXPORT_ERROR, "float32",
                    "normal", reason="torch.export: GuardOnDataDependentSymNode: Could not "
                    "guard. Caused by: (nn/functional.py:3344 in gaussian_nll_loss)")
    capture = Signature(user_op="torch.nn.functional.gaussian_nll_loss",
                        overload="aten.lt.Scalar", symptom=Symptom.EXPORT_FAILS,
                        owner=Owner.CAPTURE)
    assert drafts._where(capture, None, guard) == (
        "`torch.export` (step 1/3 of `torch.onnx.export`), before any translation, at "
        "`nn/functional.py:3344 in gaussian_nll_loss`.")
    lgamma = op_case("multigammaln", "aten.mvlgamma.default", Outcome.UNSUPPORTED_OP,
                     reason="translation: unsupported operator prims.lgamma.default")
    mvlgamma = _sig("torch.special.multigammaln", Symptom.UNSUPPORTED, [], [])
    mvlgamma = Signature.from_dict({**mvlgamma.to_dict(), "overload": "aten.mvlgamma.default"})
    assert "`aten::mvlgamma` is decomposed before translation; its `prims::lgamma` has no " \
        "translation" in drafts._where(mvlgamma, None, lgamma)
    own = op_case("kthvalue", "aten.kthvalue.default", Outcome.UNSUPPORTED_OP,
                  reason="translation: unsupported operator aten.kthvalue.default")
    assert drafts._where(_sig("torch.kthvalue", Symptom.UNSUPPORTED, [], []), None, own) == (
        "No torchlib function is registered for `aten::kthvalue`, and torch registers no "
        "decomposition of it for export.")
    amin = op_case("aminmax", "aten.aminmax.default", Outcome.EXPORT_ERROR,
                   reason="translation: ConversionError: Error calling function 'aten_amin' "
                   "with args (x,). The function is defined at '/site-packages/onnxscript/"
                   "function_libs/torch_lib/ops/core.py:430'.")
    assert drafts._where(_sig("torch.aminmax", Symptom.EXPORT_FAILS, [], []), None, amin) == (
        "`aten_amin` in `onnxscript/function_libs/torch_lib/ops/core.py:430` raises while "
        "translating `aten::aminmax`'s decomposition (the call above, from the export error).")
