"""The hazard rule table, its manifest settings and the runtime table (pure: no export)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from parity_gate.hazards import checks
from parity_gate.hazards.branches import ProbeSite, Side, probe_sites, verdict
from parity_gate.hazards.config import HazardSettings, merge
from parity_gate.hazards.rules import BY_ID, RULES, Rule
from parity_gate.hazards.run import merge as merge_hazards
from parity_gate.hazards.runtimes import RELEASES, parse_target
from parity_gate.model.hazards import Action, Hazard, Severity, Site

PAIRS_FILE = Path(__file__).parent / "data" / "hazards" / "pairs.py"


def _pair_names() -> set[str]:
    """Names defined in the pairs file, read without importing torch (pure lane)."""
    import ast

    tree = ast.parse(PAIRS_FILE.read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "PAIRS":
            assert isinstance(node.value, ast.Dict)
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    raise AssertionError("PAIRS not found")


def test_every_rule_is_complete_and_unique() -> None:
    assert len(BY_ID) == len(RULES)
    pairs = _pair_names()
    for rule in RULES:
        assert rule.id == rule.id.lower() and " " not in rule.id
        assert rule.fix.strip() and rule.title.strip()
        for name in (rule.check, rule.on_failure):
            assert not name or callable(getattr(checks, name, None)), (rule.id, name)
        trigger, fixed = rule.pair
        assert trigger in pairs and fixed in pairs, rule.id


def test_the_issue_rules_are_all_in_the_table() -> None:
    assert set(BY_ID) >= {
        "training-mode", "baked-dim", "python-control-flow", "in-place",
        "constants-in-forward", "opset-too-new", "precision-cast", "unsupported-op",
        "exporter-warnings", "eager-mismatch-by-design", "dynamic-dim-specialised"}


def test_a_rule_without_check_or_pair_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a check"):
        Rule("x", "t", Severity.INFO, Action.WARN, "fix", pair=("A", "B"))
    with pytest.raises(ValueError, match="test pair"):
        Rule("x", "t", Severity.INFO, Action.WARN, "fix", check="training_mode")


def test_settings_short_and_long_forms_and_defaults() -> None:
    s = HazardSettings.model_validate({
        "baked-dim": "fail",
        "constants-in-forward": {"action": "off", "reason": "tiny normalisation constants"},
        "in-place": {"action": False, "reason": "YAML reads a bare off as false"},
    })
    assert s.resolve("baked-dim") == (Action.FAIL, "")
    assert s.resolve("constants-in-forward") == (Action.OFF, "tiny normalisation constants")
    assert s.resolve("in-place")[0] is Action.OFF
    assert s.resolve("opset-too-new") == (BY_ID["opset-too-new"].action, "")


@pytest.mark.parametrize(("value", "message"), [
    ({"baked-dims": "fail"}, "did you mean 'baked-dim'"),
    ({"in-place": "off"}, "off needs a reason"),
    ({"in-place": False}, "off needs a reason"),
    ({"in-place": {"action": "off"}}, "off needs a reason"),
    ({"in-place": {"action": "off", "reason": ""}}, "at least 1 character"),
    ({"in-place": "sometimes"}, "'fail', 'warn' or 'off'"),
    ({"in-place": {"action": "warn", "why": "x"}}, "Extra inputs"),
])
def test_bad_settings_say_what_is_wrong(value: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        HazardSettings.model_validate(value)


def test_module_settings_override_the_defaults_key_by_key() -> None:
    defaults = HazardSettings.model_validate({"baked-dim": "fail", "in-place": "fail"})
    module = HazardSettings.model_validate({"in-place": {"action": "off", "reason": "r"}})
    merged = merge(defaults, module)
    assert merged.resolve("baked-dim")[0] is Action.FAIL
    assert merged.resolve("in-place") == (Action.OFF, "r")
    assert merge(None, None).root == {}


def test_settings_schema_lists_the_rule_ids() -> None:
    schema = HazardSettings.model_json_schema()
    assert schema["propertyNames"]["enum"] == [r.id for r in RULES]


@pytest.mark.parametrize(("text", "release"), [
    ("onnxruntime>=1.16", "1.16"), ("onnxruntime-gpu==1.17.*", "1.17"),
    ("onnxruntime>=1.14,<1.18", "1.14"), ("onnxruntime ~= 1.12.0", "1.12"),
])
def test_target_runtime_binds_the_oldest_admitted_release(text: str, release: str) -> None:
    oldest = parse_target(text).oldest
    assert oldest is not None and oldest.version == release


def test_target_runtime_beyond_the_table_and_bad_specs() -> None:
    assert parse_target("onnxruntime>=1.22").oldest is None
    assert parse_target("onnxruntime>=1.22").beyond_table()
    for bad, message in [("tensorflow>=2", "expected onnxruntime"),
                         ("onnxruntime", "give a version"),
                         ("onnxruntime>=abc!", "not a version specifier"),
                         ("onnxruntime<0.1", "admits no ONNX Runtime release")]:
        with pytest.raises(ValueError, match=message):
            parse_target(bad)


def test_runtime_table_is_monotonic() -> None:
    from packaging.version import Version

    ordered = sorted(RELEASES, key=lambda r: Version(r.version))
    for older, newer in itertools.pairwise(ordered):
        assert newer.opset >= older.opset and newer.ir_version >= older.ir_version


def test_merge_folds_dtypes_and_keeps_table_order() -> None:
    def h(rule: str, dtype: str, msg: str = "m") -> Hazard:
        return Hazard(rule, Severity.WARNING, Action.WARN, "mlp", msg, "fix", [Site(node="n")],
                      [dtype])

    merged = merge_hazards([h("in-place", "float32"), h("baked-dim", "float32"),
                            h("in-place", "float16"), h("in-place", "float16", "other")])
    assert [(x.rule, x.dtypes) for x in merged] == [
        ("baked-dim", ["float32"]), ("in-place", ["float32", "float16"]),
        ("in-place", ["float16"])]
    again = Hazard.from_dict(merged[1].to_dict())
    assert again == merged[1] and not again.blocks



def test_the_rules_read_a_skeleton_without_the_weights_data() -> None:
    """A weight's data is dropped (a model's size is not paid again for the rules); a
    small literal (a Reshape's shape) is kept, and shapes and types still read."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from parity_gate.hazards import graph as og
    from parity_gate.hazards.context import LARGE_TENSOR_BYTES, skeleton

    weight = numpy_helper.from_array(np.ones((256, 256), np.float32), "w")
    shape = numpy_helper.from_array(np.array([4, -1], np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["y"])]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 256])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                          [weight, shape])
    proto = skeleton(helper.make_model(g))
    w, shape_literal = proto.graph.initializer
    assert weight.ByteSize() > LARGE_TENSOR_BYTES and w.ByteSize() < 100
    assert list(w.dims) == [256, 256] and w.data_type == onnx.TensorProto.FLOAT
    assert shape_literal.ByteSize() == shape.ByteSize()  # a small literal keeps its data
    assert set(og.constants(proto.graph)) == {"shape"}
    assert og.constants(proto.graph)["shape"].tolist() == [4, -1]


# Classes read by the branch analysis (their source only: never run; `torch` is only a name).
torch: Any = None


class _FlagOff:
    fast = False

    def forward(self, x: Any) -> Any:
        if torch.compiler.is_exporting() and self.fast:
            return x.clamp(0, 6)
        return x.relu()


class _Negated:
    def forward(self, x: Any) -> Any:
        if not torch.onnx.is_in_onnx_export():
            print("eager")
        y = x.relu() if torch.compiler.is_exporting() else x.relu()  # noqa: RUF034
        return y

    def helper(self, x: Any) -> Any:
        flag = torch.compiler.is_exporting() or torch.jit.is_tracing()
        if flag:
            return x
        return x * 2


def _sites(cls: type) -> dict[str, ProbeSite]:
    return {f"{s.line - _first(cls)}:{s.probe}": s
            for s in probe_sites(cls, checks.PROBES["dynamo"], checks.KNOWN_PROBES)}


def _first(cls: type) -> int:
    import inspect

    return inspect.getsourcelines(cls)[1]


def test_probe_sites_read_each_branch_and_its_sides() -> None:
    (flag,) = _sites(_FlagOff).values()
    top = _first(_FlagOff)
    # eager: false; export: decided by self.fast; `return x.relu()` is eager's side
    assert (flag.eager, flag.export, flag.forward) == (False, None, True)
    assert flag.when_true == Side(frozenset({top + 5}), computes=True)
    assert flag.when_false == Side(frozenset({top + 6}), computes=True)
    negated = _sites(_Negated)
    logged, same, bound = (negated[k] for k in ("2:torch.onnx.is_in_onnx_export",
                                                "4:torch.compiler.is_exporting",
                                                "8:torch.compiler.is_exporting"))
    assert (logged.eager, logged.export) == (True, False)
    assert logged.when_true is not None and not logged.when_true.computes  # a print
    assert same.same  # both sides are the same code
    # a name bound to the probe; torch.jit.is_tracing() is false under dynamo too
    assert (bound.eager, bound.export, bound.forward) == (False, True, False)
    assert bound.when_false is not None and bound.when_false.computes  # `return x * 2`


def _site(eager: bool | None, export: bool | None, true: set[int], false: set[int],
          computes: bool = True, sets: frozenset[str] = frozenset()) -> ProbeSite:
    return ProbeSite("m.py", 1, "if p():", "p", "p()", eager, export,
                     Side(frozenset(true), computes, sets), Side(frozenset(false), computes),
                     function=frozenset(range(1, 20)), forward=True)


def test_verdict_claims_only_what_the_program_shows() -> None:
    """The pure rule of issue 48: a finding only where the captured program's lines show
    the export took the side eager does not, and that side differs."""
    def said(site: ProbeSite, ran: set[int], reached: bool = False) -> str:
        return verdict(site, frozenset(ran), reached).message

    plain = _site(False, True, {2}, {4})  # if p(): <2> / <4>
    assert "holds the operations of line 2, which eager does not run; eager runs line 4" \
        in said(plain, {2, 7})
    assert said(plain, {4, 7}) == ""  # the capture took eager's side
    assert "holds no operation of line 4, which eager runs" in said(plain, {7})
    assert said(plain, set()) == ""  # the function never ran in the capture
    assert "holds no operation of line 4" in said(plain, set(), reached=True)
    flag = _site(False, None, {2}, {4})  # if p() and self.fast:
    assert said(flag, {4}) == "" and said(flag, set(), reached=True) == ""
    assert "holds the operations of line 2" in said(flag, {2})
    noop = _site(False, True, {2}, set(), computes=False)  # if p(): x = x.contiguous()
    assert said(noop, {5}, reached=True) == ""
    scale = _site(False, True, {2}, {4}, computes=False, sets=frozenset({"scale = 2.0"}))
    assert "sets scale = 2.0, which later operations read" in said(scale, {5})
    one_line = _site(False, True, set(), set())  # a if p() else b, on one line
    assert "both sides are on line 1" in said(one_line, {1})
    unknown = _site(None, True, {2}, {4})  # if p() or self.flag:
    v = verdict(unknown, frozenset({2}))
    assert not v.certain and "depends on the rest of the condition" in v.message
    assert verdict(unknown, frozenset()).message == ""  # a function the capture never ran
    # outside `forward` the program records no line of the branch: the code decides
    helper = replace(plain, forward=False)
    assert "records the lines of `forward` methods only" in said(helper, set())
    assert verdict(replace(flag, forward=False), frozenset()).certain is False
