"""The op sweep's pure parts: records, inputs, isolation, graph reading, re-check, gate,
crash re-splitting and the typed op fields of a case."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from parity_gate import compare as cmp
from parity_gate.engine.stages import StageFailure
from parity_gate.hazards import precision
from parity_gate.model.findings import (
    Example,
    FindingClass,
    Lost,
    LowPrecision,
    OpCase,
    Recheck,
    RecheckVerdict,
    Rerun,
    Stage,
    Step,
)
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.ops import findings, gating, onnxgraph, repro
from parity_gate.ops.catalogue import VARIANTS
from parity_gate.ops.inputs import float_specials, make_inputs
from parity_gate.ops.isolate import isolate
from parity_gate.ops.jobs import OpBatchJob, Unit
from parity_gate.ops.judge import example, judge
from parity_gate.ops.planner import OpPlan, Selection, job_for, plan
from parity_gate.ops.recheck import recheck
from parity_gate.ops.records import ALL, Arg, OpVariant
from parity_gate.ops.registry import load_variants
from parity_gate.ops.sweep import SweepStats, _complete, _lost_by_pool, resplit

CATALOGUE = {v.id: v for v in VARIANTS}
FAMILIES = {"unary", "rounding", "predicate", "binary", "compare", "reduction", "softmax",
            "cumulative", "sort", "select", "index", "scatter", "loss", "special",
            "activation", "norm", "pool", "interp", "pad", "attention"}


# --------------------------------------------------------------------------
# catalogue and records


def test_catalogue_is_large_and_covers_every_family() -> None:
    assert len(VARIANTS) >= 350
    assert len(CATALOGUE) == len(VARIANTS), "variant ids must be unique"
    assert {v.family for v in VARIANTS} >= FAMILIES


@pytest.mark.parametrize("needle", [
    "rounding_mode='floor'", "torch.fmod", "torch.remainder", "torch.pow", "torch.atan2",
    "include_self=False", "include_self=True", "reduce='mean'", "reduce='amax'",
    "label_smoothing", "ignore_index", "weight=w", "dtype=torch.float32", "torch.isnan",
    "torch.signbit", "align_corners=True", "mode='reflect'", "mode='circular'",
    "is_causal=True", "torch.topk", "torch.argsort", "torch.cumsum", "torch.nan_to_num",
    "masked_fill", "torch.scatter_reduce", "torch.max(x, dim=-1)"])
def test_catalogue_covers_required_arguments(needle: str) -> None:
    assert any(needle in v.call for v in VARIANTS), needle


def test_attention_covers_masks_and_grad_bias() -> None:
    sdpa = [v for v in VARIANTS if v.family == "attention"]
    assert any(a.kind == "mask" and a.masked_rows for v in sdpa for a in v.args)
    assert any(a.kind == "data" and a.masked_rows for v in sdpa for a in v.args)
    assert any(a.requires_grad for v in sdpa for a in v.args)


def test_every_call_is_an_expression_over_its_args() -> None:
    for v in VARIANTS:
        compile(f"lambda {', '.join(v.arg_names)}: {v.call}", v.id, "eval")


def test_expectations_chain_and_need_a_reason() -> None:
    v = OpVariant("x", "t", "x", (Arg("x", (2,)),))
    chained = v.xfail("known", dtypes=("float16",)).skip("slow", input_classes=("empty",))
    assert [e.kind for e in chained.expectations] == ["xfail", "skip"]
    assert chained.expectation("xfail", "float16", "normal").reason == "known"
    assert chained.expectation("xfail", "float32", "normal") is None
    with pytest.raises(ValueError, match="reason"):
        v.xfail(" ")
    with pytest.raises(ValueError, match="graph input"):
        OpVariant("y", "t", "1", ())


# --------------------------------------------------------------------------
# inputs


def test_specials_meet_in_every_pair_for_binary_ops() -> None:
    atan2 = CATALOGUE["atan2"]
    arrays = make_inputs(atan2, "float32", "specials")
    specials = float_specials("float32")
    pairs = {(repr(float(a)), repr(float(b)))
             for a, b in zip(arrays["x"].ravel(), arrays["y"].ravel(), strict=True)}
    wanted = {(repr(float(np.float32(a))), repr(float(np.float32(b))))
              for a in specials for b in specials}
    assert wanted <= pairs


def test_inputs_are_deterministic_and_respect_dtype_specials() -> None:
    v = CATALOGUE["sin"]
    a = make_inputs(v, "float16", "specials")["x"]
    assert np.array_equal(a.view(np.uint16), make_inputs(v, "float16", "specials")["x"]
                          .view(np.uint16))
    assert a.dtype == np.float16
    finite = a[np.isfinite(a) & (a != 0)]
    assert np.abs(finite).min() < np.finfo(np.float16).tiny  # float16's own denormal
    b = make_inputs(v, "bfloat16", "specials")["x"]
    assert b.dtype == ml_dtypes.bfloat16 and np.isnan(b.astype(np.float32)).any()
    ints = make_inputs(v, "int8", "specials")["x"]
    assert {-128, 127, 0, -1} <= set(ints.ravel().tolist())


def test_empty_class_zeroes_the_last_dim_unless_told() -> None:
    assert make_inputs(CATALOGUE["sum.dim"], "float32", "empty")["x"].shape == (4, 0)
    loss = make_inputs(CATALOGUE["cross_entropy.mean"], "float32", "empty")
    assert loss["x"].shape == (0, 5) and loss["t"].shape == (0,)


def test_divisors_stay_nonzero_for_integers_and_unique_indices_are_unique() -> None:
    y = make_inputs(CATALOGUE["floor_divide"], "int32", "specials")["y"]
    assert (y != 0).all()
    i = make_inputs(CATALOGUE["scatter"], "float32", "normal")["i"]
    assert all(len(set(row)) == len(row) for row in i.tolist())


# --------------------------------------------------------------------------
# isolation (bisection with blame)


def _attempt(bad: dict[int, Outcome], calls: list[list[int]]):
    def attempt(group: list[int]) -> str:
        calls.append(list(group))
        broken = [i for i in group if i in bad]
        if broken:
            # like ORT, name only the first failing node
            raise StageFailure(bad[broken[0]], f"item {broken[0]}",
                               culprits=frozenset({group.index(broken[0])}))
        return "ok"
    return attempt


def test_isolate_reports_every_good_item_once_and_every_bad_item_alone() -> None:
    bad = {3: Outcome.INVALID_MODEL, 17: Outcome.NO_KERNEL}
    calls: list[list[int]] = []
    result = isolate(list(range(40)), _attempt(bad, calls))
    passed = sorted(i for group, _ in result.passed for i in group)
    assert passed == [i for i in range(40) if i not in bad]
    assert {i: f.outcome for i, f in result.failed} == bad
    assert result.attempts <= 6  # blame: one retry per bad item, not log2(n) halvings


def test_isolate_bisects_when_nothing_is_blamed() -> None:
    calls: list[list[int]] = []

    def attempt(group: list[int]) -> str:
        calls.append(group)
        if 5 in group:
            raise StageFailure(Outcome.EXPORT_ERROR, "somewhere")
        return "ok"

    result = isolate(list(range(16)), attempt)
    assert [i for i, _ in result.failed] == [5]
    assert sum(len(g) for g, _ in result.passed) == 15
    assert result.attempts <= 2 * math.ceil(math.log2(16)) + 1


def test_conclusive_failures_are_not_retried_alone() -> None:
    def attempt(group: list[int]) -> str:
        hit = [k for k, i in enumerate(group) if i in (2, 4, 6)]
        if hit:
            raise StageFailure(Outcome.UNSUPPORTED_OP, "op", culprits=frozenset(hit),
                               conclusive=True, reasons={k: f"op of {group[k]}" for k in hit})
        return "ok"

    result = isolate(list(range(8)), attempt)
    assert result.attempts == 2
    assert {i: f.reason for i, f in result.failed} == {2: "op of 2", 4: "op of 4",
                                                        6: "op of 6"}


# --------------------------------------------------------------------------
# the ONNX graph of a batch


def _softmax_batch(correct: bool) -> onnx.ModelProto:
    """Case 0: softmax(x16, dtype=float32); case 1: an unrelated sigmoid in float32."""
    if correct:
        nodes = [helper.make_node("Cast", ["c0_x"], ["c0_cast"], to=TensorProto.FLOAT,
                                  name="node_cast"),
                 helper.make_node("Softmax", ["c0_cast"], ["c0_o0"], name="node_softmax")]
    else:
        nodes = [helper.make_node("Softmax", ["c0_x"], ["c0_soft"], name="node_softmax"),
                 helper.make_node("Cast", ["c0_soft"], ["c0_o0"], to=TensorProto.FLOAT,
                                  name="node_cast")]
    nodes += [helper.make_node("Shape", ["c0_x"], ["c0_shape"], name="node_shape"),
              helper.make_node("Sigmoid", ["c1_x"], ["c1_o0"], name="node_sigmoid")]
    graph = helper.make_graph(
        nodes, "batch",
        [helper.make_tensor_value_info("c0_x", TensorProto.FLOAT16, [2, 3]),
         helper.make_tensor_value_info("c1_x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("c0_o0", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("c1_o0", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_ownership_blame_and_extraction() -> None:
    model = _softmax_batch(correct=True)
    owners = onnxgraph.Ownership.of(model, {0: ["c0_o0"], 1: ["c1_o0"]})
    assert owners.blame("Could not find an implementation for Sigmoid(13) node with name "
                        "'node_sigmoid'") == {1}
    assert owners.blame("(op_type:Softmax, node name: node_softmax): bad type") == {0}
    assert owners.blame("Required inputs (['c1_x']) are missing") == {1}
    sub = onnxgraph.extract(model, ["c1_o0"])
    assert [n.name for n in sub.graph.node] == ["node_sigmoid"]
    assert [i.name for i in sub.graph.input] == ["c1_x"]
    onnx.checker.check_model(sub, full_check=True)


def test_precision_audit_flags_a_narrow_softmax_and_only_that() -> None:
    for correct, expected in ((False, ["Softmax"]), (True, [])):
        model = _softmax_batch(correct)
        types = precision.value_types(model)
        found = precision.audit(model, types, ["c0_o0"], 32)
        assert [f.op_type for f in found] == expected
        assert not precision.audit(model, types, ["c1_o0"], 32)


# --------------------------------------------------------------------------
# judging and re-checking


def _tol(dtype: str = "float32") -> cmp.Tolerance:
    atol, rtol = CATALOGUE["sin"].tolerance_for(dtype)
    return cmp.Tolerance(atol, rtol)


def _ill_conditioned(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """logit(sigmoid(10 x)) in float32 two ways (false alarm 2) and in float64."""
    x = np.random.default_rng(seed).uniform(0.5, 1.5, 64)
    z32 = (np.float32(10) * x.astype(np.float32)).astype(np.float32)
    s_a = (np.float32(1) / (np.float32(1) + np.exp(-z32))).astype(np.float32)
    s_b = (np.exp(z32) / (np.float32(1) + np.exp(z32))).astype(np.float32)
    eager = np.log(s_a / (np.float32(1) - s_a)).astype(np.float32)
    onnx_ = np.log(s_b / (np.float32(1) - s_b)).astype(np.float32)
    z = 10 * x
    truth = np.log((1 / (1 + np.exp(-z))) / (1 - 1 / (1 + np.exp(-z))))
    return eager, onnx_, truth


def test_recheck_calls_an_ill_conditioned_mismatch_a_tolerance_artefact() -> None:
    eager, onnx_, truth = _ill_conditioned()
    assert not cmp.compare(eager, onnx_, _tol()).passed  # it does look like a finding
    checked = recheck([eager], [onnx_], [truth], [_tol()], [0])
    assert checked.verdict is RecheckVerdict.ILL_CONDITIONED
    assert checked.verdict.dismisses and checked.closer == "neither"


def test_recheck_says_which_side_is_closer_to_the_truth() -> None:
    truth = np.linspace(-2, 2, 16)
    good = truth.astype(np.float32)
    bad = good.copy()
    bad[3] += np.float32(0.5)
    confirmed = recheck([good], [bad], [truth], [_tol()], [0])
    assert confirmed.verdict is RecheckVerdict.CONFIRMED and confirmed.closer == "eager"
    quirk = recheck([bad], [good], [truth], [_tol()], [0])
    assert quirk.verdict is RecheckVerdict.EAGER_OFF and quirk.closer == "onnx"
    assert quirk.verdict.dismisses and not confirmed.verdict.dismisses  # eager's own error
    assert recheck([good], [bad], None, [_tol()], [0]).verdict is RecheckVerdict.UNVERIFIED


def test_recheck_rounds_the_truth_to_the_output_dtype() -> None:
    truth = np.array([1e39, 1.0])  # overflows float32: a correct float32 op returns inf
    eager = np.array([np.inf, 1.0], np.float32)
    onnx_ = np.array([np.float32(3.4e38), 1.0], np.float32)
    assert recheck([eager], [onnx_], [truth], [_tol()], [0]).verdict is \
        RecheckVerdict.CONFIRMED


def test_judge_compares_nondeterministic_outputs_by_shape_only() -> None:
    v = CATALOGUE["sort"]
    vals = np.array([[1.0, 1.0, 2.0]], np.float32)
    ok = judge(v, "float32", [vals, np.array([[0, 1, 2]])], [vals, np.array([[1, 0, 2]])])
    assert ok.outcome is Outcome.PASS
    wrong = judge(v, "float32", [vals, np.array([[0, 1, 2]])],
                  [vals, np.array([[0, 1, 2]], np.int32)])
    assert wrong.outcome is Outcome.DTYPE_MISMATCH


# --------------------------------------------------------------------------
# planning, gate, findings, repro


def test_planner_filters_and_batches_by_dtype() -> None:
    variants = load_variants(("parity_gate.ops.catalogue:VARIANTS",))
    sel = Selection(select=["atan2", "sum.*"], dtypes=["float16", "int32"])
    p = plan(variants, sel, batch_size=7)
    units = [u for j in p.jobs for u in j.units]
    assert {u.dtype for u in units} == {"float16", "int32"}
    assert {u.variant for u in units} == {"atan2"} | {v for v in variants
                                                      if v.startswith("sum.")}
    assert all(len({u.dtype for u in j.units}) == 1 and len(j.units) <= 7 for j in p.jobs)
    assert all(k.id == f"op/{k.module[3:]}/{k.dtype}/{k.inputs}/cpu" and k.batch_size is None
               for j in p.jobs for k in j.cases)
    assert plan(variants, Selection(families=["pad"])).total > 0


def _selected(*patterns: str) -> set[tuple[str, str, str]]:
    variants = load_variants(("parity_gate.ops.catalogue:VARIANTS",))
    p = plan(variants, Selection(select=list(patterns)))
    return {(u.variant, u.dtype, u.input_class) for j in p.jobs for u in j.units}


def test_selection_uses_the_one_case_id_glob_rule() -> None:
    atan2 = _selected("atan2")  # a variant id
    assert atan2 and {v for v, _, _ in atan2} == {"atan2"}
    assert _selected("op/atan2") == atan2  # a prefix of whole segments: everything under it
    assert _selected("op/atan2/**") == atan2  # `**` crosses `/` like `*`
    assert _selected("op/atan2/float16") == {u for u in atan2 if u[1] == "float16"}
    specials = _selected("op/atan2/**/specials/cpu")
    assert specials == {u for u in atan2 if u[2] == "specials"} and len(specials) > 1
    # a prefix of a segment is not a prefix: `op/atan` is atan only, not atan2
    assert {v for v, _, _ in _selected("op/atan")} == {"atan"}


def test_planner_turns_catalogue_skips_into_skipped_cases() -> None:
    variants = load_variants(("ops_test_variants:VARIANTS",))
    p = plan(variants, Selection(select=["t.skip", "t.xfail"]),
             sources=("ops_test_variants:VARIANTS",))
    assert [(r.id, r.outcome) for r in p.skipped] == [
        ("op/t.skip/float32/normal/cpu", Outcome.SKIPPED)]
    assert [u.variant for j in p.jobs for u in j.units] == ["t.xfail"]


def _case(variant: str, outcome: Outcome, dtype: str = "float32", cls: str = "normal",
          reason: str = "o0: boom", **fields: object) -> CaseResult:
    return CaseResult(CaseKey(f"op/{variant}", dtype, cls, None, "cpu"), outcome, reason,
                      op=OpCase(variant, "test", f"torch.{variant}(x)", f"aten.{variant}"),
                      **fields)  # type: ignore[arg-type]


def test_gate_blocks_new_findings_only(tmp_path: Path) -> None:
    variants = load_variants(("ops_test_variants:VARIANTS",))
    run = RunResult(cases=[_case("t.xfail", Outcome.UNSUPPORTED_OP),
                           _case("t.sin", Outcome.PASS),
                           _case("t.neg", Outcome.MISMATCH),
                           _case("t.cos", Outcome.NO_KERNEL, dtype="bfloat16")])
    first = gating.gate(run, gating.load_baseline(None, variants))
    assert sorted(first.blocking) == ["op/t.cos/bfloat16/normal/cpu",
                                      "op/t.neg/float32/normal/cpu"]
    path = tmp_path / "known.yml"
    text, changes = gating.updated_baseline(path, run, variants)
    path.write_text(text)
    assert {c.action for c in changes} == {"added"}
    # the generated file keeps the xfail's figures and outcome, with its human reason + link
    entry = gating.bl.parse(text, "known").entry_for("op/t.xfail/float32/normal/cpu")
    assert entry is not None and entry.outcome is Outcome.UNSUPPORTED_OP
    assert entry.reason == "xfail: no ONNX translation for prims.digamma"
    assert entry.link == "https://github.com/microsoft/onnxscript/issues/0"
    again = gating.gate(run, gating.load_baseline(path, variants))
    assert again.passed and not again.blocking
    worse = RunResult(cases=[*run.cases[:3], _case("t.cos", Outcome.CRASH, dtype="bfloat16")])
    assert gating.gate(worse, gating.load_baseline(path, variants)).blocking \
        == ["op/t.cos/bfloat16/normal/cpu"]


def test_findings_group_cases_and_repro_scripts_are_standalone(tmp_path: Path) -> None:
    run = RunResult(cases=[_case("atan2", Outcome.MISMATCH, d, c, "o0: sign flip")
                           for d in ("float32", "float16") for c in ("normal", "specials")]
                    + [_case("digamma", Outcome.UNSUPPORTED_OP, d, reason="translation: "
                             "unsupported operator prims.digamma") for d in ("float32", "float64")]
                    + [_case("sin", Outcome.PASS)])
    rows = findings.rows(run)
    assert Counter(r.outcome for r in rows) == {"mismatch": 1, "unsupported_op": 1}
    atan2 = next(r for r in rows if r.variant == "atan2")
    assert atan2.input_classes == ("specials", "normal") and atan2.dtypes == ("float32",
                                                                              "float16")
    text = findings.render(run, rows, None, "repro")
    assert "prims.digamma" in text and "`atan2`" in text
    written = repro.write_all(rows, CATALOGUE, tmp_path, {"torch": "x"})
    assert len(written) == 2
    source = written[0].read_text()
    compile(source, str(written[0]), "exec")
    assert "torch.onnx.export" in source and "inf" in source and "parity_gate" not in source


def test_all_dtypes_constant_is_the_full_set() -> None:
    assert set(ALL) == {"float32", "float64", "float16", "bfloat16", "int8", "int32", "int64",
                        "uint8", "bool"}


def test_filtered_sweep_does_not_call_other_entries_stale() -> None:
    from parity_gate.gate.baseline import Baseline, Entry
    from parity_gate.ops.gating import gate
    from parity_gate.ops.jobs import DEFAULT_SOURCES
    from parity_gate.ops.planner import case_ids
    from parity_gate.ops.registry import load_variants

    variants = load_variants(DEFAULT_SOURCES)
    universe = case_ids(variants, ["cpu"])
    assert "op/atan2/float32/specials/cpu" in universe
    other = next(i for i in sorted(universe) if not i.startswith("op/atan2/"))
    run = RunResult(cases=[CaseResult(CaseKey("op/atan2", "float32", "normal", None, "cpu"),
                                      Outcome.PASS)])
    baseline = Baseline("b.yml", (Entry(other, "known elsewhere"), Entry("op/nope/*", "gone")))
    assert [s.entry for s in gate(run, baseline, universe=universe).stale] == ["op/nope/*"]
    assert len(gate(run, baseline).stale) == 2  # without the universe: both look stale


def test_update_baseline_refuses_a_filtered_sweep(capsys) -> None:
    from parity_gate.cli import main

    assert main(["ops", "--select", "atan2", "--update-baseline"]) == 2
    assert "only on the whole catalogue" in capsys.readouterr().err


# --------------------------------------------------------------------------
# the typed op fields: what the reports read, and how they travel


def _mismatch_with_followups() -> CaseResult:
    return _case("atan2", Outcome.MISMATCH, reason="o0: values differ",
                 recheck=Recheck(RecheckVerdict.CONFIRMED, "eager", eager_error=0.0,
                                 onnx_error=math.inf,
                                 unoptimized=Rerun("disabled", Outcome.PASS, max_abs=0.0)))


def test_findings_read_the_typed_example_recheck_and_structure() -> None:
    case = _mismatch_with_followups()
    assert case.op is not None
    case.op.example = Example("o0", [1, 2], "-0.0", "0.0", {"x": "-0.0", "y": "1"})
    case.op.low_precision = LowPrecision(["Atan (node_atan) computes in float16 although "
                                          "eager returns float32"])
    [row] = findings.rows(RunResult(cases=[case]))
    assert row.example == "x=-0.0, y=1 → eager -0.0 vs onnx 0.0" == case.op.example.describe()
    assert row.recheck == ("confirmed; vanishes with ORT optimizations off; "
                           "graph computes in lower precision")
    # the reason stays the reason; the audit's node is part of the effect, not of the reason
    assert case.reason == "o0: values differ"
    assert row.effect == "o0: values differ | dtype handling (graph, optimizer off): Atan " \
        "(node_atan) computes in float16 although eager returns float32"
    assert (row.op, row.family, row.input_classes) == ("aten.atan2", "test", ("normal",))
    assert "re-check: confirmed" in case.explanation  # what a failure message shows


def test_a_wrong_graph_hidden_by_the_provider_leads_its_effect() -> None:
    node = "Softmax (node_Softmax_0) computes in float16 although eager returns float32"
    case = _case("softmax", Outcome.DTYPE_MISMATCH, "float16",
                 reason="the graph computes in lower precision than eager returns; "
                 "values match on cpu, which hides the wrong graph")
    assert case.op is not None
    case.op.low_precision = LowPrecision([node], hidden_by_provider="cpu")
    [row] = findings.rows(RunResult(cases=[case]))
    assert row.effect.startswith(f"dtype handling (graph, optimizer off): {node} | the "
                                 "graph computes")
    assert row.recheck == "graph computes in lower precision"
    assert case.explanation.endswith(node)  # the record's own note, after the reason


def test_an_op_case_round_trips_through_its_json_form() -> None:
    case = _mismatch_with_followups()
    assert case.op is not None
    case.op.example = Example("o0", [0], "nan", "1.0")
    data = case.to_dict()
    assert data["recheck"]["onnx_error"] == "inf"  # the one non-finite encoding
    assert data["recheck"]["unoptimized"]["level"] == "disabled"
    assert "meta" not in data and data["key"]["batch_size"] is None
    back = CaseResult.from_dict(data)
    assert back.op == case.op and back.recheck == case.recheck and back.key == case.key
    assert back.recheck is not None and back.recheck.unoptimized is not None
    assert back.recheck.unoptimized.vanishes and math.isinf(back.recheck.onnx_error or 0)


def test_example_names_the_worst_element_and_the_inputs_there() -> None:
    eager = np.array([1.0, 2.0, 3.0], np.float32)
    got = np.array([1.0, 2.5, 3.0], np.float32)
    worst = cmp.compare(eager, got, _tol(), name="o0")
    ex = example(worst, eager, got, {"x": np.array([0.5, -0.0, 7.0], np.float32),
                                     "w": np.zeros((2,), np.float32)})
    assert ex == Example("o0", [1], "2", "2.5", {"x": "-0.0"})  # w has another shape
    assert example(worst, eager, got[:2], {}) is None


# --------------------------------------------------------------------------
# crash re-splitting reads the typed step, not text


def _units(*names: str) -> list[Unit]:
    return [Unit(n, "float32", "normal") for n in names]


def _lost(job: OpBatchJob, step: Step, outcome: Outcome = Outcome.CRASH) -> list[CaseResult]:
    # the reason is free text and must not matter: it claims another unit on purpose
    return [CaseResult(k, outcome, "worker killed by SIGSEGV while eager t.neg/float32/normal",
                       lost=Lost(step, signal="SIGSEGV")) for k in job.cases]


def test_resplit_runs_the_unit_named_by_the_eager_step_alone() -> None:
    sel = Selection()
    job = job_for("b", _units("t.sin", "t.cos", "t.tanh", "t.neg"), sel, ("x:V",), 3)
    lost = _lost(job, Step(Stage.EAGER, "t.tanh/float32/normal"))
    assert all(_lost_by_pool(r) for r in lost)
    alone, rest = resplit(job, lost, sel)
    assert (alone.name, alone.units) == ("b/alone", _units("t.tanh"))
    assert (rest.name, rest.units) == ("b/rest", _units("t.sin", "t.cos", "t.neg"))
    assert alone.generation == rest.generation == 1 and alone.seed == 3
    assert alone.sources == ("x:V",)


def test_resplit_halves_when_the_step_names_no_unit() -> None:
    sel = Selection()
    job = job_for("b", _units("t.sin", "t.cos", "t.tanh", "t.neg"), sel, ("x:V",), 0)
    for step in (Step(Stage.EXPORTING, "4 cases"), Step(Stage.RUNNING, "4 cases", "on cpu"),
                 Step(Stage.EAGER, "t.gone/float32/normal")):  # a unit not in the batch
        a, b = resplit(job, _lost(job, step), sel)
        assert (a.units, b.units) == (_units("t.sin", "t.cos"), _units("t.tanh", "t.neg"))
    # only the units the worker never reported go back
    [alone] = resplit(job, _lost(job, Step(Stage.EXPORTING))[2:3], sel)
    assert alone.units == _units("t.tanh")


def test_a_worker_that_never_started_is_not_split_and_worker_results_are_kept() -> None:
    job = job_for("b", _units("t.sin", "t.cos"), Selection(), ("x:V",), 0)
    never = _lost(job, Step(Stage.STARTING, detail="(import failed: ImportError)"))
    assert never[0].lost is not None and never[0].lost.never_started
    assert not any(_lost_by_pool(r) for r in never)
    # a crash the worker reported itself (internal error) is a result, not a lost batch
    own = CaseResult(job.cases[0], Outcome.CRASH, "internal error")
    assert not _lost_by_pool(own)


def test_complete_fills_the_op_fields_of_results_no_worker_reported() -> None:
    variants = load_variants(("ops_test_variants:VARIANTS",))
    op_plan = OpPlan([], [], variants)
    stats = SweepStats()
    key = Unit("t.sin", "float32", "normal").key("cpu")
    seen = CaseResult(key, Outcome.PASS, op=OpCase("t.sin", "test", "torch.sin(x)",
                                                   "aten.sin.default", ["aten.sin.default"]))
    assert _complete(seen, op_plan, stats).op == seen.op  # a worker's own fields stay
    other = Unit("t.sin", "float32", "empty").key("cpu")
    crash = _complete(CaseResult(other, Outcome.CRASH, "\x1b[31mkilled\x1b[0m",
                                 lost=Lost(Step(Stage.EXPORTING))), op_plan, stats)
    assert crash.reason == "killed"
    assert crash.op == OpCase("t.sin", "test", "torch.sin(x)", "aten.sin.default",
                              user_op="torch.sin", finding_class=FindingClass.EXPORTER)
    assert crash.op.aten_ops == []  # none seen: no worker reported this case
    # a worker killed while running eager (SIGFPE on int_min // -1) is an eager finding
    eager = _complete(CaseResult(Unit("t.sin", "float32", "specials").key("cpu"), Outcome.CRASH,
                                 "worker killed by SIGFPE while eager t.sin/float32/specials",
                                 lost=Lost(Step(Stage.EAGER), signal="SIGFPE")), op_plan, stats)
    assert eager.op is not None and eager.op.finding_class is FindingClass.EAGER
    unseen = _complete(CaseResult(Unit("t.cos", "float32", "normal").key("cpu"),
                                  Outcome.TIMEOUT, "timeout"), op_plan, stats)
    assert unseen.op is not None and unseen.op.op == "aten.t"  # the static guess


def _shard_files(folder: Path, failing: dict[str, Outcome], drop: str | None = None
                 ) -> list[str]:
    """The results.json of a two-shard catalogue sweep: every planned case passes except
    `failing` (case id → outcome); `drop` leaves one case out."""
    import json

    from parity_gate.ops.accepted import accepted
    from parity_gate.ops.command import load_sources
    from parity_gate.ops.jobs import DEFAULT_SOURCES
    from parity_gate.ops.planner import case_ids

    variants, eager = load_sources(DEFAULT_SOURCES, accepted)
    ids = sorted(case_ids(variants, ["cpu"], eager) - {drop})
    files = []
    for k in (1, 2):
        cases = []
        for i in ids[k - 1::2]:
            module, dtype, cls, provider = i.rsplit("/", 3)
            cases.append(CaseResult(CaseKey(module, dtype, cls, None, provider),
                                    failing.get(i, Outcome.PASS), "o0: boom"))
        run = RunResult(cases=cases, manifest={"command": "ops"}, shard=f"{k}/2",
                        planned=len(cases), versions={"torch": "t", "onnxscript": "s"})
        folder.mkdir(exist_ok=True)
        path = folder / f"s{k}.json"
        path.write_text(json.dumps(run.to_dict()))
        files.append(str(path))
    return files


def test_from_shard_results_updates_and_gates_the_baseline(tmp_path: Path, capsys) -> None:
    """A CI shard matrix is updated and gated from its merged results, without re-running;
    an update refuses results that lack a planned case or miss a shard, and keeps the
    entries of a source the results do not hold."""
    from parity_gate.cli import main

    bad, worse = "op/atan2/float32/specials/cpu", "op/sin/float16/normal/cpu"
    known = tmp_path / "known.yml"
    known.write_text("version: 1\nknown_failures:\n- id: op/oi.atan2.0/*\n  reason: r\n")
    files = _shard_files(tmp_path / "one", {bad: Outcome.MISMATCH})
    out = ["--baseline", str(known), "--out", str(tmp_path / "out"), "--quiet"]
    assert main(["ops", "--from", *files, "--update-baseline", *out]) == 0
    kept = known.read_text()  # the OpInfo entry is not swept here: kept as it was, first
    assert kept.index("- id: op/oi.atan2.0/*") < kept.index("- id: op/atan2/float32/")
    capsys.readouterr()
    known.write_text("version: 1\nknown_failures: []\n")
    gap = _shard_files(tmp_path / "gap", {}, drop=bad)
    assert main(["ops", "--from", *gap, "--update-baseline", *out]) == 2
    assert f"lack 1 planned case(s) of the catalogue source(s), e.g. {bad}" \
        in capsys.readouterr().err
    assert main(["ops", "--from", *files, "--update-baseline", *out]) == 0
    assert "- id: op/atan2/float32/specials/cpu" in known.read_text()
    capsys.readouterr()
    with known.open("a") as f:  # an OpInfo finding: not swept here, so not stale either
        f.write("- id: op/oi.atan2.0/*\n  reason: r\n")
    assert main(["ops", "--from", *files, *out]) == 0  # known
    err = capsys.readouterr().err
    assert "0 regressions" in err and "1 known, 0 stale" in err
    again = _shard_files(tmp_path / "worse", {bad: Outcome.MISMATCH, worse: Outcome.MISMATCH})
    blocked = tmp_path / "blocked"  # a file where the repro folder goes: reports still written
    blocked.mkdir()
    (blocked / "repro").write_text("not a folder")
    assert main(["ops", "--from", *again, "--baseline", str(known), "--out", str(blocked)]) == 1
    err = capsys.readouterr().err
    assert f"regression {worse}" in err and "repro scripts not written: " in err
    assert {"results.json", "junit.xml", "findings.md"} <= {p.name for p in blocked.iterdir()}
    assert main(["ops", "--from", *files, "--select", "sin", *out]) == 2


def test_update_groups_an_opinfo_whose_samples_fail_alike_under_one_glob(tmp_path: Path
                                                                         ) -> None:
    """An op whose every sample fails alike is one entry; a glob that would also match a
    case failing otherwise (or passing) is narrowed until it owns exactly its group."""
    def oi(name: str, n: int, outcome: Outcome, dtype: str = "float32") -> CaseResult:
        return _case(f"oi.{name}.{n}", outcome, dtype)

    cases = [*(oi("svd", n, Outcome.UNSUPPORTED_OP, d) for n in range(3)
               for d in ("float32", "float64")),
             *(oi("cat", n, Outcome.INVALID_MODEL) for n in range(3)),
             oi("cat", 3, Outcome.PASS), oi("cat", 0, Outcome.PASS, "float64"),
             oi("cat", 1, Outcome.PASS, "float64"),
             oi("svd.full", 0, Outcome.PASS)]  # `svd.[0-9]*` must not swallow this one
    run = RunResult(cases=cases)
    text, _ = gating.updated_baseline(tmp_path / "k.yml", run, {})
    ids = [e.id for e in gating.bl.parse(text, "k").entries]
    # cat: samples 0-2 fail on float32 but 3 passes there, and float64 passes: one by one
    assert ids == ["op/oi.svd.[0-9]*/*", *(f"op/oi.cat.{n}/float32/normal/cpu"
                                           for n in range(3))], ids
    again = gating.gate(run, gating.bl.parse(text, "k"))
    assert again.passed and not again.stale
    assert {r.category for r in again.rulings} == {"known"}
    new_sample = RunResult(cases=[*cases, oi("svd", 9, Outcome.CRASH)])
    assert gating.gate(new_sample, gating.bl.parse(text, "k")).blocking \
        == ["op/oi.svd.9/float32/normal/cpu"]  # a worse outcome than recorded



def test_an_error_raised_while_decomposing_is_pinned_on_its_case() -> None:
    """Real export: bucketize's data-dependent guard and diagonal_scatter's non-functional
    decomposition fail inside torch.onnx.export's decomposition, where no frame of the
    case is on the stack; the node the error names still says whose it is (else every
    such failure costs a big batch log2(n) halvings)."""
    import torch

    from parity_gate.ops.export import export_batch

    def fail_of(fns: list, tensors: list[list]) -> StageFailure:
        with pytest.raises(StageFailure) as info:
            export_batch(fns, tensors, [f"c{k}_a{i}" for k, ts in enumerate(tensors)
                                        for i in range(len(ts))],
                         [f"c{k}_o0" for k in range(len(fns))], list(range(len(fns))))
        return info.value

    ok = (lambda a: torch.abs(a), [torch.linspace(-1, 1, 12).reshape(3, 4)])
    guard = (lambda a, b: torch.bucketize(a, b, right=True),  # a 0-d input: OpInfo's sample
             [torch.tensor(0.25), torch.tensor([-0.5, 0.0, 0.5])])
    mutating = (lambda a, b: torch.diagonal_scatter(a, b, 2),
                [torch.zeros(5, 5), torch.ones(3)])
    for bad in (guard, mutating):
        cases = [ok, ok, bad, ok]
        failure = fail_of([f for f, _ in cases], [t for _, t in cases])
        assert failure.reason.startswith("translation:"), failure.reason
        assert failure.culprits == {2}, failure.reason
