"""Where the Action's reports and caches go. Stdlib-only: read before anything is installed;
its own module so the entrypoint, the annotations and the post step share it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from parity_gate.model.files import own_folder_problem

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


def folder_links(inputs: Mapping[str, str], paths: Paths, env: Mapping[str, str]) -> list[str]:
    """The Action's folders that are not where they are meant to be, one line each (the
    rule is model.files.own_folder_problem's). A folder derived from the workspace (a
    relative `out_dir` or `cache_dir`, `.parity-cache`) must stay inside it with no link
    from the workspace down, and the default reports folder inside RUNNER_TEMP: a pull
    request that commits `.parity-cache` or `reports` as a link must not get the gate's
    files written, or pruned, wherever the link points. An absolute input is the workflow
    author's own choice (a self-hosted runner's /opt/cache): it is checked from the
    workspace or RUNNER_TEMP when it lies inside one, else only the folder itself may not
    be a link. Checked before anything is made, installed or run."""
    temp = Path(env["RUNNER_TEMP"]).absolute() if env.get("RUNNER_TEMP") else None
    out: list[str] = []
    for name, given, folder in (
            ("out_dir", inputs["out_dir"] or ("RUNNER_TEMP" if temp else "default"),
             paths.out_dir),
            ("cache_dir", inputs["cache_dir"], paths.cache_dir),
            ("cache_dir", inputs["cache_dir"], paths.export_cache) if paths.cache_dir
            else ("export_cache", f"{EXPORT_CACHE} in the workspace", paths.export_cache)):
        if folder is None:
            continue
        where = Path(os.path.abspath(folder))
        base = next((b for b in (paths.workspace, temp)
                     if b is not None and (b == where or b in where.parents)), None)
        if base is None and not Path(inputs.get(name, "")).is_absolute():
            problem = (f"{folder} is outside the workspace {paths.workspace} (expected a "
                       "folder inside it)")
        else:
            problem = own_folder_problem(folder, base)
        said = any(line.startswith(f"{name} (") for line in out)  # cache_dir, then its exports
        if problem and not said:
            out.append(f"{name} ({given}): {problem}")
    return out
