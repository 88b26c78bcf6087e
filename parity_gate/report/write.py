"""Write every report atomically, so an interrupt never leaves half a file."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from parity_gate.model.results import RunResult
from parity_gate.report import junit, markdown


@dataclass
class ReportPaths:
    json: Path | None = None
    junit: Path | None = None
    summary: Path | None = None

    @classmethod
    def in_folder(cls, out: Path, json: Path | None = None, junit: Path | None = None,
                  summary: Path | None = None) -> ReportPaths:
        """`--out DIR` with the standard names, each overridable by its own flag."""
        return cls(json or out / "results.json", junit or out / "junit.xml",
                   summary or out / "summary.md")


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_json(run: RunResult) -> bytes:
    doc = run.to_dict()
    return json.dumps(doc, indent=1, allow_nan=False).encode("utf-8")


def write_all(run: RunResult, paths: ReportPaths, summary: str | None = None) -> str:
    """Write the requested reports; returns the markdown (also used for the step summary).

    `summary` replaces the default markdown (the op sweep writes its findings table).
    """
    if summary is None:
        summary = markdown.render(run)
    if paths.json:
        atomic_write(paths.json, run_json(run))
    if paths.junit:
        atomic_write(paths.junit, junit.to_xml(run))
    if paths.summary:
        atomic_write(paths.summary, summary.encode("utf-8"))
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a", encoding="utf-8") as fh:
            fh.write(markdown.trim(summary) + "\n")
    return summary
