"""The hazard rule table, its manifest settings and the runtime table (pure: no export)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pydantic import ValidationError

from parity_gate.hazards import checks
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
