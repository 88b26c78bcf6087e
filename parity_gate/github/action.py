"""The GitHub Action's entrypoint: inputs → `parity-gate run` → outputs, annotations, exit code.

It runs the same way in both of the action's modes: as the image's ENTRYPOINT
(`container: docker`) and on the runner's own Python (`container: none`).
Module-level imports are the standard library and stdlib-only parity_gate
modules: `install-self` runs before the gate's dependencies are installed; the
result model is imported when the report is read.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from parity_gate.errors import EXIT_FAIL, EXIT_INTERNAL, EXIT_PASS, EXIT_USAGE, UserError
from parity_gate.github.annotations import OUTPUTS, annotate, module_lines, outputs
from parity_gate.github.commands import (
    ANNOTATION_LIMIT,
    Annotation,
    escape_data,
    escape_property,
    write_outputs,
)
from parity_gate.github.inputs import INPUTS, InputError, input_env, read_inputs
from parity_gate.github.install import install_self
from parity_gate.github.paths import Paths, folder_links, resolve_paths
from parity_gate.github.project import install_command
from parity_gate.model.files import append_step_summary
from parity_gate.model.secrets import without_credentials
from parity_gate.model.units import parse_age
from parity_gate.report.secrets import Masker, secret_values

if TYPE_CHECKING:
    from parity_gate.model.results import RunResult

__all__ = ["ANNOTATION_LIMIT", "INPUTS", "OUTPUTS", "Annotation", "Paths", "escape_data",
           "escape_property", "input_env", "module_lines", "resolve_paths"]


def build_command(inputs: Mapping[str, str], paths: Paths) -> list[str]:
    cmd = [sys.executable, "-m", "parity_gate", "run", inputs["manifest"],
           "--out", str(paths.out_dir), "--json", str(paths.json), "--junit", str(paths.junit),
           "--summary", str(paths.summary), "--fail-on", inputs["fail_on"]]
    for flag, name in (("--providers", "providers"), ("--baseline", "baseline"),
                       ("--shard", "shard"), ("--jobs", "jobs")):
        if inputs[name]:
            cmd += [flag, inputs[name]]
    if inputs["allow_all_skipped"] == "true":
        cmd.append("--allow-all-skipped")
    cmd += ["--cache-dir", str(paths.export_cache)] if paths.export_cache else ["--no-cache"]
    for pattern in re.split(r"[\s,]+", inputs["select"]):
        if pattern:
            cmd += ["--select", pattern]
    return cmd


def folder_problems(inputs: Mapping[str, str], paths: Paths) -> list[str]:
    """`out_dir`/`cache_dir` (and the export cache in it, or `.parity-cache` in the
    workspace) that exist and are not folders (or cannot be made): one line each, before
    anything is installed or run."""
    out: list[str] = []
    files: set[Path] = set()  # each file in the way said once (`cache_dir` and its exports)
    exports = ("cache_dir" if paths.cache_dir else "export_cache", paths.export_cache)
    for name, folder in (("out_dir", paths.out_dir), ("cache_dir", paths.cache_dir), exports):
        if folder is None:
            continue
        up = folder
        while not os.path.lexists(up) and up != up.parent:
            up = up.parent
        if os.path.lexists(up) and not up.is_dir():
            what = "is a file" if up == folder else f"is inside {up}, which is a file"
            given = (f"{inputs[name] or folder} ({folder})" if name != "export_cache"
                     else str(folder))
            if up not in files:
                out.append(f"{name}: {given} {what} (expected a folder, or a path that does "
                           "not exist yet)")
            files.add(up)
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            out.append(f"{name}: cannot create {folder}: {err.strerror or err} (expected a "
                       "folder this user can write)")
    return out


def cache_env(env: Mapping[str, str], cache_dir: Path | None) -> dict[str, str]:
    """Point pip, torch hub and Hugging Face downloads at `cache_dir` (kept between runs)."""
    out = dict(env)
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        out.update(XDG_CACHE_HOME=str(cache_dir), PIP_CACHE_DIR=str(cache_dir / "pip"),
                   TORCH_HOME=str(cache_dir / "torch"), HF_HOME=str(cache_dir / "huggingface"))
    return out


def run_logged(cmd: list[str], cwd: Path, env: Mapping[str, str]) -> tuple[int, list[str]]:
    """Run `cmd` with its output passed through live; returns its code and last stderr lines.

    Workflow commands are paused meanwhile: the user's code (and a pull request's)
    prints into this log, and must not be able to forge annotations or masks.
    """
    token = f"parity-gate-{uuid.uuid4().hex}"
    masker = Masker(secret_values(os.environ))  # the tokens this step holds, not the child
    print(f"::stop-commands::{token}", flush=True)
    tail: deque[str] = deque(maxlen=12)
    try:
        with subprocess.Popen(cmd, cwd=cwd, env=dict(env), stderr=subprocess.PIPE,
                              text=True, errors="replace") as proc:
            assert proc.stderr is not None
            for line in proc.stderr:
                line = masker.text(line)
                sys.stderr.write(line)
                sys.stderr.flush()
                if line.strip():
                    tail.append(line.rstrip())
    except OSError as err:  # bash or python missing: report it like a failed command
        return 127, [str(err)]
    finally:
        sys.stderr.flush()
        print(f"::{token}::", flush=True)
    return proc.returncode, list(tail)


Snapshot = set[tuple[int, int]]  # (st_dev, st_ino) of what existed before the run


def snapshot(roots: Iterable[Path]) -> Snapshot:
    """Every file and folder under `roots` now, so that only what the run makes is
    handed back afterwards (root-owned files the user had there stay as they were)."""
    seen: Snapshot = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (".", *dirnames, *filenames):
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                seen.add((st.st_dev, st.st_ino))
    return seen


def restore_ownership(roots: Iterable[Path], env: Mapping[str, str],
                      before: Snapshot | None = None) -> None:
    """Docker mode runs as root: hand what it created back to the runner's user.

    Otherwise root-owned reports, caches and build files stay in a self-hosted
    runner's workspace, and the next job's checkout fails to clean them. Only entries
    not in `before` (made during the run; a report replaced by a rename is new) change
    owner; `before=None` hands back every root-owned entry.
    """
    uid, gid = env.get("PARITY_GATE_HOST_UID", ""), env.get("PARITY_GATE_HOST_GID", "")
    if not (uid.isdigit() and gid.isdigit()) or int(uid) == 0 or os.geteuid() != 0:
        return
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (".", *dirnames, *filenames):
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                    if st.st_uid == 0 and (before is None
                                           or (st.st_dev, st.st_ino) not in before):
                        os.lchown(path, int(uid), int(gid))
                except OSError:
                    pass


def _failure_annotation(rc: int, tail: list[str], what: str, lead: str = "") -> Annotation:
    if what == "run" and rc == EXIT_USAGE:
        kind = "usage error"
    elif what == "run" and rc == EXIT_INTERNAL:
        kind = "internal error"
    elif rc > 128:
        kind = f"stopped by signal {rc - 128}"
    else:
        kind = f"exit code {rc}"
    return Annotation("error", f"parity-gate: {what} failed ({kind})",
                      "\n".join([lead, *tail[-6:]] if lead else tail[-6:])
                      or f"{what} exited with {rc}; see the log")


def _append_summary(env: Mapping[str, str], note: Annotation) -> None:
    """Only when `run` wrote no report (and so no summary) of its own."""
    problem = append_step_summary(f"## ⚠️ {note.title}\n\n```\n{note.message}\n```\n", env)
    if problem:  # a folder there, say: said once, the annotation still carries the note
        print(f"parity-gate: {problem}", file=sys.stderr)


def _install(inputs: Mapping[str, str], paths: Paths, env: Mapping[str, str]) -> bool:
    """The `install` input's command in the workspace (grouped in the log); False, with an
    annotation and a summary section, when it fails."""
    command, said = install_command(inputs["install"], paths.workspace)
    print(said, flush=True)
    if not command:
        return True
    print("::group::install", flush=True)
    rc, tail = run_logged(command, paths.workspace, env)
    print("::endgroup::", flush=True)
    if rc:
        note = _failure_annotation(rc, tail, "install", f"install: the command exited with "
                                   f"{rc} (expected it to install your project)")
        print(note.render())
        _append_summary(env, note)
    return rc == 0


def run_action(inputs: Mapping[str, str], paths: Paths, env: Mapping[str, str]) -> int:
    """Install, run the gate, then outputs and annotations from its JSON report."""
    # No credential of any kind reaches `install`, the gate or its container; the tokens
    # reach the post step only.
    env = without_credentials(cache_env(env, paths.cache_dir))
    github_output = env.get("GITHUB_OUTPUT")
    if inputs["results"]:  # a workflow_run job: comment on an earlier run's results
        from parity_gate.github.post import report_only

        return report_only(inputs, paths, github_output)
    if not _install(inputs, paths, env):
        write_outputs(github_output, {"result": "error"})
        return EXIT_USAGE
    manifest = paths.workspace / inputs["manifest"]
    if not manifest.is_file():
        note = Annotation("error", "parity-gate: invalid input",
                          f"manifest: {inputs['manifest']!r} is not a file in the workspace "
                          f"{paths.workspace} (expected a path to parity.yml relative to it)")
        print(note.render())
        write_outputs(github_output, {"result": "error"})
        return EXIT_USAGE
    for stale in (paths.json, paths.junit, paths.summary):  # a reused out_dir's old reports
        if stale.is_file() and not stale.is_symlink():  # a link: the gate refuses it
            stale.unlink()
    cmd = build_command(inputs, paths)
    print(f"parity-gate: {shlex.join(cmd)}", flush=True)
    rc, tail = run_logged(cmd, paths.workspace, env)
    report = _load(paths.json)
    code = EXIT_INTERNAL if rc in (EXIT_PASS, EXIT_FAIL) and report is None else rc
    result = {EXIT_PASS: "pass", EXIT_FAIL: "fail"}.get(code, "error")
    write_outputs(github_output, outputs(result, report, paths))
    notes: list[Annotation] = []
    if result == "error":
        notes.append(_failure_annotation(rc, tail, "run"))
        if report is None:
            _append_summary(env, notes[0])
    if report is not None:
        file = _relative(manifest.resolve(), paths.workspace.resolve())
        lines = module_lines(manifest.read_text(encoding="utf-8", errors="replace"))
        notes += annotate(report, manifest_file=file, manifest_lines=lines,
                          limit=ANNOTATION_LIMIT - len(notes), workspace=paths.workspace)
    if inputs.get("bisect", "off") == "on-regression" and code == EXIT_FAIL:
        from parity_gate.github import bisect_step

        print("::group::bisect", flush=True)
        said = bisect_step.run(inputs, paths.workspace, paths.json, paths.out_dir, env,
                               paths.cache_dir / "bisect" if paths.cache_dir else None)
        print("::endgroup::", flush=True)
        print(f"parity-gate: {said}", flush=True)
    pruned = prune_export_cache(inputs, paths)
    for note in [*notes, *([pruned] if pruned else [])]:
        print(note.render())
    return code


def prune_export_cache(inputs: Mapping[str, str], paths: Paths) -> Annotation | None:
    """Keep an export cache that `actions/cache` carries from run to run bounded: entries no
    run has used for `export_cache_max_age` are removed. Never changes the result; a failed
    prune is a warning."""
    from parity_gate.engine.cache import ExportCache

    age, folder = inputs["export_cache_max_age"], paths.export_cache
    if folder is None or age == "never" or not folder.is_dir():
        return None
    try:
        said = ExportCache(folder).pruned(older_than_s=parse_age(age))
    except UserError as exc:
        return Annotation("warning", "parity-gate: export cache prune failed", str(exc))
    except OSError as exc:
        return Annotation("warning", "parity-gate: export cache prune failed",
                          f"{folder}: {exc.strerror or exc}")
    print(f"parity-gate cache: {said}", file=sys.stderr, flush=True)
    return None


def _load(path: Path) -> RunResult | None:
    """The run's report through the result model; None when there is none to read."""
    from parity_gate.gate.merge import read_results

    if not path.is_file():
        return None
    try:
        return read_results(path)[1]
    except UserError as err:
        print(f"parity-gate: {err}", file=sys.stderr)
        return None


def _relative(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "install-self":
        return install_self(Path(args[1]))
    post = args == ["post"]  # the upstream search and the PR comment, after the gate
    if args and not post:
        print("usage: python -m parity_gate.github.action [install-self PATH | post]\n(inputs "
              "come from INPUT_* environment variables, as GitHub Actions sets them)",
              file=sys.stderr)
        return EXIT_USAGE
    env = dict(os.environ)
    try:
        inputs = read_inputs(env)
    except InputError as err:
        if post:  # the gate step has reported them
            return EXIT_PASS
        for problem in err.problems:
            print(Annotation("error", "parity-gate: invalid input", problem).render())
        write_outputs(env.get("GITHUB_OUTPUT"), {"result": "error"})
        return EXIT_USAGE
    paths = resolve_paths(inputs, env)
    linked = folder_links(inputs, paths, env)
    if linked:  # before anything is made, walked or run there
        for problem in linked:
            print(Annotation("error" if not post else "warning", "parity-gate: invalid input",
                             problem).render())
        if post:  # the gate step refused them already; nothing is posted from them
            return EXIT_PASS
        write_outputs(env.get("GITHUB_OUTPUT"), {"result": "error"})
        return EXIT_USAGE
    roots = [p for p in (paths.workspace, paths.out_dir, paths.cache_dir) if p is not None]
    before = snapshot(roots)
    problems = [] if post else folder_problems(inputs, paths)
    if problems:
        for problem in problems:
            print(Annotation("error", "parity-gate: invalid input", problem).render())
        write_outputs(env.get("GITHUB_OUTPUT"), {"result": "error"})
        restore_ownership(roots, env, before)
        return EXIT_USAGE
    try:
        if post:  # never changes the gate's exit code: GitHub failures are warnings
            from parity_gate.github.post import main as post_main

            return post_main(inputs, paths, env)
        return run_action(inputs, paths, env)
    finally:
        restore_ownership(roots, env, before)


if __name__ == "__main__":
    raise SystemExit(main())
