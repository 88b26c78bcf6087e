"""Generated artefacts (JSON Schemas, the manifest key reference) must match the models."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

import jsonschema
import pytest

from parity_gate.manifest.docs import END, START, render
from parity_gate.manifest.load import parse_yaml
from parity_gate.manifest.schema import SCHEMA_FILE, manifest_schema
from parity_gate.model.schema import RESULTS_SCHEMA_FILE, results_schema

ROOT = Path(__file__).resolve().parent.parent


def test_shipped_schema_matches_models() -> None:
    shipped = json.loads(SCHEMA_FILE.read_text())
    assert shipped == manifest_schema(), "run: python -m parity_gate.manifest.schema"


def test_schema_accepts_the_example_and_rejects_a_typo() -> None:
    schema = manifest_schema()
    example = parse_yaml((ROOT / "parity_gate" / "example" / "parity.yml").read_text())
    jsonschema.validate(example, schema)
    example["modules"][0]["fixtures"] = "images"  # not a list
    try:
        jsonschema.validate(example, schema)
    except jsonschema.ValidationError as err:
        assert list(err.absolute_path)[:3] == ["modules", 0, "fixtures"]
    else:
        raise AssertionError("schema accepted a string where a list is required")


def test_manifest_key_reference_is_current() -> None:
    text = (ROOT / "docs" / "reference" / "manifest.md").read_text(encoding="utf-8")
    block = text[text.index(START): text.index(END) + len(END)]
    assert block == render(), "run: python scripts/gen_reference.py"


def test_manifest_key_reference_covers_every_model() -> None:
    """Every model a manifest can hold has its table (a new section is not left out)."""
    from pydantic import BaseModel, RootModel

    from parity_gate.manifest import models as m
    from parity_gate.manifest.docs import SECTIONS

    def nested(tp: object) -> list[object]:
        return [tp, *(t for arg in typing.get_args(tp) for t in nested(arg))]

    found: set[type] = set()
    todo: list[type] = [m.Manifest]
    while todo:
        model = todo.pop()
        found.add(model)
        todo += [tp for field in model.model_fields.values() for tp in nested(field.annotation)
                 if isinstance(tp, type) and issubclass(tp, BaseModel)
                 and not issubclass(tp, RootModel) and tp not in found]
    missing = sorted(t.__name__ for t in found - {model for _, model in SECTIONS})
    assert not missing, f"models without a table in manifest.docs.SECTIONS: {missing}"


@pytest.mark.process
def test_readme_has_exactly_two_quickstart_commands() -> None:
    out = [subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_commands.py"), which],
                          capture_output=True, text=True, check=True).stdout.strip()
           for which in ("example", "test")]
    assert out[0].endswith("parity-gate run")
    assert "pytest" in out[1] and "torch==2.13.0" in out[1]


def test_shipped_results_schema_matches_the_records() -> None:
    shipped = json.loads(RESULTS_SCHEMA_FILE.read_text(encoding="utf-8"))
    assert shipped == results_schema(), "run: python -m parity_gate.model.schema"


def test_results_schema_accepts_a_written_report_and_rejects_version_1() -> None:
    from parity_gate.model.keys import CaseKey
    from parity_gate.model.outcomes import Outcome
    from parity_gate.model.results import CaseResult, RunResult

    run = RunResult(cases=[CaseResult(CaseKey("m", "float32", "f", 2, "cpu"), Outcome.PASS)])
    doc = json.loads(json.dumps(run.to_dict(), allow_nan=False))
    jsonschema.validate(doc, results_schema())
    old = {**doc, "schema_version": 1, "verdict": "pass"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(old, results_schema())


@pytest.mark.process
def test_results_records_import_without_numpy_or_torch() -> None:
    code = ("import sys, parity_gate.model.results, parity_gate.model.schema, "
            "parity_gate.github.action; "
            "bad = [m for m in ('numpy', 'torch', 'onnx', 'onnxruntime') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
