"""The manifest's JSON Schema, generated from the pydantic models and shipped as a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from parity_gate.manifest.models import Manifest

SCHEMA_FILE = Path(__file__).parent.parent / "parity.schema.json"
SCHEMA_ID = "https://parity-gate.dev/schema/parity.schema.json"


def manifest_schema() -> dict[str, Any]:
    schema = Manifest.model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "parity-gate manifest (parity.yml)",
        **schema,
    }


def write_schema(path: Path = SCHEMA_FILE) -> None:
    path.write_text(json.dumps(manifest_schema(), indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_schema()
