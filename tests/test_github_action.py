"""The Action's entrypoint end to end against local GitHub servers: pull_request and
workflow_run events, the post step (upstream search + sticky comment), faults, and the
tokens reaching only the code that talks to GitHub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from github_server import FakeGitHub, Item
from test_github_upstream import make_run, op_case

from parity_gate.report.write import run_json

pytestmark = pytest.mark.process

TOKEN = "ghs_REPOtoken0123456789abcdefABCDEFxyz"
UP_TOKEN = "ghp_UPSTREAMtoken9876543210zyxwvuZYXW"
REPO = "acme/models"


@pytest.fixture
def servers() -> Iterator[tuple[FakeGitHub, FakeGitHub]]:
    with FakeGitHub(token=TOKEN) as repo, FakeGitHub(token=UP_TOKEN) as up:
        up.items.append(Item("microsoft/onnxscript", 2101, "[torchlib] Fix aten::atan2 for -0",
                             pr=True))
        yield repo, up
        assert repo.errors == [] and up.errors == [], (repo.errors, up.errors)


def _setup(tmp: Path, repo: FakeGitHub, up: FakeGitHub, event: str,
           **inputs: str) -> dict[str, str]:
    ws, temp = tmp / "ws", tmp / "runner-temp"
    (ws / "out").mkdir(parents=True)
    temp.mkdir()
    run = make_run(op_case("atan2", "aten.atan2.default"), op_case("acos", "aten.acos.default"))
    (ws / "out" / "results.json").write_bytes(run_json(run))
    pr = {"pull_request": {"number": 7, "head": {"sha": "b" * 40, "ref": "feat"},
                           "base": {"repo": {"full_name": REPO}}}}
    payload = pr if event == "pull_request" else {"workflow_run": {
        "head_sha": "b" * 40, "head_branch": "feat", "event": "pull_request",
        "head_repository": {"full_name": "fork/models"}}}
    (temp / "event.json").write_text(json.dumps(payload), encoding="utf-8")
    (ws / "out" / "event.json").write_text(json.dumps(pr), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_"))}
    env.update(GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(ws), RUNNER_TEMP=str(temp),
               GITHUB_REPOSITORY=REPO, GITHUB_EVENT_NAME=event,
               GITHUB_EVENT_PATH=str(temp / "event.json"), GITHUB_API_URL=repo.url,
               GITHUB_SERVER_URL="https://github.com", GITHUB_RUN_ID="42",
               GITHUB_OUTPUT=str(temp / "output"), GITHUB_STEP_SUMMARY=str(temp / "summary"),
               INPUT_OUT_DIR="out", INPUT_COMMENT="always", INPUT_GITHUB_TOKEN=TOKEN,
               INPUT_UPSTREAM="draft", INPUT_UPSTREAM_TOKEN=UP_TOKEN,
               INPUT_UPSTREAM_API_URL=up.url, PARITY_GATE_SEARCH_PER_MINUTE="6000")
    env.update({f"INPUT_{k.upper()}": v for k, v in inputs.items()})
    return env


def _entry(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-m", "parity_gate.github.action", *args],
                          env=env, cwd=env["RUNNER_TEMP"], capture_output=True, text=True,
                          timeout=120)


def _assert_tokens_hidden(proc: subprocess.CompletedProcess[str], tmp: Path) -> None:
    """Each token only on its own `::add-mask::` line (which the runner swallows)."""
    for token in (TOKEN, UP_TOKEN):
        lines = [x for x in proc.stdout.splitlines() if token in x]
        assert lines == [f"::add-mask::{token}"], lines
        assert token not in proc.stderr
        for f in tmp.rglob("*"):
            if f.is_file():
                assert token not in f.read_text(errors="replace"), f


def test_pull_request_post_step_comments_and_searches(tmp_path: Path,
                                                      servers: tuple[FakeGitHub, FakeGitHub]
                                                      ) -> None:
    repo, up = servers
    env = _setup(tmp_path, repo, up, "pull_request")
    proc = _entry(env, "post")
    assert proc.returncode == 0, proc.stderr
    (posted,) = repo.comments[(REPO, 7)]
    assert posted["body"].startswith("<!-- parity-gate:sticky:")
    assert "being fixed in onnxscript#2101 (open PR)" in posted["body"]
    assert "/actions/runs/42" in posted["body"]
    doc = json.loads((tmp_path / "ws" / "out" / "results.json").read_text())
    by_op = {u["op"]["overload"]: u for u in doc["upstream"]}
    assert by_op["aten.atan2.default"]["match"]["number"] == 2101
    # acos(-0.0) loses nothing when run alone: its repro does not reproduce, so no draft
    assert by_op["aten.acos.default"]["draft"] is None
    assert by_op["aten.acos.default"]["not_drafted"].startswith("no repro candidate")
    assert "### Upstream" in (tmp_path / "runner-temp" / "summary").read_text()
    # The comment's URL as GitHub answered it: clickable in the log (no word joiner).
    logged = [ln for ln in proc.stdout.splitlines() if ln.startswith("parity-gate: comment")]
    assert logged == ["parity-gate: comment created (comment: always) "
                      f"https://github.com/{REPO}/pull/7#issuecomment-{posted['id']}"]
    assert posted["html_url"] in logged[0]
    # Each token went only to its own host.
    assert {c.headers.get("authorization") for c in repo.log} == {f"Bearer {TOKEN}"}
    assert {c.headers.get("authorization") for c in up.log} == {f"Bearer {UP_TOKEN}"}
    _assert_tokens_hidden(proc, tmp_path)
    # A second run updates the one comment.
    assert _entry(env, "post").returncode == 0
    assert len(repo.comments[(REPO, 7)]) == 1 and len(repo.calls("comment", "PATCH")) <= 1


def test_workflow_run_job_comments_from_the_uploaded_results(
        tmp_path: Path, servers: tuple[FakeGitHub, FakeGitHub]) -> None:
    repo, up = servers
    repo.add_pull(REPO, 7, "b" * 40, "fork/models", "feat")
    env = _setup(tmp_path, repo, up, "workflow_run", results="out/results.json",
                 event_file="out/event.json", upstream="search")
    gate = _entry(env)  # the gate step: runs nothing, outputs from the uploaded results
    assert gate.returncode == 0, gate.stderr
    assert "result<<" in (tmp_path / "runner-temp" / "output").read_text()
    assert "fail" in (tmp_path / "runner-temp" / "output").read_text()
    proc = _entry(env, "post")
    assert proc.returncode == 0, proc.stderr
    (posted,) = repo.comments[(REPO, 7)]
    assert "onnxscript#2101" in posted["body"]
    assert repo.calls("pull", "GET")  # the PR's head branch was checked
    _assert_tokens_hidden(proc, tmp_path)


def test_github_failures_are_warnings_and_exit_0(tmp_path: Path,
                                                 servers: tuple[FakeGitHub, FakeGitHub]
                                                 ) -> None:
    repo, up = servers
    repo.fail("comments", "403")  # the job lacks `pull-requests: write`
    up.fail("search", "ratelimit", reset_in=3600)
    env = _setup(tmp_path, repo, up, "pull_request")
    before = (tmp_path / "ws" / "out" / "results.json").read_text()
    proc = _entry(env, "post")
    assert proc.returncode == 0
    assert "::warning title=parity-gate%3A GitHub::comment: not posted" in proc.stdout
    assert "rate limit" in proc.stdout
    summary = (tmp_path / "runner-temp" / "summary").read_text()
    assert "### ⚠️ GitHub" in summary and "Resource not accessible by integration" in summary
    after = json.loads((tmp_path / "ws" / "out" / "results.json").read_text())
    assert after["verdict"] == json.loads(before)["verdict"]
    _assert_tokens_hidden(proc, tmp_path)


def test_install_command_never_sees_the_tokens(tmp_path: Path,
                                               servers: tuple[FakeGitHub, FakeGitHub]) -> None:
    repo, up = servers
    env = _setup(tmp_path, repo, up, "pull_request", install='env > "$RUNNER_TEMP/env.txt"',
                 manifest="missing.yml")
    env["GITHUB_TOKEN"] = TOKEN
    env["ACTIONS_RUNTIME_TOKEN"] = "runtime-" + TOKEN[::-1]
    env["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] = "oidc-" + TOKEN[::-1]
    proc = _entry(env)
    assert proc.returncode == 2  # the manifest is missing: the gate never ran
    seen = (tmp_path / "runner-temp" / "env.txt").read_text()
    assert "RUNNER_TEMP=" in seen  # the install ran, in the runner's environment
    assert TOKEN not in seen and UP_TOKEN not in seen and TOKEN[::-1] not in seen
    names = {line.split("=", 1)[0] for line in seen.splitlines() if "=" in line}
    assert not {n for n in names if n.startswith(("INPUT_", "ACTIONS_"))}, names


def test_cli_upstream_then_comment(tmp_path: Path, servers: tuple[FakeGitHub, FakeGitHub]
                                   ) -> None:
    repo, up = servers
    results = tmp_path / "results.json"
    results.write_bytes(run_json(make_run(op_case("atan2", "aten.atan2.default"),
                                          op_case("acos", "aten.acos.default"))))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PARITY_"))}
    env.update(PARITY_GATE_UPSTREAM_TOKEN=UP_TOKEN, GITHUB_TOKEN=TOKEN)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "parity_gate", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    found = cli("upstream", "--results", str(results), "--api-url", up.url,
                "--cache-dir", str(tmp_path / "cache"))
    assert found.returncode == 0, found.stderr
    assert "torch.atan2 loses the sign of zero: being fixed in onnxscript#2101 (open PR)" in \
        found.stdout
    assert "torch.acos loses the sign of zero: no known report; not drafted" in found.stdout
    assert "2 API call(s)" in found.stderr  # one search per defect
    again = cli("upstream", "--results", str(results), "--api-url", up.url, "--search-only",
                "--cache-dir", str(tmp_path / "cache"))
    assert "0 API call(s)" in again.stderr and "2 from the cache" in again.stderr
    posted = cli("comment", "--results", str(results), "--repo", REPO, "--pr", "7",
                 "--api-url", repo.url)
    assert posted.returncode == 0, posted.stderr
    assert "onnxscript#2101" in repo.comments[(REPO, 7)][0]["body"]
    for proc in (found, again, posted):
        assert TOKEN not in proc.stdout + proc.stderr and UP_TOKEN not in proc.stdout + proc.stderr
    missing = cli("comment", "--results", str(tmp_path / "nope.json"), "--repo", REPO,
                  "--pr", "7")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "nope.json: results file not found" in missing.stderr


def test_the_post_steps_job_summary_follows_the_one_rule(tmp_path: Path, capsys) -> None:
    """Appended and masked like every summary; a folder or a link in its place is a
    one-line warning, never a traceback that fails the post step."""
    from parity_gate.github import post

    summary = tmp_path / "summary"
    post._summary({"GITHUB_STEP_SUMMARY": str(summary)}, "### Upstream")
    post._summary({"GITHUB_STEP_SUMMARY": str(summary)}, "more")
    assert summary.read_text() == "### Upstream\nmore\n"
    (tmp_path / "target").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    for bad in (tmp_path, tmp_path / "link"):
        post._summary({"GITHUB_STEP_SUMMARY": str(bad)}, "text")
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "GITHUB_STEP_SUMMARY" in err and "Traceback" not in err
    assert (tmp_path / "target").read_text() == ""
