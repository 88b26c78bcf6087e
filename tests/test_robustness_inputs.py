"""A gate that never passes by accident or leaks a token, and refuses bad paths and files:
the pure lane (no process starts: a refused run must refuse before its workers)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from parity_gate.cli import main
from parity_gate.errors import UserError
from parity_gate.gate.decision import GatePolicy, apply
from parity_gate.gate.merge import merge_runs
from parity_gate.github import action
from parity_gate.model.findings import Finding
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.report import journal, markdown
from parity_gate.report.secrets import Masker, secret_values
from parity_gate.report.write import ReportPaths, atomic_write, run_json, write_all

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "data" / "robust" / "parity.yml"
TOKEN = "ghp_0123456789abcdefTOKENVALUE"


def case(module: str, outcome: Outcome = Outcome.PASS, batch: int = 2, **kw: Any) -> CaseResult:
    return CaseResult(CaseKey(module, "float32", "vec", batch, "cpu"), outcome, **kw)


def results(tmp_path: Path, name: str = "r.json", **kw: Any) -> Path:
    run = RunResult(cases=[case("m"), case("m", batch=3)], tool_version="t",
                    manifest={"path": "p", "sha256": "s"}, **kw)
    path = tmp_path / name
    path.write_bytes(run_json(run))
    return path


def one_annotation(workspace: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str], **inputs: str) -> str:
    """The Action's entrypoint with only these inputs: exit 2, one ::error line (returned),
    no traceback, and the `result` output `error`."""
    outputs = workspace / "outputs"
    for key in list(os.environ):
        if key.startswith("INPUT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(workspace))
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    for name, value in inputs.items():
        monkeypatch.setenv(f"INPUT_{name}", value)
    assert action.main([]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("::error")]
    assert len(lines) == 1 and "Traceback" not in out + err, out + err
    assert outputs.read_text().split("\n")[1] == "error"  # result<<delimiter, error, ...
    return lines[0]


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


# ------------------------------------------------------------------ output paths


def test_out_that_is_a_file_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "reports"
    out.write_text("not a folder")
    line = one_error(capsys, ["run", str(MANIFEST), "--out", str(out)])
    assert line == (f"--out: {out} is a file (expected a folder for the reports, or a path "
                    "that does not exist yet)")
    assert out.read_text() == "not a folder"


@pytest.mark.parametrize("where", ["/sys/kernel", "/sys/parity-gate-robustness/out"])
def test_out_folder_that_cannot_be_written_or_created_is_refused(
        where: str, capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no sysfs here")
    line = one_error(capsys, ["run", str(MANIFEST), "--out", where])
    verb = "write in" if Path(where).is_dir() else "create"
    assert line.startswith(f"--out: cannot {verb} {where}: "), line
    assert line.endswith("(expected a folder this user can write)")


def _device(tmp_path: Path) -> Path:
    dev = tmp_path / "null-device"
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a real /dev/null node
    except PermissionError:
        pytest.skip("cannot make a device node here")
    return dev


@pytest.mark.parametrize("kind", ["symlink", "fifo", "device", "devnull-link"])
def test_a_link_or_special_file_at_a_report_path_is_refused_and_left_alone(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "results-target"  # not *.json: the session's schema check reads those
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    if kind == "symlink":
        target.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        target = _device(tmp_path)
    else:
        target.symlink_to("/dev/null")
    before = os.lstat(target)
    what = {"symlink": "a symbolic link", "fifo": "a FIFO", "device": "a character device",
            "devnull-link": "a symbolic link"}[kind]
    line = one_error(capsys, ["run", str(MANIFEST), "--out", str(tmp_path / "out"),
                              "--json", str(target)])
    assert line == (f"--json: {target} is {what} (expected a regular file or a new path; "
                    "reports never follow links or replace special files)")
    with pytest.raises(UserError, match="never follow links"):  # the writer refuses too
        atomic_write(target, b"{}")
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode,
                                                            before.st_rdev)
    assert victim.read_text() == "keep me"
    assert Path("/dev/null").is_char_device()
    assert not list(tmp_path.glob(".results-target.*"))  # no temporary file left behind


def test_write_all_writes_the_other_reports_when_one_target_is_special(tmp_path: Path) -> None:
    paths = ReportPaths.in_folder(tmp_path)
    os.mkfifo(tmp_path / "junit.xml")
    with pytest.raises(UserError) as err:
        write_all(RunResult(cases=[case("m")]), paths)
    assert err.value.problems == [f"{tmp_path / 'junit.xml'} is a FIFO (expected a regular "
                                  "file or a new path; reports never follow links or replace "
                                  "special files)"]
    assert stat.S_ISFIFO(os.lstat(tmp_path / "junit.xml").st_mode)
    assert json.loads((tmp_path / "results.json").read_text())["cases"][0]["id"]
    assert (tmp_path / "summary.md").is_file() and (tmp_path / "report.html").is_file()


# ------------------------------------------------------------------ verdicts


def test_interrupted_run_never_passes_and_counts_planned_against_finished() -> None:
    run = RunResult(cases=[case("m"), case("m", batch=3)], interrupted=True, planned=19)
    run.gate = apply(run, GatePolicy())
    assert run.gate.passed  # nothing that ran failed...
    v = run.verdict
    assert (v.result, v.blocks, v.finished, v.planned) == ("interrupted", True, 2, 19)
    assert v.why == "interrupted: 2 of 19 planned cases finished; the others never ran"
    assert "interrupted — 2 of 19 planned cases finished" in markdown.render(run).splitlines()[0]


def test_merged_interrupted_shards_keep_the_planned_count() -> None:
    a = RunResult(cases=[case("a")], interrupted=True, planned=10, shard="1/2")
    b = RunResult(cases=[case("b")], planned=3, shard="2/2")
    merged = merge_runs([a, b])
    merged.gate = apply(merged, GatePolicy())
    assert merged.planned == 13
    assert merged.verdict.why.startswith("interrupted: 2 of 13 planned")


@pytest.mark.parametrize("allow, fail_on, result", [(False, None, "fail"), (True, None, "pass"),
                                                    (False, "never", "pass")])
def test_all_skipped_run_blocks_unless_the_user_accepts_it(
        allow: bool, fail_on: str | None, result: str) -> None:
    run = RunResult(cases=[case("m", Outcome.SKIPPED, reason="no cuda")], planned=1)
    run.gate = apply(run, GatePolicy(fail_on=fail_on, allow_all_skipped=allow))
    assert run.verdict.result == result
    assert run.gate.all_skipped and run.gate.allow_all_skipped is allow
    doc = run.to_dict()
    assert doc["gate"]["all_skipped"] is True
    if result == "fail":
        assert doc["verdict"]["why"].startswith("no case ran (1 skipped): nothing was checked")
    head = markdown.render(run).splitlines()[0]
    assert head.startswith("## ❌ parity-gate: no case ran — blocking" if result == "fail"
                           else "## ✅ parity-gate: no case ran — allowed")


# ------------------------------------------------------------------ the journal


def test_journal_reads_back_a_torn_last_line_and_keeps_the_last_record_per_case(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    head = RunResult(tool_version="t", planned=5, manifest={"path": "p", "sha256": "s"})
    planned = ["m/float32/vec/b2/cpu", "m/float32/vec/b3/cpu"]
    j = journal.Journal(path, head, {"fail_on": "any-failure"}, planned)
    j.case(case("m", Outcome.MISMATCH, reason="first"))
    j.finding(Finding("m", "training_mode", "was training"))
    j.case(case("m", Outcome.MISMATCH, reason="again, localised"))
    j.case(case("m", batch=3))
    j.close()
    with open(path, "a") as fh:
        fh.write('{"case": {"key": {"modu')  # the kill landed mid-line
    replay = journal.read(path)
    assert [c.reason for c in replay.run.cases] == ["again, localised", ""]
    assert replay.run.interrupted and replay.run.planned == 5 and not replay.ended
    assert replay.run.findings == [Finding("m", "training_mode", "was training")]
    assert replay.policy == {"fail_on": "any-failure"} and replay.universe == planned
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def test_journal_errors_are_located(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    head = RunResult(planned=1)
    j = journal.Journal(path, head, {}, [])
    j.close()
    with open(path, "a") as fh:
        fh.write('{"case": {"key": 3}}\n{"end": {}}\n')
    with pytest.raises(UserError, match=r"journal.jsonl:2: key: "):
        journal.read(path)
    path.write_text('{"case": 1}\n')
    with pytest.raises(UserError, match=r"journal.jsonl:1: not a parity-gate journal header"):
        journal.read(path)


def test_an_unfinished_journal_is_kept_aside_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal.Journal(path, RunResult(planned=3), {}, []).case(case("m"))
    text = path.read_text()
    kept = journal.keep_unfinished(path)
    assert kept is not None and kept.read_text() == text and not path.exists()
    finished = journal.Journal(path, RunResult(planned=1), {}, [])
    finished.end(RunResult())
    assert journal.keep_unfinished(path) is None and path.exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------ malformed JSON inputs


BAD: dict[str, tuple[bytes | None, str]] = {
    "invalid-utf8": (b'{"schema_version": 2, "cases": [], "x": "\xff"}',
                     r":1:42: invalid UTF-8 \(byte 0xff;"),
    "control-char": (b'{"schema_version": 2,\n "cases": []\x1b}',
                     r":2:13: control character U\+001B"),
    "duplicate-key": (b'{"schema_version": 2,\n "cases": [],\n "cases": []}',
                      r":3: duplicate key 'cases' \(a merge conflict\?"),
    "binary": (b"PK\x03\x04\x00\x00zip", r":1:5: binary content \(a NUL byte;"),
    "wrong-type": (b'{"schema_version": 2, "cases": [{"key": {"module": "m", "dtype": "f", '
                   b'"inputs": "v", "batch_size": "two", "provider": "cpu"}, '
                   b'"outcome": "pass"}]}',
                   r": cases\.0\.key\.batch_size: Input should be a valid integer"),
    "directory": (None, r": is a folder \(expected the JSON report"),
    "truncated": (b'{"schema_version": 2, "cases": [', r":1:33: invalid JSON: Expecting value"),
    "empty": (b"", r":1:1: invalid JSON: Expecting value"),
    "deep-nesting": (b"[" * 100_000, r":1:1: nesting too deep to read"),
}


@pytest.mark.parametrize("use", ["merge", "compare-to", "timings"])
@pytest.mark.parametrize("kind", list(BAD))
def test_malformed_json_inputs_are_one_located_line(
        kind: str, use: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content, expected = BAD[kind]
    bad = tmp_path / "bad-results"  # not *.json: the session's schema check reads those
    if content is None:
        bad.mkdir()
    else:
        bad.write_bytes(content)
    good = results(tmp_path)
    argv = {"merge": ["merge", str(bad), str(good), "--out", str(tmp_path / "o")],
            "compare-to": ["run", str(MANIFEST), "--compare-to", str(bad),
                           "--out", str(tmp_path / "o")],
            "timings": ["run", str(MANIFEST), "--shard", "1/2", "--timings", str(bad),
                        "--out", str(tmp_path / "o")]}[use]
    line = one_error(capsys, argv)
    assert line.startswith(str(bad)), line
    assert re.search(expected, line), line
    assert not (tmp_path / "o").exists()  # nothing ran, nothing was written


@pytest.mark.parametrize("kind", ["duplicate-key", "deep-nesting", "invalid-utf8", "binary"])
def test_a_malformed_results_file_for_the_github_steps_is_located(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The Action's `results` input and `comment`/`upstream --results` read results the way
    `merge` does: a merge conflict's duplicate key is no pass, deep nesting no traceback."""
    content, expected = BAD[kind]
    bad = tmp_path / "bad-results"
    bad.write_bytes(content)
    for command in ("comment", "upstream"):
        extra = ["--repo", "acme/models", "--pr", "7"] if command == "comment" else []
        line = one_error(capsys, [command, "--results", str(bad), *extra])
        assert line.startswith(str(bad)) and re.search(expected, line), line
    line = one_annotation(tmp_path, monkeypatch, capsys, RESULTS="bad-results")
    assert re.search(expected, line), line


# ------------------------------------------------------------------ malformed YAML inputs

BASELINE = b"version: 1\nknown_failures:\n  - id: first/*\n    reason: known\n"
LAUGHS = b"a: &a [x, x, x, x, x, x, x, x, x, x]\n" + b"".join(
    b"%c: &%c [%s]\n" % (c, c, b", ".join([b"*%c" % (c - 1)] * 10)) for c in b"bcdefg")

# kind → (how the good file is spoiled, what the one line says)
YAML_BAD: dict[str, tuple[Any, str]] = {
    "invalid-utf8": (lambda t: t.replace(b"version: 1", b"version: 1 # caf\xe9"),
                     r":1:17: invalid UTF-8 \(byte 0xe9;"),
    "control-char": (lambda t: t.replace(b"version: 1", b"version: 1\x1b"),
                     r":1:11: invalid YAML: unacceptable character '\\x1b'"),
    "duplicate-key": (lambda t: t.replace(b"version: 1\n", b"version: 1\nversion: 1\n"),
                      r":2:1: version: duplicate key \(expected each key once\)"),
    "recursive-alias": (lambda t: t + b"x: &loop [1, *loop]\n",
                        r":\d+:4: recursive alias \(an anchored node contains an alias of"),
    "exponential-alias": (lambda t: t + LAUGHS,
                          r":\d+:4: aliases add more than 100000 nodes under this node"),
    "binary": (lambda t: b"\x89PNG\r\n\x1a\n\x00\x00\x00", r":3:1: binary content \(a NUL byte;"),
    "deep-nesting": (lambda t: b"[" * 100_000, r":1:\d+: invalid YAML: exceeded maximum nesting"),
    "wrong-type": (None, r": (defaults\.timeout_s: got list \(expected a number\)|"
                         r"known_failures\[0\]\.reason: got list \(expected a string\))"),
    "directory": (None, r": is a folder \(expected a"),
    "empty": (lambda t: b"", r":1:1: \(top level\): expected a mapping with `fixtures`"),
}


@pytest.mark.parametrize("file", ["manifest", "baseline"])
@pytest.mark.parametrize("kind", list(YAML_BAD))
def test_malformed_yaml_inputs_are_one_located_line(
        kind: str, file: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every malformed kind, for the manifest (`check`) and the baseline (`merge
    --baseline`): exit 2, one line naming the file (and line:col where there is one)."""
    if file == "baseline" and kind == "empty":
        pytest.skip("an empty baseline is a valid one: no known failures (it can only block)")
    spoil, expected = YAML_BAD[kind]
    good = MANIFEST.read_bytes() if file == "manifest" else BASELINE
    bad = tmp_path / ("parity.yml" if file == "manifest" else "parity-baseline.yml")
    if kind == "directory":
        bad.mkdir()
    elif kind == "wrong-type":
        bad.write_bytes(good.replace(b"timeout_s: 120", b"timeout_s: [1]")
                        .replace(b"reason: known", b"reason: [1]"))
    else:
        bad.write_bytes(spoil(good))
    if file == "manifest":
        (tmp_path / "models.py").write_text((MANIFEST.parent / "models.py").read_text())
        argv = ["check", str(bad)]
    else:
        argv = ["merge", str(results(tmp_path)), "--baseline", str(bad),
                "--out", str(tmp_path / "o")]
    line = one_error(capsys, argv)
    assert line.startswith(f"{bad}:"), line
    assert re.search(expected, line), line


# ------------------------------------------------------------------ secrets


def test_secret_values_known_suffixed_and_listed() -> None:
    env = {"GITHUB_TOKEN": TOKEN, "MY_API_SECRET": "s3cr3t-value-long", "HF_KEY": "hf_abcdefgh12",
           "PARITY_GATE_MASK_ENV": "HF_KEY", "SHORT_TOKEN": "abc", "PATH": "/usr/bin:/bin"}
    assert sorted(secret_values(env)) == sorted([TOKEN, "s3cr3t-value-long", "hf_abcdefgh12"])
    m = Masker(secret_values(env))
    assert m.text(f"a {TOKEN} b") == "a *** b"
    assert m.tree({"k": [f"x{TOKEN}"], TOKEN: 1}) == {"k": ["x***"], "***": 1}


def test_every_report_masks_the_token_values(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INPUT_UPSTREAM_TOKEN", TOKEN)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    run = RunResult(cases=[case("m", Outcome.CRASH, reason=f"died near {TOKEN}",
                                detail=f"factory printed {TOKEN} <&>\n")],
                    findings=[Finding("m", "note", f"saw {TOKEN}")])
    run.gate = apply(run, GatePolicy())
    write_all(run, ReportPaths.in_folder(tmp_path))
    j = journal.Journal(tmp_path / "journal.jsonl", run, {}, [])
    j.case(run.cases[0])
    j.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["journal.jsonl", "junit.xml", "report.html", "results.json", "summary.md"]
    for path in tmp_path.iterdir():
        text = path.read_text()
        assert TOKEN not in text, path
        assert "***" in text, path
    assert run.cases[0].detail.startswith(f"factory printed {TOKEN}")  # the run itself kept


# ------------------------------------------------------------------ the Action


@pytest.mark.parametrize("name", ["out_dir", "cache_dir"])
def test_action_folder_input_that_is_a_file_is_one_annotation_exit_2(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").write_text("a file")
    line = one_annotation(tmp_path, monkeypatch, capsys, **{name.upper(): "taken"})
    assert f"{name}: taken ({tmp_path / 'taken'}) is a file (expected a folder" in line


def test_action_passes_allow_all_skipped() -> None:
    inputs = action.read_inputs({"INPUT_ALLOW_ALL_SKIPPED": "true"})
    paths = action.Paths(Path("/w"), Path("/w/out"), None)
    assert "--allow-all-skipped" in action.build_command(inputs, paths)
    assert "--allow-all-skipped" not in action.build_command(action.read_inputs({}), paths)


def test_ownership_fix_up_re_owns_only_what_the_run_made(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make root-owned files")
    mine = tmp_path / "users-own-root-file"
    mine.write_text("root made this before the run")
    snap = action.snapshot([tmp_path])
    made = tmp_path / "out" / "results.json"
    made.parent.mkdir()
    made.write_text("{}")
    action.restore_ownership([tmp_path], {"PARITY_GATE_HOST_UID": "1001",
                                          "PARITY_GATE_HOST_GID": "127"}, snap)
    assert os.lstat(mine).st_uid == 0  # was there before: left as it was
    assert os.lstat(tmp_path).st_uid == 0
    for path in (made, made.parent):
        assert (os.lstat(path).st_uid, os.lstat(path).st_gid) == (1001, 127), path


def test_stale_worker_folders_of_dead_gates_are_removed(tmp_path: Path) -> None:
    from parity_gate.engine.pool import FOLDER_PREFIX, remove_stale_folders

    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has it
    stale = tmp_path / f"{FOLDER_PREFIX}{dead}-abc"
    (stale / "worker-1.log.tmp").mkdir(parents=True)
    live = tmp_path / f"{FOLDER_PREFIX}{os.getppid()}-def"
    live.mkdir()
    assert remove_stale_folders(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists()
