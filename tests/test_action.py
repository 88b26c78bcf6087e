"""The GitHub Action: its entrypoint run as Actions runs it, action.yml's shell, the examples.

The end-to-end tests start `python -m parity_gate.github.action` with the INPUT_*/GITHUB_*
environment a runner gives a pull_request job; the rest feed the entrypoint's
functions hand-built reports of the real shape (RunResult.to_dict), or run
action.yml's own script with stub `docker`/`nvidia-smi`/`python` commands.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import parity_gate
from parity_gate.compare import Comparison, Verdict
from parity_gate.engine.cache import ExportCache
from parity_gate.errors import UserError
from parity_gate.gate.decision import decide
from parity_gate.gate.merge import read_results
from parity_gate.github import action, install
from parity_gate.model.findings import Finding
from parity_gate.model.gate import GateDecision, Ruling
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult

REPO = Path(__file__).resolve().parents[1]
MAJOR_TAG = f"v{parity_gate.__version__.split('.')[0]}"  # what `uses: ...@vN` follows
ACTION_YML = REPO / "action.yml"
WORKFLOWS = sorted((REPO / "examples" / "workflows").glob("*.yml"))
SHA = "3f1c2a9d8e7b6a5f4c3d2e1f0a9b8c7d6e5f4a3b"
ANNOTATION = re.compile(r"^::(error|warning)(?: ([^:]*))?::(.*)$")


# --------------------------------------------------------------------------
# helpers


def parse_outputs(text: str) -> dict[str, str]:
    """Read a GITHUB_OUTPUT file the way the runner does (`k=v` and `k<<DELIM` blocks)."""
    out: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line:
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


def unescape(text: str) -> str:
    for code, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(code, char)
    return text


def parse_annotations(stdout: str) -> list[dict[str, str]]:
    found = []
    for line in stdout.splitlines():
        m = ANNOTATION.match(line)
        if m:
            props = dict(p.split("=", 1) for p in (m.group(2) or "").split(",") if p)
            found.append({"level": m.group(1), "message": unescape(m.group(3)),
                          **{k: unescape(v) for k, v in props.items()}})
    return found


def runner_env(tmp: Path, workspace: Path, **inputs: str) -> dict[str, str]:
    """What a runner gives a pull_request job's step (this machine's own GITHUB_* removed)."""
    temp = tmp / "runner-temp"
    commands = temp / "_runner_file_commands"
    event_dir = temp / "_github_workflow"
    for d in (commands, event_dir):
        d.mkdir(parents=True, exist_ok=True)
    event = {
        "action": "synchronize",
        "number": 42,
        "pull_request": {
            "number": 42,
            "title": "Export the encoder with dynamic shapes",
            "head": {"sha": SHA, "ref": "feature/encoder",
                     "repo": {"full_name": "octo-org/models"}},
            "base": {"sha": "b" * 40, "ref": "main", "repo": {"full_name": "octo-org/models"}},
            "html_url": "https://github.com/octo-org/models/pull/42",
        },
        "repository": {"full_name": "octo-org/models", "default_branch": "main"},
    }
    (event_dir / "event.json").write_text(json.dumps(event), encoding="utf-8")
    for name in ("set_output", "step_summary"):
        (commands / name).touch()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "RUNNER_", "INPUT_", "PARITY_GATE_"))}
    env.update({
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event_dir / "event.json"),
        "GITHUB_REPOSITORY": "octo-org/models",
        "GITHUB_SHA": "c" * 40,
        "GITHUB_REF": "refs/pull/42/merge",
        "GITHUB_HEAD_REF": "feature/encoder",
        "GITHUB_BASE_REF": "main",
        "GITHUB_RUN_ID": "1234567890",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_OUTPUT": str(commands / "set_output"),
        "GITHUB_STEP_SUMMARY": str(commands / "step_summary"),
        "RUNNER_TEMP": str(temp),
        "RUNNER_OS": "Linux",
    })
    env.update({action.input_env(k): v for k, v in inputs.items()})
    return env


def run_entrypoint(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parity_gate.github.action"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def case(module: str, outcome: Outcome, reason: str = "", comparisons: int = 0) -> CaseResult:
    comps = [Comparison(f"out{i}", False, Verdict.MISMATCH,
                        f"out{i}: 3/8 elements out of tolerance", "(4, 2)", "(4, 2)",
                        "float32", "float32", 1e-5, 1e-3)
             for i in range(comparisons)]
    return CaseResult(CaseKey(module, "float32", "images", 4, "cpu"), outcome, reason,
                      comparisons=comps)


def report(cases: list[CaseResult], findings: list[Finding] | None = None,
           fail_on: str = "any-failure") -> RunResult:
    """A run as the Action reads it: decided, written as JSON, read back through the model."""
    run = RunResult(cases=cases, findings=findings or [], tool_version="0.1.0")
    run.gate = decide(run, fail_on)
    return RunResult.from_dict(json.loads(json.dumps(run.to_dict(), allow_nan=False)))


# --------------------------------------------------------------------------
# action.yml ⇄ entrypoint


def test_action_yml_inputs_are_the_entrypoints_inputs() -> None:
    spec = yaml.safe_load(ACTION_YML.read_text(encoding="utf-8"))
    assert set(spec["inputs"]) == set(action.INPUTS)
    for name, declared in spec["inputs"].items():
        assert str(declared.get("default", "")) == action.INPUTS[name].default, name
        assert declared["description"], name
    (step,) = spec["runs"]["steps"]
    assert spec["runs"]["using"] == "composite"
    # Every input reaches the script through env, under the name Actions would give it.
    assert step["env"] == {action.input_env(n): f"${{{{ inputs.{n} }}}}" for n in action.INPUTS}
    assert set(spec["outputs"]) == set(action.OUTPUTS)
    for name, out in spec["outputs"].items():
        assert out["value"] == f"${{{{ steps.{step['id']}.outputs.{name} }}}}"


def test_no_template_expansion_in_run_scripts() -> None:
    spec = yaml.safe_load(ACTION_YML.read_text(encoding="utf-8"))
    for step in spec["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")
    for wf in WORKFLOWS:
        for job in yaml.safe_load(wf.read_text(encoding="utf-8"))["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), (wf.name, step)


def test_example_workflows_are_pinned_and_minimal() -> None:
    assert {w.name for w in WORKFLOWS} >= {"pr-gate-cpu.yml", "gpu-self-hosted.yml",
                                          "sharded.yml"}
    for wf in WORKFLOWS:
        text = wf.read_text(encoding="utf-8")
        for line in text.splitlines():
            m = re.match(r"\s*(?:- )?uses:\s*(\S+)", line)
            if m and m.group(1).startswith("parity-gate/parity-gate@"):
                # The gate itself by its moving major tag (scripts/release.py moves it), which
                # a copied workflow resolves: a placeholder SHA would not.
                assert m.group(1) == f"parity-gate/parity-gate@{MAJOR_TAG}", line
            elif m:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", m.group(1)), line
                assert re.search(r"# v\d", line), f"{wf.name}: no version comment: {line}"
        for ref in re.findall(r"^\s*ref:\s*(\S+)", text, re.M):  # a checkout of the gate
            assert ref == MAJOR_TAG, (wf.name, ref)
        doc = yaml.safe_load(text)
        assert doc["permissions"] == {"contents": "read"}, wf.name
        for job in doc["jobs"].values():
            # Only the fork-safe comment job (workflow_run: it runs no PR code) may write.
            allowed = ({"contents": "read", "actions": "read", "pull-requests": "write"}
                       if wf.name == "pr-comment.yml" else {"contents": "read"})
            assert "permissions" not in job or job["permissions"] == allowed, wf.name
            for step in job["steps"]:
                uses = step.get("uses", "")
                if uses.startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, wf.name
                if uses.startswith("actions/upload-artifact@"):
                    # reports are uploaded even (above all) when the gate fails
                    reports = "reports" in step.get("name", "")
                    assert reports or step["with"]["name"] == "opinfo-variants", wf.name
                    assert not reports or step["if"] == "always()", wf.name
    gpu = yaml.safe_load((REPO / "examples/workflows/gpu-self-hosted.yml").read_text())
    for wf in WORKFLOWS:  # report.html is written into out_dir: each job uploads that folder
        for job in yaml.safe_load(wf.read_text(encoding="utf-8"))["jobs"].values():
            outs = [s["with"]["out_dir"] for s in job["steps"]
                    if "parity-gate/parity-gate@" in s.get("uses", "")
                    and not s.get("with", {}).get("results")]  # results: mode runs no gate
            uploads = [s for s in job["steps"]
                       if s.get("uses", "").startswith("actions/upload-artifact@")]
            for out in outs:
                assert any(u["with"]["path"] == out and "report.html" in u["name"]
                           for u in uploads), wf.name
    assert [j["runs-on"] for j in gpu["jobs"].values()] == [["self-hosted", "gpu"]]
    assert "parity-gate merge shard-*.json" in (REPO / "examples/workflows/sharded.yml"
                                                ).read_text()


@pytest.mark.process
def test_dockerfile_targets_and_entrypoint() -> None:
    """Both targets exist and their ENTRYPOINT is a module that really runs (a usage error
    for a stray argument, not an ImportError); the real image build is .ci/container-smoke."""
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert {m.group(1) for m in re.finditer(r"^FROM \S+ AS (\w+)$", text, re.M)} >= {"cpu", "gpu"}
    assert not re.search(r"^(USER|WORKDIR)\b", text, re.M)
    entrypoints = {tuple(json.loads(m.group(1)))
                   for m in re.finditer(r"^ENTRYPOINT (\[.*\])$", text, re.M)}
    assert len(entrypoints) == 1
    (cmd,) = entrypoints
    assert cmd[:2] == ("python", "-m")
    done = subprocess.run([sys.executable, *cmd[1:], "--no-such-flag"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "usage: python -m parity_gate.github.action" in done.stderr
    assert os.access(REPO / ".ci" / "lint-actions", os.X_OK)


# --------------------------------------------------------------------------
# inputs


def test_defaults_apply_to_unset_and_empty_inputs() -> None:
    got = action.read_inputs({"INPUT_FAIL_ON": "  ", "INPUT_SHARD": " 2/4 "})
    assert got["fail_on"] == "regressions"
    assert got["shard"] == "2/4"
    assert got["manifest"] == "parity.yml"
    assert got["container"] == "docker"


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("fail_on", "sometimes", "regressions, any-failure or never"),
    ("shard", "3", "K/N with 1 <= K <= N"),
    ("shard", "5/4", "K/N with 1 <= K <= N"),
    ("shard", "0/4", "K/N with 1 <= K <= N"),
    ("providers", "cpu,gpu", "a comma-separated list of cpu, cuda, tensorrt"),
    ("jobs", "0", "an integer >= 1"),
    ("container", "podman", "docker or none"),
    ("gpu", "yes", "auto, true or false"),
    ("manifest", "--help", "a path to parity.yml"),
    ("forward_env", "HF_TOKEN; rm -rf /", "environment variable names"),
    ("export_cache_max_age", "30", "never, or an age: a number and one of s, m, h, d, w"),
])
def test_bad_input_names_the_input_and_what_was_expected(name: str, value: str,
                                                         expected: str) -> None:
    with pytest.raises(action.InputError) as err:
        action.read_inputs({action.input_env(name): value})
    (problem,) = err.value.problems
    assert problem.startswith(f"{name}: got {value!r}")
    assert expected in problem


def test_bad_input_exits_2_with_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    env = runner_env(tmp_path, tmp_path, fail_on="sometimes")
    monkeypatch.setattr(os, "environ", env)
    assert action.main([]) == 2
    out = capfd.readouterr().out
    (note,) = parse_annotations(out)
    assert note["level"] == "error"
    assert note["message"] == ("fail_on: got 'sometimes' (expected regressions, any-failure "
                               "or never)")
    assert parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text()) == {"result": "error"}


def test_command_line_passes_optional_flags_only_when_given(tmp_path: Path) -> None:
    env = {"GITHUB_WORKSPACE": str(tmp_path), "RUNNER_TEMP": str(tmp_path / "t")}
    inputs = action.read_inputs({})
    paths = action.resolve_paths(inputs, env)
    cmd = action.build_command(inputs, paths)
    assert cmd[:5] == [sys.executable, "-m", "parity_gate", "run", "parity.yml"]
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "t" / "parity-gate")
    assert cmd[cmd.index("--json") + 1] == str(tmp_path / "t" / "parity-gate" / "results.json")
    assert cmd[cmd.index("--fail-on") + 1] == "regressions"
    for flag in ("--baseline", "--shard", "--providers", "--jobs", "--select"):
        assert flag not in cmd
    inputs = action.read_inputs({"INPUT_BASELINE": "known.yml", "INPUT_SHARD": "2/3",
                                 "INPUT_PROVIDERS": "cpu,cuda", "INPUT_JOBS": "2",
                                 "INPUT_SELECT": "mlp/*, cnn/*\nencoder/*",
                                 "INPUT_OUT_DIR": "reports", "INPUT_FAIL_ON": "never"})
    cmd = action.build_command(inputs, action.resolve_paths(inputs, env))
    pairs = list(itertools.pairwise(cmd))
    for pair in (("--baseline", "known.yml"), ("--shard", "2/3"), ("--providers", "cpu,cuda"),
                 ("--jobs", "2")):
        assert pair in pairs
    assert [b for a, b in pairs if a == "--select"] == ["mlp/*", "cnn/*", "encoder/*"]
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "reports")
    assert cmd[cmd.index("--fail-on") + 1] == "never"


def test_export_cache_goes_to_cache_dir_exports_or_the_workspace(tmp_path: Path) -> None:
    env = {"GITHUB_WORKSPACE": str(tmp_path), "RUNNER_TEMP": str(tmp_path / "t")}

    def cache_flags(**given: str) -> list[str]:
        inputs = action.read_inputs({action.input_env(k): v for k, v in given.items()})
        cmd = action.build_command(inputs, action.resolve_paths(inputs, env))
        return [a for a in cmd if a in ("--cache-dir", "--no-cache")] + (
            [cmd[cmd.index("--cache-dir") + 1]] if "--cache-dir" in cmd else [])

    assert cache_flags() == ["--cache-dir", str(tmp_path / ".parity-cache")]
    assert cache_flags(cache_dir="ci-cache") == ["--cache-dir",
                                                 str(tmp_path / "ci-cache" / "exports")]
    assert cache_flags(cache_dir="/opt/cache") == ["--cache-dir", "/opt/cache/exports"]
    assert cache_flags(export_cache="false", cache_dir="ci-cache") == ["--no-cache"]


def test_export_cache_path_that_is_a_file_is_one_error_before_the_run(tmp_path: Path) -> None:
    (tmp_path / ".parity-cache").write_text("not a folder")
    inputs = action.read_inputs({})
    paths = action.resolve_paths(inputs, {"GITHUB_WORKSPACE": str(tmp_path)})
    assert action.folder_problems(inputs, paths) == [
        f"export_cache: {tmp_path / '.parity-cache'} is a file (expected a folder, or a path "
        "that does not exist yet)"]
    (tmp_path / "ci").write_text("not a folder either")
    inputs = action.read_inputs({"INPUT_CACHE_DIR": "ci"})
    paths = action.resolve_paths(inputs, {"GITHUB_WORKSPACE": str(tmp_path)})
    assert action.folder_problems(inputs, paths) == [  # said once, not again for ci/exports
        f"cache_dir: ci ({tmp_path / 'ci'}) is a file (expected a folder, or a path that does "
        "not exist yet)"]
    assert action.folder_problems(action.read_inputs({"INPUT_EXPORT_CACHE": "false"}),
                                  action.resolve_paths(action.read_inputs(
                                      {"INPUT_EXPORT_CACHE": "false"}),
                                      {"GITHUB_WORKSPACE": str(tmp_path)})) == []


# --------------------------------------------------------------------------
# annotations and outputs


FAILING = [o for o in Outcome if o.failed]


def test_annotations_worst_first_capped_at_ten_with_an_omitted_note() -> None:
    cases = [case(f"m_{o.value}", o, reason=f"{o.value} happened") for o in FAILING]
    cases.append(case("ok", Outcome.PASS))
    notes = action.annotate(report(cases))
    assert len(FAILING) > action.ANNOTATION_LIMIT
    assert len(notes) == action.ANNOTATION_LIMIT
    shown = notes[:-1]
    assert all(n.level == "error" for n in shown)
    want = sorted(FAILING, key=lambda o: (-o.severity, f"m_{o.value}"))
    assert [n.title.split()[2] for n in shown] == [o.value for o in want[:9]]
    assert shown[0].title == "parity-gate: m_crash/float32/images/b4/cpu crash"
    omitted = notes[-1]
    assert omitted.level == "warning"
    assert omitted.message.startswith(f"{len(FAILING) - 9} more failing modules or findings")


def test_one_annotation_per_failing_module_worst_case_first() -> None:
    cases = [CaseResult(CaseKey("enc", "float32", "images", b, "cpu"), o, f"{o.value} at b{b}")
             for b, o in ((2, Outcome.MISMATCH), (10, Outcome.CRASH), (4, Outcome.MISMATCH))]
    cases += [case("cnn", Outcome.TIMEOUT), case("ok", Outcome.PASS)]
    notes = action.annotate(report(cases, findings=[Finding("enc", "training_mode", "train()")]),
                            manifest_file="parity.yml", manifest_lines={"enc": 9, "cnn": 3})
    assert [(n.title, n.line) for n in notes] == [
        ("parity-gate: enc/float32/images/b10/cpu crash (+2 more cases)", 9),
        ("parity-gate: cnn/float32/images/b4/cpu timeout", 3),
        ("parity-gate: enc training_mode", 9),
    ]
    body = notes[0].message
    assert body.startswith("crash at b10")
    assert "also failing: float32/images/b2/cpu (mismatch), float32/images/b4/cpu (mismatch)" \
        in body  # numeric order, each named once
    assert body.count("crash at b10") == 1


def test_non_blocking_failures_and_findings_are_warnings_after_errors() -> None:
    doc = report([case("a", Outcome.MISMATCH), case("b", Outcome.CRASH),
                  case("c", Outcome.EXPORT_ERROR)],
                 findings=[Finding("enc", "training_mode", "left in train()", "error"),
                           Finding("enc", "export_warning", "axis renamed")])
    # As under a baseline: only `a` is a new failure; `b` and `c` are known.
    doc.gate = GateDecision(baseline="parity-baseline.yml", blocking=["a/float32/images/b4/cpu"],
                            rulings=[Ruling("b/float32/images/b4/cpu", "known", "crash",
                                            "known since #12")])
    notes = action.annotate(doc)
    assert [(n.level, n.title) for n in notes] == [
        ("error", "parity-gate: a/float32/images/b4/cpu mismatch"),
        ("error", "parity-gate: enc training_mode"),
        ("warning", "parity-gate: b/float32/images/b4/cpu crash (not blocking)"),
        ("warning", "parity-gate: c/float32/images/b4/cpu export_error (not blocking)"),
        ("warning", "parity-gate: enc export_warning"),
    ]
    assert notes[2].message.endswith("baseline: known since #12")
    never = action.annotate(report([case("a", Outcome.MISMATCH)], fail_on="never"))
    assert [n.level for n in never] == ["warning"]


def test_annotation_escaping_and_message_content() -> None:
    doc = report([case("m", Outcome.MISMATCH, reason="100% off,\r\nsee: below", comparisons=5)])
    (note,) = action.annotate(doc, manifest_file="cfg/parity,v2.yml",
                                 manifest_lines={"m": 7})
    line = note.render()
    assert line.startswith("::error file=cfg/parity%2Cv2.yml,line=7,title=parity-gate%3A "
                           "m/float32/images/b4/cpu mismatch::")
    body = line.split("::", 2)[2]
    assert "\n" not in body and "\r" not in body
    assert body.startswith("100%25 off,%0D%0Asee: below%0Aout0: out0: 3/8 elements")
    assert body.endswith("… and 2 more failing outputs")  # 3 outputs listed, then a count
    assert action.escape_data("a%b\r\nc") == "a%25b%0D%0Ac"
    assert action.escape_property("t: a,b%") == "t%3A a%2Cb%25"


def test_a_report_the_model_cannot_read_is_a_clear_error(tmp_path: Path) -> None:
    doc = report([case("a", Outcome.CRASH)]).to_dict()
    doc["cases"][0]["outcome"] = "gpu_hang"  # an outcome from a newer writer
    bad = tmp_path / "results.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"results.json: cases\.0\.outcome: Input should be"):
        read_results(bad)[1]
    doc["schema_version"] = 1
    bad.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="schema_version 1 is not supported"):
        read_results(bad)[1]


def test_outputs_are_multiline_safe(tmp_path: Path) -> None:
    out = tmp_path / "out"
    action.write_outputs(str(out), {"result": "fail", "note": "line1\nline2=x\nEOF"})
    action.write_outputs(str(out), {"regressions": "3"})
    assert parse_outputs(out.read_text()) == {"result": "fail", "note": "line1\nline2=x\nEOF",
                                              "regressions": "3"}


def test_outputs_count_blocking_and_failing_cases(tmp_path: Path) -> None:
    doc = report([case("a", Outcome.MISMATCH), case("b", Outcome.CRASH),
                  case("c", Outcome.PASS), case("d", Outcome.SKIPPED)])
    doc.gate = GateDecision(blocking=["a/float32/images/b4/cpu"])
    paths = action.Paths(tmp_path, tmp_path / "out", None)
    paths.out_dir.mkdir()
    paths.json.write_text("{}")
    got = action.outputs("fail", doc, paths)
    assert got["regressions"] == "1"
    assert got["failures"] == "2"
    assert got["json_path"] == str(paths.json)
    assert got["junit_path"] == ""  # not written
    assert got["out_dir"] == str(paths.out_dir)


def test_module_lines_point_at_module_entries_only() -> None:
    text = (REPO / "parity_gate" / "example" / "parity.yml").read_text(encoding="utf-8")
    lines = action.module_lines(text)
    numbered = text.splitlines()
    assert set(lines) == {"cnn", "encoder", "mlp"}
    for module, number in lines.items():
        assert re.match(rf"\s*- name: {module}$", numbered[number - 1])
    assert "x" not in lines  # inputs' `- name:` entries are not modules


def test_module_lines_point_at_the_entry_whatever_its_key_order() -> None:
    text = ("fixtures: {f: {kind: random, inputs: {x: {shape: [batch]}}}}\n"
            "modules:\n"
            "  - factory: models:build   # line 3: `name` is not the first key\n"
            "    inputs: [{name: x}]\n"
            "    name: late\n"
            "  - {fixtures: [f], name: 'flow', factory: a:b}\n"  # line 6
            "  - name: first\n"                                   # line 7
            "    factory: a:b\n"
            "seed: 1\n"
            "name: not-a-module\n")
    assert action.module_lines(text) == {"late": 3, "flow": 6, "first": 7}
    assert action.module_lines("modules: [\n") == {}  # unparsable: no lines, no error
    assert action.module_lines("- just a list\n") == {}
    assert action.module_lines("modules: {cnn: {factory: a:b}}\n") == {}


# --------------------------------------------------------------------------
# side effects


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it makes root-owned files and "
                    "hands them to another user, as the Docker mode does")
def test_restore_ownership_hands_root_files_back(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "results.json").write_text("{}")
    (reports / "link").symlink_to("results.json")
    action.restore_ownership([tmp_path], {})  # none mode: no host uid given, nothing changes
    assert os.lstat(reports / "results.json").st_uid == 0
    env = {"PARITY_GATE_HOST_UID": "1001", "PARITY_GATE_HOST_GID": "127"}
    action.restore_ownership([tmp_path], env)
    for path in (tmp_path, reports, reports / "results.json", reports / "link"):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (1001, 127), path
    assert os.stat(reports / "results.json").st_uid == 1001  # the link was not followed away


def test_install_self_keeps_onnxruntime_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def call(cmd: list[str]) -> int:
        calls.append(cmd)
        return 0

    monkeypatch.setattr(install, "_installed", lambda dist: dist == "onnxruntime-gpu")
    monkeypatch.setattr(install.subprocess, "call", call)
    requires = ["torch<2.15,>=2.6", "onnxruntime>=1.20", "pyyaml>=6.0",
                'pytest>=8; extra == "test"']
    monkeypatch.setattr(install.subprocess, "run", lambda *a, **k: SimpleNamespace(
        stdout=json.dumps(requires)))
    assert install.install_self(Path("/opt/action")) == 0
    assert calls[0][-2:] == ["--no-deps", "/opt/action"]
    assert calls[1][-2:] == ["torch<2.15,>=2.6", "pyyaml>=6.0"]
    calls.clear()
    monkeypatch.setattr(install, "_installed", lambda dist: False)
    assert install.install_self(Path("/opt/action")) == 0
    assert len(calls) == 1 and calls[0][-1] == "/opt/action" and "--no-deps" not in calls[0]


@pytest.mark.process
def test_failing_install_command_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    env = runner_env(tmp_path, tmp_path, install="echo building; exit 3")
    monkeypatch.setattr(os, "environ", env)
    assert action.main([]) == 2
    out = capfd.readouterr().out
    (note,) = parse_annotations(out)
    assert note["title"] == "parity-gate: install failed (exit code 3)"
    assert note["message"].startswith("install: the command exited with 3")
    assert parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text()) == {"result": "error"}


def gate_command(stdout: str) -> list[str]:
    """The `parity-gate run` command line the entrypoint printed before starting it."""
    (line,) = [line for line in stdout.splitlines()
               if line.startswith("parity-gate: ") and " -m parity_gate run " in line]
    return shlex.split(line.removeprefix("parity-gate: "))


@pytest.mark.process
@pytest.mark.parametrize("cache_dir", ["", "ABSOLUTE"])
def test_gate_runs_with_the_export_cache_folder(tmp_path: Path, cache_dir: str) -> None:
    """The real entrypoint and gate: `--cache-dir` names `cache_dir`/exports, else
    .parity-cache in the workspace (what `actions/cache` keeps); the folder exists, made by
    the runner's user, before the gate starts (here the gate stops at the manifest)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "parity.yml").write_text("version: 1\nmodules: 5\n", encoding="utf-8")
    cache_dir = str(tmp_path / "outside") if cache_dir == "ABSOLUTE" else cache_dir
    env = runner_env(tmp_path, workspace, cache_dir=cache_dir)
    env["PARITY_GATE_CACHE_DIR"] = str(tmp_path / "not-this")  # the input wins over the env
    proc = run_entrypoint(env, workspace)
    assert proc.returncode == 2, proc.stderr
    cmd = gate_command(proc.stdout)
    expected = (workspace / ".parity-cache" if not cache_dir
                else (workspace / cache_dir) / "exports")
    assert cmd[cmd.index("--cache-dir") + 1] == str(expected)
    assert "--no-cache" not in cmd
    assert expected.is_dir() and not (tmp_path / "not-this").exists()


@pytest.mark.process
@pytest.mark.parametrize("max_age", ["", "never", "12h"])
def test_the_export_cache_is_pruned_after_the_run(tmp_path: Path, max_age: str) -> None:
    """A cache `actions/cache` carries from run to run stays bounded: after the gate, the
    real `cache prune` removes entries unused for `export_cache_max_age` (default 30d),
    whatever the run's result; `never` keeps everything."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "parity.yml").write_text("version: 1\nmodules: 5\n", encoding="utf-8")
    entries = {}
    store = ExportCache(workspace / ".parity-cache")
    for digit, name, age_days in (("1", "old", 40.0), ("2", "day", 1.0), ("3", "new", 0.0)):
        stored = store.put("export", digit * 64, {"model.onnx": b"x" * 1000})
        assert stored is not None
        when = time.time() - age_days * 86400
        os.utime(stored.file("entry.json"), (when, when))
        entries[name] = stored.folder
    env = runner_env(tmp_path, workspace, export_cache_max_age=max_age)
    proc = run_entrypoint(env, workspace)
    assert proc.returncode == 2, proc.stderr  # the gate stopped at the manifest
    kept = {name for name, entry in entries.items() if entry.is_dir()}
    assert kept == {"": {"day", "new"}, "never": {"old", "day", "new"},
                    "12h": {"new"}}[max_age], proc.stderr
    removed = 3 - len(kept)
    if max_age != "never":
        assert f"parity-gate cache: removed {removed} entries" in proc.stderr
    assert [n["title"] for n in parse_annotations(proc.stdout)] == [
        "parity-gate: run failed (usage error)"]  # the prune adds no annotation


@pytest.mark.process
def test_run_usage_error_is_reported(tmp_path: Path) -> None:
    (tmp_path / "parity.yml").write_text("version: 1\nmodules: 5\n", encoding="utf-8")
    env = runner_env(tmp_path, tmp_path)
    proc = run_entrypoint(env, tmp_path)
    assert proc.returncode == 2, proc.stderr
    outputs = parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
    assert outputs["result"] == "error"
    assert outputs["json_path"] == ""
    (note,) = parse_annotations(proc.stdout)
    assert note["title"] == "parity-gate: run failed (usage error)"
    assert "parity.yml" in note["message"]
    assert "run failed" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()


# --------------------------------------------------------------------------
# end to end: the bundled example, and a manifest that fails


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    tmp = tmp_path_factory.mktemp("example")
    workspace = tmp / "workspace"
    shutil.copytree(REPO / "parity_gate" / "example", workspace / "fixtures",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = runner_env(tmp, workspace, manifest="fixtures/parity.yml",
                     install="pwd > install-cwd.txt", fail_on="any-failure")
    proc = run_entrypoint(env, workspace)
    return SimpleNamespace(proc=proc, env=env, workspace=workspace,
                           outputs=parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text()))


def test_example_passes_and_sets_outputs(example_run: SimpleNamespace) -> None:
    proc, outputs = example_run.proc, example_run.outputs
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert outputs["result"] == "pass"
    assert outputs["regressions"] == "0"
    assert outputs["failures"] == "0"
    cmd = gate_command(proc.stdout)
    assert cmd[cmd.index("--cache-dir") + 1] == str(example_run.workspace / ".parity-cache")
    out_dir = Path(example_run.env["RUNNER_TEMP"]) / "parity-gate"
    assert outputs["out_dir"] == str(out_dir)
    assert outputs["json_path"] == str(out_dir / "results.json")
    assert outputs["junit_path"] == str(out_dir / "junit.xml")
    assert outputs["summary_path"] == str(out_dir / "summary.md")
    doc = json.loads(Path(outputs["json_path"]).read_text())
    assert doc["verdict"]["blocks"] is False and doc["verdict"]["result"] == "pass"
    assert doc["verdict"]["by_outcome"]["pass"] > 0
    assert Path(outputs["junit_path"]).read_text().startswith("<?xml")


def test_example_summary_written_once_and_install_ran_in_workspace(
        example_run: SimpleNamespace) -> None:
    summary = Path(example_run.env["GITHUB_STEP_SUMMARY"]).read_text()
    assert summary.count("## ✅ parity-gate:") == 1
    assert summary.count("parity-gate:") == 1  # not repeated by the action
    cwd = (example_run.workspace / "install-cwd.txt").read_text().strip()
    assert Path(cwd).resolve() == example_run.workspace.resolve()


def test_example_annotations_are_well_formed(example_run: SimpleNamespace) -> None:
    stdout = example_run.proc.stdout
    notes = parse_annotations(stdout)
    assert len(notes) <= action.ANNOTATION_LIMIT
    assert all(n["level"] == "warning" for n in notes)  # findings only: nothing blocks
    for n in notes:
        assert n["file"] == "fixtures/parity.yml"
        assert n["title"].startswith("parity-gate: ")
    # The subprocesses' output ran with workflow commands paused, and resumed after.
    tokens = re.findall(r"^::stop-commands::(\S+)$", stdout, re.M)
    assert len(tokens) == 2  # install and the gate (the prune runs in-process)
    for token in tokens:
        assert f"\n::{token}::\n" in stdout


BAD_MODELS = '''
import torch
from torch import nn


class Noisy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)


def noisy() -> nn.Module:
    return Noisy().eval()


def broken() -> nn.Module:
    raise RuntimeError("factory: 100% broken")
'''

BAD_MANIFEST = '''
version: 1
seed: 0
python_path: [.]
defaults:
  batch_sizes: [2]
  dtypes: [float32]
providers:
  cpu: {required: true}
fixtures:
  vec:
    kind: random
    inputs:
      x: {shape: [batch, 8], distribution: normal}
modules:
  - name: noisy
    factory: bad_models:noisy
    inputs: [{name: x, dynamic: {0: batch}}]
    fixtures: [vec]
  - name: broken
    factory: bad_models:broken
    inputs: [{name: x, dynamic: {0: batch}}]
    fixtures: [vec]
'''


KNOWN = """\
version: 1
known_failures:
  - id: noisy/*
    reason: torch.rand_like cannot match ONNX Runtime's generator
    outcome: mismatch
"""


@pytest.mark.process
def test_failing_manifest_blocks_with_error_annotations(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "gate").mkdir(parents=True)
    (workspace / "gate" / "bad_models.py").write_text(BAD_MODELS, encoding="utf-8")
    (workspace / "gate" / "parity.yml").write_text(textwrap.dedent(BAD_MANIFEST),
                                                   encoding="utf-8")
    (workspace / "gate" / "known.yml").write_text(KNOWN, encoding="utf-8")
    env = runner_env(tmp_path, workspace, manifest="gate/parity.yml", out_dir="reports",
                     baseline="gate/known.yml", shard="1/1")
    proc = run_entrypoint(env, workspace)
    assert proc.returncode == 1, proc.stderr[-3000:]
    outputs = parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())
    assert outputs["result"] == "fail"
    assert outputs["regressions"] == "1"  # noisy is a known failure
    assert outputs["failures"] == "2"
    assert outputs["json_path"] == str(workspace / "reports" / "results.json")
    doc = json.loads(Path(outputs["json_path"]).read_text())
    assert doc["shard"] == "1/1"
    assert doc["gate"]["baseline"].endswith("known.yml")
    notes = parse_annotations(proc.stdout)
    assert [(n["level"], n["title"]) for n in notes] == [
        ("error", "parity-gate: broken/float32/vec/b2/cpu eager_error"),
        ("warning", "parity-gate: noisy/float32/vec/b2/cpu mismatch (not blocking)"),
        # the culprit on its own source line (gate/bad_models.py is in the workspace)
        ("warning", "parity-gate: noisy: culprit aten.rand_like.default (not blocking)"),
        ("warning", "parity-gate: noisy constants-in-forward"),  # torch.rand_like in forward
    ]
    assert notes[2]["file"] == "gate/bad_models.py"
    assert notes[1]["message"].startswith("output0: mismatch:")
    assert "baseline: known failure" in notes[1]["message"]
    assert notes[0]["file"] == "gate/parity.yml"
    assert notes[0]["line"] == str(BAD_MANIFEST[:BAD_MANIFEST.index("- name: broken")]
                                   .count("\n") + 1)
    assert "100% broken" in notes[0]["message"]
    raw = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert "100%25 broken" in raw[0]
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert summary.count("## ❌ parity-gate:") == 1


# --------------------------------------------------------------------------
# action.yml's shell step, with stub docker / nvidia-smi / python


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def run_step(tmp: Path, *, gpu_present: bool = False, cached: bool = False,
             **inputs: str) -> SimpleNamespace:
    """Run action.yml's script as the runner would (bash -eo pipefail FILE)."""
    stubs = tmp / "bin"
    stubs.mkdir(exist_ok=True)
    log = tmp / "calls.log"
    _stub(stubs / "docker", f'''(IFS=$'\\x1f'; echo "docker${{IFS}}$*") >> "{log}"
[[ "$1 $2" == "image inspect" ]] && exit {0 if cached else 1}
exit 0
''')
    if gpu_present:
        _stub(stubs / "nvidia-smi", 'echo "GPU 0: NVIDIA H100 (UUID: GPU-1)"\n')
    _stub(stubs / "fake-python", f'''(IFS=$'\\x1f'
echo "python${{IFS}}PYTHONPATH=${{PYTHONPATH:-}}${{IFS}}$*") >> "{log}"
''')
    workspace = tmp / "ws"
    workspace.mkdir(exist_ok=True)
    spec = yaml.safe_load(ACTION_YML.read_text(encoding="utf-8"))
    defaults = {name: str(i.get("default", "")) for name, i in spec["inputs"].items()}
    env = runner_env(tmp, workspace, **{**defaults, **inputs})
    env["PATH"] = f"{stubs}:/usr/bin:/bin"
    env.pop("PYTHONPATH", None)
    env["GITHUB_ACTION_PATH"] = str(REPO)
    script = tmp / "step.sh"
    script.write_text(spec["runs"]["steps"][0]["run"], encoding="utf-8")
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          env=env, capture_output=True, text=True, timeout=60)
    calls = [line.split("\x1f") for line in log.read_text().splitlines()] if log.exists() else []
    return SimpleNamespace(proc=proc, env=env, calls=calls, workspace=workspace,
                           outputs=parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text()))


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@needs_bash
@pytest.mark.process
def test_step_detects_gpu_and_runs_the_gpu_image(tmp_path: Path) -> None:
    step = run_step(tmp_path, gpu_present=True)
    assert step.proc.returncode == 0, step.proc.stderr
    build, = [c for c in step.calls if c[1] == "build"]
    assert build[build.index("--target") + 1] == "gpu"
    assert build[-1] == str(REPO)
    image = build[build.index("--tag") + 1]
    assert re.fullmatch(r"parity-gate-action:gpu-[0-9a-f]{16}", image)
    run, = [c for c in step.calls if c[1] == "run"]
    assert run[-1] == image
    assert run[run.index("--gpus") + 1] == "all"
    assert run[run.index("--workdir") + 1] == str(step.workspace)
    volumes = [run[i + 1] for i, a in enumerate(run) if a == "--volume"]
    temp = step.env["RUNNER_TEMP"]
    # The workspace and RUNNER_TEMP (holding the event file, GITHUB_OUTPUT and the summary)
    # at their own paths; nothing mounted twice.
    assert volumes == [f"{step.workspace}:{step.workspace}", f"{temp}:{temp}"]
    forwarded = {run[i + 1] for i, a in enumerate(run) if a == "--env"}
    assert {"GITHUB_EVENT_PATH", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE",
            "GITHUB_EVENT_NAME", "RUNNER_TEMP", "CI", "INPUT_FAIL_ON", "INPUT_MANIFEST",
            "PARITY_GATE_HOST_UID", "PARITY_GATE_HOST_GID"} <= forwarded
    assert "PATH" not in forwarded and "HOME" not in forwarded


@needs_bash
@pytest.mark.process
def test_step_cpu_image_is_reused_and_outside_paths_mounted(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "cache"
    step = run_step(tmp_path, cached=True, gpu="false", cache_dir=str(outside))
    assert step.proc.returncode == 0, step.proc.stderr
    assert not [c for c in step.calls if c[1] == "build"]
    run, = [c for c in step.calls if c[1] == "run"]
    assert "--gpus" not in run
    assert re.fullmatch(r"parity-gate-action:cpu-[0-9a-f]{16}", run[-1])
    assert f"{outside}:{outside}" in run and outside.is_dir()


@needs_bash
@pytest.mark.process
def test_step_pulls_a_given_image(tmp_path: Path) -> None:
    step = run_step(tmp_path, gpu_present=True, image="ghcr.io/acme/parity-gate:1-{target}",
                    forward_env="PIP_INDEX_URL  HF_TOKEN")
    assert step.proc.returncode == 0, step.proc.stderr
    assert ["docker", "pull", "ghcr.io/acme/parity-gate:1-gpu"] in step.calls
    assert not [c for c in step.calls if c[1] == "build"]
    run, = [c for c in step.calls if c[1] == "run"]
    assert run[-1] == "ghcr.io/acme/parity-gate:1-gpu"
    forwarded = {run[i + 1] for i, a in enumerate(run) if a == "--env"}
    assert {"PIP_INDEX_URL", "HF_TOKEN"} <= forwarded


@needs_bash
@pytest.mark.process
def test_step_without_docker_installs_into_the_given_python(tmp_path: Path) -> None:
    step = run_step(tmp_path, container="none", python=str(tmp_path / "bin" / "fake-python"))
    assert step.proc.returncode == 0, step.proc.stderr
    assert not [c for c in step.calls if c[0] == "docker"]
    assert step.calls == [
        ["python", f"PYTHONPATH={REPO}", "-m", "parity_gate.github.action", "install-self",
         str(REPO)],
        ["python", "PYTHONPATH=", "-m", "parity_gate.github.action"],
    ]


@needs_bash
@pytest.mark.process
def test_step_rejects_a_bad_forward_env_input(tmp_path: Path) -> None:
    step = run_step(tmp_path, forward_env="OK *")
    assert step.proc.returncode == 2
    assert "forward_env: expected environment variable names" in step.proc.stdout
    assert step.calls == []


@needs_bash
@pytest.mark.process
def test_step_rejects_a_bad_container_input(tmp_path: Path) -> None:
    step = run_step(tmp_path, container="podman")
    assert step.proc.returncode == 2
    assert step.proc.stdout.strip() == ("::error title=parity-gate%3A invalid input::"
                                        "container: expected docker or none")
    assert step.outputs == {"result": "error"}
    assert step.calls == []
