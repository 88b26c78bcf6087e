"""Issue 49: each defect is searched in its owner's words and deduplicated by its trigger on
its function, against the local GitHub server seeded with upstream titles as their
repositories write them; a model run's draft carries a repro that stands alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from github_server import FakeGitHub, Item
from test_github_upstream import client, make_run, op_case

from parity_gate.github import drafts, run_drafts, upstream, upstream_pass
from parity_gate.model.findings import ByDefinition, Recheck, RecheckVerdict
from parity_gate.model.keys import CaseKey
from parity_gate.model.localisation import Culprit, Localisation
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ExportCause, ExportStage
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.upstream import MatchKind, Owner, Symptom
from parity_gate.ops import causes, localised, signatures

ORT, ONNXSCRIPT, PYTORCH = "microsoft/onnxruntime", "microsoft/onnxscript", "pytorch/pytorch"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server
        assert server.errors == [], server.errors


def kernel_case(variant: str, aten: str, *, call: str, example: tuple[str, str] = ("nan", "3.0"),
                oracle: str = "ONNX's reference evaluator") -> CaseResult:
    """A sweep case whose graph ONNX's definition runs to eager's answer: ORT's kernel."""
    case = op_case(variant, aten, call=call, example=example)
    definition = ByDefinition(oracle, with_eager=True, with_ort=False, owner=Owner.KERNEL)
    return CaseResult.from_dict({**case.to_dict(), "recheck": Recheck(
        RecheckVerdict.CONFIRMED, "eager", definition=definition).to_dict()})


def searched(run: RunResult, gh: FakeGitHub) -> dict[str, object]:
    got, warnings = upstream_pass.attach(run, client(gh), upstream.UpstreamOptions(
        mode="search"))
    assert warnings == []
    return {r.signature.op_name: r for r in got.upstream if r.signature is not None}


def test_a_kernel_defect_is_searched_and_known_by_its_onnx_op(gh: FakeGitHub) -> None:
    """ReduceMax, not `amax (nan OR fix ...)`: the open ONNX Runtime report that names the
    ONNX op and NaN is found and suppresses the draft; MaxPool's 1d/2d/3d are one cause."""
    gh.items += [Item(ORT, 20001, "ReduceMax ignores NaN on CPU",
                      body="The CPUExecutionProvider ReduceMax kernel returns 3 for [nan, 3]; "
                      "numpy gives nan.")]
    run = make_run(
        kernel_case("amax", "aten.amax.default", call="torch.amax(x, dim=0)"),
        *(kernel_case(f"max_pool{d}d", f"aten.max_pool{d}d.default",
                      call=f"F.max_pool{d}d(x, 2)", oracle="the definition of MaxPool")
          for d in (1, 2, 3)))
    found = signatures.group(run)
    assert {s.kernel for s, _ in found} == {"ReduceMax", "MaxPool"}
    grouped = causes.group(found)
    assert sorted(c.function for c in grouped) == ["MaxPool", "ReduceMax"]  # one per kernel
    queries = {c.function: upstream.cause_queries(c)[0][2] for c in grouped}
    assert queries["ReduceMax"] == ("repo:microsoft/onnxruntime repo:microsoft/onnxscript "
                                    "(ReduceMax OR amax) (nan OR fix OR implement OR add)")
    by_op = searched(run, gh)
    amax = by_op["amax"]
    assert amax.match is not None and amax.match.number == 20001  # type: ignore[attr-defined]
    assert amax.describe() == "reported in onnxruntime#20001 (open issue)"  # type: ignore[attr-defined]
    cause = next(c for c in grouped if c.function == "MaxPool")
    assert drafts.title(cause.lead, cause, None).startswith(
        "CPUExecutionProvider: MaxPool returns a number where eager returns NaN")


def test_dedupe_reads_the_trigger_on_the_function_not_shared_words(gh: FakeGitHub) -> None:
    gh.items += [
        # signbit: a bfloat16 NaN report is another trigger, never the -0.0 defect
        Item(ONNXSCRIPT, 3001, "[torchlib] signbit returns wrong values for bfloat16 NaN",
             body="torch.signbit(-0.0) is right on float32, but bfloat16 nan gives a "
             "different answer after export"),
        # scatter_reduce(mean): a report need not repeat include_self, which every call passes
        Item(ONNXSCRIPT, 3002, "[torchlib] scatter_reduce with reduce='mean' returns wrong "
             "values", body="torch.scatter_reduce(x, 0, i, s, reduce='mean') is incorrect: "
             "ScatterElements has no mean, the count is wrong"),
        # any: no symptom word in the query; "returns True" is a wrong value said plainly
        Item(PYTORCH, 3003, "[ONNX] aten::any returns True for an empty tensor",
             labels=["module: onnx"], state="closed",
             body="torch.any(x) with x of size 0 gives a wrong result after export"),
    ]
    run = make_run(
        op_case("signbit", "aten.signbit.default", example=("True", "False"),
                call="torch.signbit(x)"),
        op_case("scatter_reduce.mean", "aten.scatter_reduce.two", cls="normal",
                example=("1.5", "3.0"),
                call="torch.scatter_reduce(x, 0, i, s, reduce='mean', include_self=True)"),
        op_case("any", "aten.any.default", cls="empty", example=("False", "True"),
                call="torch.any(x)"))
    run.cases[0].op.example.inputs["x"] = "-0.0"  # type: ignore[union-attr]
    by_op = searched(run, gh)
    signbit = by_op["signbit"]
    assert signbit.match is None  # type: ignore[attr-defined]
    related = {m.number: m for m in signbit.related}  # type: ignore[attr-defined]
    assert any("another trigger" in w for w in related[3001].why), related[3001].why
    assert by_op["scatter_reduce"].match.number == 3002  # type: ignore[attr-defined]
    any_ = by_op["any"]
    assert any_.match is not None and any_.match.kind is MatchKind.CLOSED_ISSUE  # type: ignore[attr-defined]
    queries = [e.query["q"][0] for e in gh.calls("search")]
    # the trigger (an empty input, -0.0) or a change, never a required symptom word
    assert any("(any OR aten_any) (empty OR zero-size" in q for q in queries), queries
    assert any('"negative zero"' in q for q in queries), queries
    assert not any(w in q for q in queries for w in ("wrong", "different", "incorrect"))


def test_a_merged_change_that_fixes_nothing_is_listed_as_likely_introducing_it(
        gh: FakeGitHub) -> None:
    gh.items += [Item(ONNXSCRIPT, 4001, "[torchlib] Rewrite aten_atan2 with Where for NaN",
                      pr=True, state="closed", merged=True,
                      body="aten_atan2 now selects with Where; nan inputs take the new path")]
    by_op = searched(make_run(op_case("atan2", "aten.atan2.default", example=("nan", "0.0"),
                                      call="torch.atan2(x, y)")), gh)
    atan2 = by_op["atan2"]
    assert atan2.match is None  # type: ignore[attr-defined]
    why = " ".join(atan2.related[0].why)  # type: ignore[attr-defined]
    assert "likely introduced by" in why


def model_case(module: str, stage: ExportStage, *, op: str = "", where: str = "",
               kind: str = "RuntimeError", message: str = "",
               outcome: Outcome = Outcome.EXPORT_ERROR) -> CaseResult:
    return CaseResult(CaseKey(module, "float32", "default", 1, "cpu"), outcome,
                      reason=f"{kind}: {message}",
                      cause=ExportCause(kind, message, stage, op, where))


def test_export_errors_are_searched_and_routed_by_the_step_they_stopped_in(
        gh: FakeGitHub) -> None:
    gh.items += [Item(ONNXSCRIPT, 5001, "[torchlib] aten_index_put fails: Cannot broadcast "
                      "index shapes", body="Translating aten::index_put raises 'Cannot "
                      "broadcast index shapes' for a bool mask (export error).")]
    run = make_run(
        model_case("own_branch", ExportStage.CAPTURE, where="models.py:12: if x.sum() > 0:",
                   kind="GuardOnDataDependentSymNode", message="Could not guard on "
                   "data-dependent expression u0 > 0"),
        model_case("decomp", ExportStage.DECOMPOSE, op="aten.unfold.default",
                   message="Cannot view a tensor with shape [2, 3] and strides [3, 1]"),
        model_case("translate", ExportStage.TRANSLATE, op="aten.index_put.default",
                   message="Cannot broadcast index shapes (3,) and (2,)"))
    found = localised.group(run)
    owners = {cs[0].key.module: s.owner for s, cs in found}
    assert owners == {"decomp": Owner.CAPTURE, "translate": Owner.TRANSLATION}  # model's: never
    assert localised.export_owner(run.cases[0]) is Owner.MODEL
    got, _ = upstream_pass.attach(run, client(gh), upstream.UpstreamOptions(mode="draft"))
    status = {r.cases[0]: r for r in got.upstream}
    assert set(status) == {"decomp/float32/default/b1/cpu", "translate/float32/default/b1/cpu"} \
        or len(status) == 2
    by_module = {r.cases[0].split("/")[0]: r for r in got.upstream}
    assert by_module["translate"].describe() == "reported in onnxscript#5001 (open issue)"
    decomp = by_module["decomp"]
    assert decomp.searched and decomp.match is None and decomp.not_drafted
    queries = [e.query["q"][0] for e in gh.calls("search")]
    assert any(q.startswith("repo:pytorch/pytorch ") and "unfold" in q for q in queries), queries
    assert not any("guard" in q.lower() for q in queries)  # the model's own line: not searched
    assert all(s.symptom is Symptom.EXPORT_FAILS for s, _ in found)


def test_an_optimizer_level_defect_is_named_ort_s_optimizer_not_a_kernel() -> None:
    culprit = Culprit(scope="(root)", kind="M", aten="aten.floor_divide.default",
                      call="aten.floor_divide.default(%x, %y)", code="x // y",
                      onnx_nodes=["Mul", "Floor"], owner=Owner.KERNEL,
                      owned_by="Mul on CPUExecutionProvider")
    case = CaseResult(CaseKey("m", "float16", "default", 1, "cpu"), Outcome.MISMATCH,
                      localisation=Localisation(first_level="basic", culprit=culprit))
    sig = localised.signature_of(case, culprit)
    assert sig is not None and sig.kernel == "graph optimizer at ORT_ENABLE_BASIC: Mul"
    assert upstream.kernel_op(sig) == ""
    plain = localised.signature_of(
        CaseResult(CaseKey("m", "float16", "default", 1, "cpu"), Outcome.MISMATCH,
                   localisation=Localisation(first_level="disabled", culprit=culprit)), culprit)
    assert plain is not None and plain.kernel == "Mul"


def _cut(folder: Path, expected: np.ndarray) -> Path:
    """A node repro folder as localisation writes it: a Div cut out of a model (its tensor
    names the model's own), the values it saw and eager's answer."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Div", ["l__self___scale_w", "b_private_denominator"],
                            ["div_out_secret"], name="node_Div_7")
    graph = helper.make_graph(
        [node], "main_graph",
        [helper.make_tensor_value_info("l__self___scale_w", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("b_private_denominator", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("div_out_secret", TensorProto.FLOAT, [2])])
    folder.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]),
              str(folder / "model.onnx"))
    np.savez(folder / "inputs.npz", l__self___scale_w=np.array([1.0, -0.0], np.float32),
             b_private_denominator=np.array([3.0, 2.0], np.float32))
    np.savez(folder / "expected.npz", div_out_secret=expected)
    return folder


@pytest.mark.process
def test_a_model_run_repro_stands_alone_built_inline_and_fails_where_the_defect_shows(
        tmp_path: Path) -> None:
    """The culprit's nodes written out with onnx.helper, their inputs inline (deterministic,
    -0.0 kept), no name from the model, no file read; it fails its assertion only where
    ONNX Runtime differs from what eager returned."""
    wrong = run_drafts.standalone(_cut(tmp_path / "a", np.array([1.0, 0.0], np.float32)))
    assert wrong is not None and len(wrong.splitlines()) <= 30
    assert "helper.make_node('Div', ['x0', 'x1'], ['y'])" in wrong and "-0.0" in wrong
    assert not any(w in wrong for w in ("l__self", "private", "secret", "node_Div", "np.load",
                                        "open(", "parity"))
    shows, printed = run_drafts._verified(wrong)  # eager said 1 where ORT gives 0.3333
    assert shows and "expected: 1.0 | onnxruntime: 0.33333334" in printed
    right = run_drafts.standalone(_cut(tmp_path / "b", np.array([1 / 3, -0.0], np.float32)))
    assert right is not None and run_drafts._verified(right)[0] is False
    # an optimizer's defect runs at its level beside the run with optimizations off
    level = run_drafts.standalone(tmp_path / "a", "ORT_ENABLE_BASIC")
    assert level is not None and "ORT_DISABLE_ALL" in level and "ORT_ENABLE_BASIC" in level
    assert run_drafts._verified(level)[0]
    assert run_drafts.stable(run_drafts.printed_alone(printed)) is None  # 0.3333: not a title's
    assert run_drafts.stable(run_drafts.printed_alone("expected: 0.0 | onnxruntime: nan"))


# Open ONNX Runtime reports as that repository titles them, one per kernel defect of the
# bundled sweep: each names the ONNX op and says the trigger in its own words.
ORT_REPORTS = [
    Item(ORT, 21001, "Resize with mode='cubic' fails on uint8 input",
         body="Bicubic upsampling of a uint8 image: [ONNXRuntimeError] : 1 : FAIL : Non-zero "
         "status code returned while running Resize node."),
    Item(ORT, 21002, "Pad with mode='circular' fails on an empty input",
         body="[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running "
         "Pad node: a zero-size input with circular padding."),
    Item(ORT, 21003, "Div node crashes the process for int64 division by zero",
         body="floor_divide exported to a Div node with int64 inputs and a zero divisor: "
         "Floating point exception (SIGFPE), core dumped."),
    Item(ORT, 21004, "ScatterND fails on float16 and bfloat16",
         body="[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running "
         "ScatterND node (index_put)."),
    Item(ORT, 21005, "MaxPool does not propagate NaN",
         body="MaxPool on CPU returns the max of the other values of a window that holds a "
         "NaN."),
    Item(ORT, 21006, "ReduceL2 gives a wrong result for rows holding inf",
         body="ReduceL2 over a row with an inf value is different from numpy's norm on CPU."),
    Item(ORT, 21007, "Pow ignores NaN in the base",
         body="Pow(x, 2.5) with x = nan returns 0 on CPU; numpy gives nan."),
    Item(ORT, 21008, "ScatterElements with reduction fails on float16, bfloat16 and bool",
         body="[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running "
         "ScatterElements node (scatter_add)."),
    Item(ORT, 21009, "ReduceSum returns wrong values for int64 inputs near the maximum",
         body="ReduceSum of int64 values near iinfo(int64).max is incorrect on CPU."),
]


@pytest.fixture(scope="module")
def bundled() -> RunResult:
    import gzip
    import json

    path = Path(__file__).parent / "data" / "upstream" / "bundled-findings.json.gz"
    return RunResult.from_dict(json.loads(gzip.decompress(path.read_bytes())))


def test_closing_note_no_kernel_defect_is_refiled_and_one_draft_per_cause(
        gh: FakeGitHub, bundled: RunResult, tmp_path: Path) -> None:
    """The bundled sweep against a server holding an open report per kernel defect: every
    kernel cause is known (none drafted again), and the drafts are one per cause."""
    gh.items += ORT_REPORTS
    got, warnings = upstream_pass.attach(bundled, client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "d", verify=False))
    assert warnings == []
    grouped = causes.group(signatures.group(bundled))
    kernels = [c for c in grouped if c.owner is Owner.KERNEL and not c.listing]
    cause_of = causes.of(grouped)
    known = {cause_of[r.signature.key].key: r.match.number for r in got.upstream
             if r.signature is not None and r.match is not None}
    assert {c.function: known.get(c.key) for c in kernels} == {
        "Resize": 21001, "Pad": 21002, "Div": 21003, "ScatterND": 21004, "MaxPool": 21005,
        "ReduceL2": 21006, "Pow": 21007, "ScatterElements": 21008, "ReduceSum": 21009}
    drafted = sorted((tmp_path / "d").iterdir())
    heads = [f.read_text(encoding="utf-8").splitlines()[1] for f in drafted]
    assert not any(h.startswith("# CPUExecutionProvider:") for h in heads), heads
    assert len(drafted) / len({c.key for c in grouped if c.key not in known}) <= 1.2
    assert len(drafted) == len(grouped) - len(kernels)
