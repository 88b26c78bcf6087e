"""JSON Schemas of the files the gate writes and reads, generated from the records.

Shipped beside the package (`results.schema.json`) so a consumer can validate
a report without parity-gate installed; a test keeps the file in sync.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from parity_gate.model.record import adapter
from parity_gate.model.results import SCHEMA_VERSION, RunResult

RESULTS_SCHEMA_FILE = Path(__file__).parent.parent / "results.schema.json"
RESULTS_SCHEMA_ID = "https://parity-gate.dev/schema/results.schema.json"


def results_schema() -> dict[str, Any]:
    """The schema of `results.json` as written (serialization mode: computed fields included)."""
    schema = adapter(RunResult).json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": RESULTS_SCHEMA_ID,
        "title": f"parity-gate results (results.json, schema_version {SCHEMA_VERSION})",
        **schema,
    }


def write(path: Path = RESULTS_SCHEMA_FILE) -> None:
    path.write_text(json.dumps(results_schema(), indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write()
