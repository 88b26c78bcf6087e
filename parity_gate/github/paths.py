"""Where the Action's reports and caches go. Stdlib-only: read before anything is installed;
its own module so the entrypoint, the annotations and the post step share it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Paths:
    workspace: Path
    out_dir: Path
    cache_dir: Path | None

    @property
    def json(self) -> Path:
        return self.out_dir / "results.json"

    @property
    def junit(self) -> Path:
        return self.out_dir / "junit.xml"

    @property
    def summary(self) -> Path:
        return self.out_dir / "summary.md"


def resolve_paths(inputs: Mapping[str, str], env: Mapping[str, str]) -> Paths:
    """Reports go to $RUNNER_TEMP/parity-gate unless `out_dir` says otherwise."""
    workspace = Path(env.get("GITHUB_WORKSPACE") or os.getcwd()).absolute()
    if inputs["out_dir"]:
        out = workspace / inputs["out_dir"]
    elif env.get("RUNNER_TEMP"):
        out = Path(env["RUNNER_TEMP"]) / "parity-gate"
    else:
        out = workspace / "parity-reports"
    cache = workspace / inputs["cache_dir"] if inputs["cache_dir"] else None
    return Paths(workspace, out, cache)
