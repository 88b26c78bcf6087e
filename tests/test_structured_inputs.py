"""Structured inputs: a forward() that takes a list of images of different sizes (a
detector's input) or a dict of tensors, declared by dotted input names, exported for real
with each leaf a graph input of its own (tests/data/structured)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from parity_gate.cli import main
from parity_gate.engine.binding import leaf_paths, nest

DATA = Path(__file__).parent / "data" / "structured"


def test_dotted_names_nest_into_lists_and_dicts_in_their_order() -> None:
    flat = {"images.0": "a", "images.1": "b", "extra.scale": "s", "extra.offset": "o", "x": 1}
    tree = nest(flat)
    assert tree == {"images": ["a", "b"], "extra": {"scale": "s", "offset": "o"}, "x": 1}
    assert leaf_paths(tree) == list(flat)  # the exporter's flattened inputs keep the order
    assert nest({"m.1": 1, "m.0": 0}) == {"m": [0, 1]}  # a list by index, not by order
    assert nest({"m.0": 0, "m.k": 1}) == {"m": {"0": 0, "k": 1}}  # mixed: a dict


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("images.1", "images.2", "the parts of 'images' are 0, 2 (expected a list numbered "
                             "0..n-1, or named keys, not both)"),
    ("extra.scale", "extra", "'extra' is a whole input and also the parent of extra.offset"),
])
def test_a_structure_that_describes_nothing_is_a_located_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
        expected: str) -> None:
    text = (DATA / "parity.yml").read_text().replace(old, new)
    (tmp_path / "parity.yml").write_text(text)
    assert main(["check", str(tmp_path / "parity.yml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{tmp_path / 'parity.yml'}:") and "modules[0].inputs[" in err
    assert expected in err and "Traceback" not in err


@pytest.mark.process
def test_a_list_of_images_and_a_dict_of_tensors_export_and_match(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert main(["run", str(DATA / "parity.yml"), "--out", str(tmp_path / "out"), "--quiet",
                 "--cache-dir", str(cache)]) == 0
    cases = json.loads((tmp_path / "out" / "results.json").read_text())["cases"]
    # two fixture sets with other image sizes through one export: H and W are dynamic
    assert sorted(c["key"]["inputs"] for c in cases) == ["other_sizes", "pictures"]
    assert all(c["outcome"] == "pass" for c in cases), [c["reason"] for c in cases]
    assert {o["name"] for c in cases for o in c["comparisons"]} == {"logits", "bias"}
    (model,) = [p for p in cache.rglob("*.onnx")]
    graph = onnx.load(str(model), load_external_data=False).graph
    assert [i.name for i in graph.input] == ["images.0", "images.1", "extra.scale",
                                             "extra.offset"]
    dims = [d.dim_param or d.dim_value for d in graph.input[1].type.tensor_type.shape.dim]
    assert dims == [3, "h1", "w1"]
