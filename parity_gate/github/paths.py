"""Where the Action's reports and caches go. Stdlib-only: read before anything is installed;
its own module so the entrypoint, the annotations and the post step share it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

EXPORT_CACHE = ".parity-cache"  # in the workspace without `cache_dir`: the CLI's default
EXPORTS_SUBDIR = "exports"  # the export cache's folder under `cache_dir`


@dataclass(frozen=True)
class Paths:
    workspace: Path
    out_dir: Path
    cache_dir: Path | None  # pip, torch hub, Hugging Face and GitHub API caches
    export_cache: Path | None = None  # `parity-gate run --cache-dir`; None: `export_cache: false`

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
    """Reports go to $RUNNER_TEMP/parity-gate unless `out_dir` says otherwise; the export
    cache to `cache_dir`/exports, else `.parity-cache` in the workspace (where a workflow's
    `actions/cache` step with `path: .parity-cache` finds it)."""
    workspace = Path(env.get("GITHUB_WORKSPACE") or os.getcwd()).absolute()
    if inputs["out_dir"]:
        out = workspace / inputs["out_dir"]
    elif env.get("RUNNER_TEMP"):
        out = Path(env["RUNNER_TEMP"]) / "parity-gate"
    else:
        out = workspace / "parity-reports"
    cache = workspace / inputs["cache_dir"] if inputs["cache_dir"] else None
    exports = (None if inputs.get("export_cache") == "false"
               else cache / EXPORTS_SUBDIR if cache else workspace / EXPORT_CACHE)
    return Paths(workspace, out, cache, exports)
