"""The GitHub Action's entrypoint: inputs → `parity-gate run` → outputs, annotations, exit code.

It runs the same way in both of the action's modes: as the image's ENTRYPOINT
(`container: docker`) and on the runner's own Python (`container: none`).
Composite actions get no INPUT_* variables from the runner, so action.yml maps
every input into the step's `env:`; this module reads only environment
variables, never templated text (no template injection).

Module-level imports are the standard library and stdlib-only parity_gate
modules: `install-self` runs before the gate's dependencies are installed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity_gate.errors import EXIT_FAIL, EXIT_INTERNAL, EXIT_PASS, EXIT_USAGE
from parity_gate.outcomes import Outcome
from parity_gate.runtime import EXECUTION_PROVIDERS

ANNOTATION_LIMIT = 10  # GitHub keeps at most 10 error and 10 warning annotations per step
MESSAGE_LIMIT = 2000  # longer annotation messages are unreadable in the checks UI
FAIL_ON = ("regressions", "any-failure", "never")
UNKNOWN_SEVERITY = 1000  # an outcome this version does not know ranks worst
OUTPUTS = ("result", "regressions", "failures", "json_path", "junit_path", "summary_path",
           "out_dir")


@dataclass(frozen=True)
class InputSpec:
    """One action input: its default (== action.yml's) and what a valid value looks like."""

    default: str = ""
    expected: str = ""
    check: Callable[[str], bool] | None = None


def _one_of(*choices: str) -> Callable[[str], bool]:
    return lambda v: v in choices


def _is_shard(v: str) -> bool:
    m = re.fullmatch(r"(\d+)/(\d+)", v)
    return m is not None and 1 <= int(m.group(1)) <= int(m.group(2))


def _is_providers(v: str) -> bool:
    return all(p.strip() in EXECUTION_PROVIDERS for p in v.split(","))


def _is_path(v: str) -> bool:  # a leading '-' would be read as a flag by `parity-gate run`
    return not v.startswith("-")


INPUTS: dict[str, InputSpec] = {
    "manifest": InputSpec("parity.yml", "a path to parity.yml relative to the workspace",
                          _is_path),
    "baseline": InputSpec("", "a path to a baseline YAML file", _is_path),
    "providers": InputSpec("", f"a comma-separated list of {', '.join(EXECUTION_PROVIDERS)}",
                           _is_providers),
    "shard": InputSpec("", "K/N with 1 <= K <= N, e.g. 2/4", _is_shard),
    "select": InputSpec(),
    "jobs": InputSpec("", "an integer >= 1", lambda v: v.isdigit() and int(v) >= 1),
    "install": InputSpec(),
    "fail_on": InputSpec("regressions", "regressions, any-failure or never", _one_of(*FAIL_ON)),
    "cache_dir": InputSpec(),
    "out_dir": InputSpec(),
    # Read by action.yml's shell step; validated here too so one table documents them all.
    "container": InputSpec("docker", "docker or none", _one_of("docker", "none")),
    "image": InputSpec(),
    "forward_env": InputSpec("", "environment variable names separated by spaces",
                             lambda v: all(re.fullmatch(r"[A-Za-z_]\w*", n) for n in v.split())),
    "gpu": InputSpec("auto", "auto, true or false", _one_of("auto", "true", "false")),
    "python": InputSpec("python3", "a Python interpreter"),
    # Reserved for the pull-request comment (a later release); accepted, no effect yet.
    "comment": InputSpec("false", "true or false", _one_of("true", "false")),
    "github_token": InputSpec(),
}


class InputError(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def input_env(name: str) -> str:
    """The variable Actions would set for input `name` (`fail_on` → `INPUT_FAIL_ON`)."""
    return "INPUT_" + name.replace(" ", "_").upper()


def read_inputs(env: Mapping[str, str]) -> dict[str, str]:
    """Every input, trimmed (as actions/core does), empty → default; all problems at once."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for name, spec in INPUTS.items():
        value = env.get(input_env(name), "").strip() or spec.default
        if value and spec.check is not None and not spec.check(value):
            problems.append(f"{name}: got {value!r} (expected {spec.expected})")
        values[name] = value
    if problems:
        raise InputError(problems)
    return values


# --------------------------------------------------------------------------
# workflow commands


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


@dataclass(frozen=True)
class Annotation:
    level: str  # "error" | "warning"
    title: str
    message: str
    file: str | None = None
    line: int | None = None

    def render(self) -> str:
        props = [f"file={escape_property(self.file)}"] if self.file else []
        if self.file and self.line:
            props.append(f"line={self.line}")
        props.append(f"title={escape_property(self.title)}")
        return f"::{self.level} {','.join(props)}::{escape_data(self.message)}"


def write_outputs(path: str | None, values: Mapping[str, str]) -> None:
    """Append `name<<DELIM` blocks: safe for any value, newlines included."""
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        for name, value in values.items():
            delim = f"ghadelimiter_{uuid.uuid4()}"
            while delim in value:  # pragma: no cover - a collision with a fresh uuid
                delim = f"ghadelimiter_{uuid.uuid4()}"
            fh.write(f"{name}<<{delim}\n{value}\n{delim}\n")


# --------------------------------------------------------------------------
# the report → annotations and outputs


def _rank(outcome: str) -> tuple[bool, int]:
    """(failed, severity); an outcome newer than this code counts as a failure, worst."""
    try:
        o = Outcome(outcome)
    except ValueError:
        return outcome not in ("pass", "skipped"), UNKNOWN_SEVERITY
    return o.failed, o.severity


def failing_cases(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report.get("cases", []) if _rank(str(c.get("outcome")))[0]]


def module_lines(manifest_text: str) -> dict[str, int]:
    """Line of each module's `- name:` under `modules:`, so annotations point at it."""
    lines: dict[str, int] = {}
    indent: int | None = None
    inside = False
    for number, line in enumerate(manifest_text.splitlines(), start=1):
        if re.match(r"modules\s*:", line):
            inside = True
            continue
        if inside and re.match(r"[^\s#-]", line):
            break  # the next top-level key
        m = re.match(r"(\s*)-\s+\{?\s*name\s*:\s*[\"']?([\w.\-]+)", line) if inside else None
        if m and (indent is None or len(m.group(1)) <= indent):
            indent = len(m.group(1))
            lines.setdefault(m.group(2), number)
    return lines


def _case_annotation(case: Mapping[str, Any], level: str, rulings: Mapping[str, str],
                     file: str | None, lines: Mapping[str, int]) -> Annotation:
    outcome = str(case.get("outcome"))
    try:
        described = Outcome(outcome).info.description
    except ValueError:
        described = ""
    head = str(case.get("reason") or described)
    # The case's reason already quotes its worst output; list the other failing ones.
    bad = [line for c in case.get("comparisons", []) if not c.get("passed", True)
           if (line := f"{c.get('name')}: {c.get('reason')}") != head]
    parts = [head, *bad[:3]]
    if len(bad) > 3:
        parts.append(f"… and {len(bad) - 3} more failing outputs")
    if case["id"] in rulings:
        parts.append(f"baseline: {rulings[case['id']]}")
    tail = "" if level == "error" else " (not blocking)"
    return Annotation(level, f"parity-gate: {case['id']} {outcome}{tail}",
                      "\n".join(p for p in parts if p)[:MESSAGE_LIMIT],
                      file, lines.get(str(case.get("module"))))


def annotate(report: Mapping[str, Any], *, manifest_file: str | None = None,
                manifest_lines: Mapping[str, int] | None = None,
                limit: int = ANNOTATION_LIMIT) -> list[Annotation]:
    """Failing cases and findings, worst first, at most `limit` in all.

    A case that blocks the merge is an error; a failure that does not block (a
    known one under the baseline, or `fail_on: never`) is a warning. Past the
    limit, the last slot says how many were left out.
    """
    gate = report.get("gate") or {}
    blocking = set(gate.get("blocking") or [])
    blocks = not gate.get("passed", True)
    rulings = {r["id"]: str(r.get("why", "")) for r in gate.get("rulings") or []
               if "id" in r and gate.get("baseline")}  # without one, every failure is new
    lines = manifest_lines or {}
    ranked: list[tuple[tuple[bool, int, int, str], Annotation]] = []
    for case in failing_cases(report):
        level = "error" if blocks and case["id"] in blocking else "warning"
        severity = _rank(str(case.get("outcome")))[1]
        ranked.append(((level != "error", 0, -severity, case["id"]),
                       _case_annotation(case, level, rulings, manifest_file, lines)))
    for f in report.get("findings", []):
        level = "error" if f.get("severity") == "error" else "warning"
        module = str(f.get("module", ""))
        ranked.append(((level != "error", 1, 0, module),
                       Annotation(level, f"parity-gate: {module} {f.get('kind', 'finding')}",
                                  str(f.get("message", ""))[:MESSAGE_LIMIT], manifest_file,
                                  lines.get(module))))
    ranked.sort(key=lambda r: r[0])
    items = [a for _, a in ranked]
    if len(items) <= limit:
        return items
    shown = items[: limit - 1]
    return [*shown, Annotation(
        "warning", "parity-gate: more results not annotated",
        f"{len(items) - len(shown)} more failing cases or findings were omitted (GitHub shows "
        f"at most {ANNOTATION_LIMIT} annotations per step); see the step summary or the JSON "
        "report.")]


def outputs(result: str, report: Mapping[str, Any] | None, paths: Paths) -> dict[str, str]:
    gate = (report or {}).get("gate") or {}
    files = {"json_path": paths.json, "junit_path": paths.junit, "summary_path": paths.summary}
    return {
        "result": result,
        "regressions": str(len(gate.get("blocking") or [])) if report is not None else "",
        "failures": str(len(failing_cases(report))) if report is not None else "",
        **{name: str(p) if p.is_file() else "" for name, p in files.items()},
        "out_dir": str(paths.out_dir),
    }


# --------------------------------------------------------------------------
# running things


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


def build_command(inputs: Mapping[str, str], paths: Paths) -> list[str]:
    cmd = [sys.executable, "-m", "parity_gate", "run", inputs["manifest"],
           "--out", str(paths.out_dir), "--json", str(paths.json), "--junit", str(paths.junit),
           "--summary", str(paths.summary), "--fail-on", inputs["fail_on"]]
    for flag, name in (("--providers", "providers"), ("--baseline", "baseline"),
                       ("--shard", "shard"), ("--jobs", "jobs")):
        if inputs[name]:
            cmd += [flag, inputs[name]]
    for pattern in re.split(r"[\s,]+", inputs["select"]):
        if pattern:
            cmd += ["--select", pattern]
    return cmd


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
    print(f"::stop-commands::{token}", flush=True)
    tail: deque[str] = deque(maxlen=12)
    try:
        with subprocess.Popen(cmd, cwd=cwd, env=dict(env), stderr=subprocess.PIPE,
                              text=True, errors="replace") as proc:
            assert proc.stderr is not None
            for line in proc.stderr:
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


def restore_ownership(roots: Iterable[Path], env: Mapping[str, str]) -> None:
    """Docker mode runs as root: hand what it created back to the runner's user.

    Otherwise root-owned reports, caches and build files stay in a self-hosted
    runner's workspace, and the next job's checkout fails to clean them.
    """
    uid, gid = env.get("PARITY_GATE_HOST_UID", ""), env.get("PARITY_GATE_HOST_GID", "")
    if not (uid.isdigit() and gid.isdigit()) or int(uid) == 0 or os.geteuid() != 0:
        return
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (".", *dirnames, *filenames):
                path = os.path.join(dirpath, name)
                try:
                    if _owner(path) == 0:
                        os.lchown(path, int(uid), int(gid))
                except OSError:
                    pass


def _owner(path: str) -> int:
    return os.lstat(path).st_uid


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
    path = env.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"## ⚠️ {note.title}\n\n```\n{note.message}\n```\n")


def run_action(inputs: Mapping[str, str], paths: Paths, env: Mapping[str, str]) -> int:
    """Install, run the gate, then outputs and annotations from its JSON report."""
    env = cache_env(env, paths.cache_dir)
    github_output = env.get("GITHUB_OUTPUT")
    if inputs["comment"] == "true" or inputs["github_token"]:
        print("parity-gate: the comment and github_token inputs are reserved for a later "
              "release and have no effect yet")
    if inputs["install"]:
        print("::group::install", flush=True)
        rc, tail = run_logged(["bash", "-c", inputs["install"]], paths.workspace, env)
        print("::endgroup::", flush=True)
        if rc:
            note = _failure_annotation(rc, tail, "install", f"install: the command exited with "
                                       f"{rc} (expected it to install your project)")
            print(note.render())
            _append_summary(env, note)
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
        stale.unlink(missing_ok=True)
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
                             limit=ANNOTATION_LIMIT - len(notes))
    for note in notes:
        print(note.render())
    return code


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _relative(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


# --------------------------------------------------------------------------
# `container: none`: install the action's own checkout


def install_self(source: Path) -> int:
    """pip-install the gate from the action's checkout into this Python.

    With onnxruntime-gpu installed, the gate's `onnxruntime` requirement must not
    pull the CPU package: both install the `onnxruntime` module, and the later one
    wins, silently dropping the CUDA provider. Then the gate goes in without deps
    and its other requirements are installed by name.
    """
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    if not _installed("onnxruntime-gpu"):
        return subprocess.call([*pip, str(source)])
    rc = subprocess.call([*pip, "--no-deps", str(source)])
    if rc:
        return rc
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m, json; "
         "print(json.dumps(m.requires('parity-gate') or []))"],
        capture_output=True, text=True, check=True)
    reqs = [r for r in json.loads(probe.stdout) if not _is_extra(r) and _name(r) != "onnxruntime"]
    return subprocess.call([*pip, *reqs]) if reqs else 0


def _installed(dist: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def _is_extra(requirement: str) -> bool:
    return "extra" in requirement.partition(";")[2]


def _name(requirement: str) -> str:
    m = re.match(r"[A-Za-z0-9._-]+", requirement)
    return re.sub(r"[-_.]+", "-", m.group(0)).lower() if m else ""


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "install-self":
        return install_self(Path(args[1]))
    if args:
        print("usage: python -m parity_gate.action [install-self PATH]\n(inputs come from "
              "INPUT_* environment variables, as GitHub Actions sets them)", file=sys.stderr)
        return EXIT_USAGE
    env = dict(os.environ)
    try:
        inputs = read_inputs(env)
    except InputError as err:
        for problem in err.problems:
            print(Annotation("error", "parity-gate: invalid input", problem).render())
        write_outputs(env.get("GITHUB_OUTPUT"), {"result": "error"})
        return EXIT_USAGE
    paths = resolve_paths(inputs, env)
    try:
        return run_action(inputs, paths, env)
    finally:
        restore_ownership([p for p in (paths.workspace, paths.out_dir, paths.cache_dir)
                           if p is not None], env)


if __name__ == "__main__":
    raise SystemExit(main())
