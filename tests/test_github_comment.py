"""The sticky PR comment and the GitHub client, against a local server speaking GitHub's shapes.

tests/github_server.py validates every response it sends and every request
body it receives against GitHub's OpenAPI description (an excerpt of
@octokit/openapi); each test ends by asserting it found nothing to object to.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from github_server import FakeGitHub

from parity_gate.github import comment
from parity_gate.github.client import ClientSettings, GitHubClient, GitHubError, RateLimited
from parity_gate.github.inputs import COMMENT_MODES
from parity_gate.model.gate import GateDecision
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.report.markdown import render

TOKEN = "ghs_SECRETtoken0123456789abcdefABCDEF"
REPO = "acme/models"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        yield server
        assert server.errors == [], server.errors


def client(gh: FakeGitHub, **kw: object) -> GitHubClient:
    opts = {"backoff_s": 0.01, "write_interval_s": 0.0, "timeout_s": 2.0, **kw}
    return GitHubClient(gh.url, TOKEN, ClientSettings(**opts))  # type: ignore[arg-type]


def make_run(manifest: str = "parity.yml", failing: int = 0, passing: int = 3,
             rows: int = 0) -> RunResult:
    cases = [CaseResult(CaseKey("mlp", "float32", "random", b, "cpu"), Outcome.PASS)
             for b in range(1, passing + 1)]
    cases += [CaseResult(CaseKey(f"m{i:04d}", "float16", "edge", 4, "cpu"), Outcome.MISMATCH,
                         reason="o0: values differ " + "x" * rows)
              for i in range(failing)]
    run = RunResult(cases=cases, manifest={"path": manifest, "sha256": "0"},
                    versions={"torch": "2.13.0"})
    run.gate = GateDecision(blocking=[c.id for c in run.failures], fail_on="any-failure")
    return run


PR = comment.PullRequest(REPO, 7, "a" * 40)


def bodies(gh: FakeGitHub) -> list[str]:
    return [c["body"] for c in gh.comments.get((REPO, 7), [])]


def test_modes_are_the_actions_input_values() -> None:
    assert tuple(m.value for m in comment.Mode) == COMMENT_MODES


def test_sticky_comment_created_then_updated_not_duplicated(gh: FakeGitHub) -> None:
    gh.add_comment(REPO, 7, "LGTM", login="reviewer")
    c = client(gh)
    first = comment.post(c, PR, make_run(failing=2), comment.Mode.ALWAYS, "parity.yml", {})
    assert first.action == "created"
    second = comment.post(c, PR, make_run(failing=0), comment.Mode.ALWAYS, "parity.yml", {})
    assert second.action == "updated"
    texts = bodies(gh)
    assert len(texts) == 2 and texts[0] == "LGTM"          # ours, once, and the reviewer's
    assert "all 3 cases match eager" in texts[1]
    assert len(gh.calls("comments", "POST")) == 1 and len(gh.calls("comment", "PATCH")) == 1
    # Same results again: nothing written at all.
    third = comment.post(c, PR, make_run(failing=0), comment.Mode.ALWAYS, "parity.yml", {})
    assert third.action == "unchanged" and len(gh.calls("comment", "PATCH")) == 1


def test_two_manifests_keep_two_comments(gh: FakeGitHub) -> None:
    c = client(gh)
    for _ in range(2):
        comment.post(c, PR, make_run("a/parity.yml", failing=1), comment.Mode.ALWAYS,
                     "a/parity.yml", {})
        comment.post(c, PR, make_run("b/parity.yml", failing=2), comment.Mode.ALWAYS,
                     "b/parity.yml", {})
    texts = bodies(gh)
    assert len(texts) == 2
    assert "m0000" in texts[0] and "m0001" not in texts[0] and "m0001" in texts[1]


def test_sticky_found_on_a_later_page(gh: FakeGitHub) -> None:
    for i in range(230):
        gh.add_comment(REPO, 7, f"chatter {i}")
    c = client(gh)
    comment.post(c, PR, make_run(failing=1), comment.Mode.ALWAYS, "parity.yml", {})
    comment.post(c, PR, make_run(failing=2), comment.Mode.ALWAYS, "parity.yml", {})
    assert len(bodies(gh)) == 231
    pages = [c.query.get("page", ["1"])[0] for c in gh.calls("comments", "GET")]
    assert pages == ["1", "2", "3"] * 2


def test_someone_elses_comment_with_our_marker_is_not_edited(gh: FakeGitHub) -> None:
    run = make_run(failing=1)
    forged = comment.body(run, "parity.yml", PR, {})
    gh.add_comment(REPO, 7, forged.replace("differ", "are FINE"), login="mallory")
    got = comment.post(client(gh), PR, run, comment.Mode.ALWAYS, "parity.yml", {})
    assert got.action == "created"
    assert "FINE" in bodies(gh)[0] and "FINE" not in bodies(gh)[1]


@pytest.mark.parametrize(("mode", "blocks", "noteworthy", "existing", "same", "want"), [
    ("off", True, True, True, False, "skipped"),
    ("always", False, False, False, False, "created"),
    ("on-change", False, False, False, False, "skipped"),
    ("on-change", True, True, False, False, "created"),
    ("on-change", True, True, True, True, "unchanged"),
    ("on-change", False, False, True, False, "updated"),
    ("on-failure", False, True, False, False, "skipped"),
    ("on-failure", True, True, False, False, "created"),
    ("on-failure", False, False, True, False, "updated"),   # a stale failure is cleared
    ("on-failure", True, True, True, False, "updated"),
])
def test_decide_per_mode(mode: str, blocks: bool, noteworthy: bool, existing: bool, same: bool,
                         want: str) -> None:
    new = comment.STATE.format("1111") + "\nnew body"
    old = (comment.STATE.format("1111" if same else "2222") + "\nold body") if existing else None
    assert comment.decide(comment.Mode(mode), blocks, noteworthy, old, new)[0] == want


def test_on_change_ignores_timing_but_not_outcomes(gh: FakeGitHub) -> None:
    c = client(gh)
    run = make_run(failing=1)
    assert comment.post(c, PR, run, comment.Mode.ON_CHANGE, "k", {}).action == "created"
    run.duration_s = 99.0  # the body differs, the results do not
    assert comment.post(c, PR, run, comment.Mode.ON_CHANGE, "k", {}).action == "unchanged"
    assert comment.post(c, PR, make_run(failing=2), comment.Mode.ON_CHANGE, "k",
                        {}).action == "updated"


def test_body_under_the_limit_keeps_verdict_and_the_tables_head() -> None:
    run = make_run(failing=1200, passing=600, rows=200)
    full = comment.body(run, "parity.yml", PR, {}, limit=10**9)
    assert len(full) > 4 * comment.COMMENT_LIMIT
    text = comment.body(run, "parity.yml", PR, {})
    assert len(text) <= comment.COMMENT_LIMIT
    assert text.startswith("<!-- parity-gate:sticky:")
    summary = [line for line in render(run).splitlines() if line.strip()]
    headline, table_head = summary[0], next(x for x in summary if x.startswith("|"))
    first_row = summary[summary.index(table_head) + 2]
    assert headline.startswith("## ") and headline in text  # the verdict, as rendered
    assert table_head in text and first_row in text          # the first table, its worst row
    assert "more rows in the JSON report" in text and "Trimmed to fit" in text
    assert "<details>" not in text  # folded sections are dropped first


def test_trimming_keeps_regressions_and_drops_other_sections_first() -> None:
    head = "## ❌ verdict\n\n| module | x |\n|---|---|\n" + "| m | 1 |\n" * 5
    text = (head + "\n### Regressions (2)\n\n| case | why |\n|---|---|\n| a | b |\n"
            "\n### Run\n\n" + "- line\n" * 400 + "\n<details>\n" + "y" * 3000 + "\n</details>\n")
    got = comment.fit(text, 1200)
    assert len(got) <= 1200
    assert "## ❌ verdict" in got and "### Regressions (2)" in got and "| a | b |" in got
    assert "### Run" not in got and "left out: folded details, Run._" in got


def test_small_body_is_not_trimmed() -> None:
    text = comment.body(make_run(failing=2), "parity.yml", PR, {})
    assert "Trimmed" not in text and "<details>" in text


# ---- the pull request from the event


def _event(tmp: Path, name: str, payload: dict[str, object]) -> dict[str, str]:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    return {"GITHUB_REPOSITORY": REPO, "GITHUB_EVENT_NAME": name, "GITHUB_EVENT_PATH": str(path)}


def _pr_payload(number: int = 7, sha: str = "b" * 40) -> dict[str, object]:
    return {"pull_request": {"number": number, "head": {"sha": sha, "ref": "feat"},
                             "base": {"repo": {"full_name": REPO}}}}


def _run_payload(sha: str = "b" * 40) -> dict[str, object]:
    return {"workflow_run": {"head_sha": sha, "head_branch": "feat", "event": "pull_request",
                             "head_repository": {"full_name": "fork/models"}}}


def test_pull_request_event(tmp_path: Path) -> None:
    pr = comment.pull_request(_event(tmp_path, "pull_request", _pr_payload()))
    assert pr == comment.PullRequest(REPO, 7, "b" * 40)


def test_workflow_run_reads_and_checks_the_uploaded_event(tmp_path: Path,
                                                          gh: FakeGitHub) -> None:
    gh.add_pull(REPO, 7, "b" * 40, "fork/models", "feat")
    gh.add_pull(REPO, 8, "c" * 40, "acme/models", "main-work")
    env = _event(tmp_path, "workflow_run", _run_payload())
    uploaded = tmp_path / "uploaded.json"
    uploaded.write_text(json.dumps(_pr_payload()), encoding="utf-8")
    assert comment.pull_request(env, uploaded, client(gh)).number == 7
    # A forged artifact: another PR's number with the run's own SHA.
    uploaded.write_text(json.dumps(_pr_payload(number=8)), encoding="utf-8")
    with pytest.raises(comment.ContextError, match="PR #8 is from acme/models:main-work"):
        comment.pull_request(env, uploaded, client(gh))
    uploaded.write_text(json.dumps(_pr_payload(sha="d" * 40)), encoding="utf-8")
    with pytest.raises(comment.ContextError, match="head SHA dddd"):
        comment.pull_request(env, uploaded, client(gh))
    with pytest.raises(comment.ContextError, match="no event file"):
        comment.pull_request(env, None, client(gh))


def test_push_event_has_no_pull_request(tmp_path: Path) -> None:
    with pytest.raises(comment.ContextError, match="'push' has no pull request"):
        comment.pull_request(_event(tmp_path, "push", {}))


# ---- the client: faults, rate limits, pacing, the token


def test_5xx_and_timeouts_are_retried_with_backoff(gh: FakeGitHub) -> None:
    gh.fail("comments", "500", times=2)
    gh.fail("comments", "timeout", delay=1.0)
    c = client(gh, timeout_s=0.3)
    comment.post(c, PR, make_run(failing=1), comment.Mode.ALWAYS, "k", {})
    assert len(bodies(gh)) == 1 and c.stats.retries == 3
    gh.fail("comments", "500", times=10)
    with pytest.raises(GitHubError, match=r"GET /repos/acme/models/issues/7/comments: HTTP 503"):
        comment.post(client(gh), PR, make_run(), comment.Mode.ALWAYS, "k", {})


def test_short_rate_limit_waits_for_the_reset_long_one_stops(gh: FakeGitHub) -> None:
    gh.fail("search", "ratelimit", reset_in=0)
    c = client(gh, search_per_minute=6000)
    t0 = time.monotonic()
    assert c.search_issues("repo:x/y is:pr atan2").status == 200
    assert time.monotonic() - t0 >= 0.9 and c.stats.waited_s >= 0.9  # reset + 1 s
    gh.fail("search", "ratelimit", reset_in=3600)
    with pytest.raises(RateLimited, match=r"resets in 36\d\d s") as err:
        c.search_issues("repo:x/y is:pr other")
    assert err.value.reset is not None and err.value.reset > time.time() + 3000


def test_422_and_plain_403_are_not_retried(gh: FakeGitHub) -> None:
    gh.fail("search", "422")
    c = client(gh)
    with pytest.raises(GitHubError, match="HTTP 422: Validation Failed; q invalid"):
        c.search_issues("repo:x/y ((")
    gh.fail("comments", "403")
    with pytest.raises(GitHubError, match="Resource not accessible by integration"):
        c.post(f"/repos/{REPO}/issues/7/comments", {"body": "x"})
    assert c.stats.retries == 0


def test_search_pacing_spaces_searches(gh: FakeGitHub) -> None:
    c = client(gh, search_per_minute=300)  # 0.2 s apart
    for q in ("a", "b", "c", "d"):
        c.search_issues(f"repo:x/y {q}")
    times = [x.at for x in gh.calls("search")]
    # Sent 0.2 s apart by the client; arrivals jitter a little under load.
    assert times[-1] - times[0] >= 0.58
    assert all(b - a >= 0.1 for a, b in itertools.pairwise(times))
    assert GitHubClient(gh.url, None).search_interval_s == 6.0   # 10/min unauthenticated
    assert GitHubClient(gh.url, TOKEN).search_interval_s == 2.0  # 30/min with a token


def test_token_only_in_the_authorization_header(gh: FakeGitHub, tmp_path: Path) -> None:
    c = client(gh, cache_dir=tmp_path / "cache")
    c.search_issues("repo:x/y atan2")
    comment.post(c, PR, make_run(failing=1), comment.Mode.ALWAYS, "k", {})
    for call in gh.log:
        assert call.headers["authorization"] == f"Bearer {TOKEN}"
        assert TOKEN not in call.path + json.dumps(call.query) + json.dumps(call.body)
    for f in (tmp_path / "cache").iterdir():
        assert TOKEN not in f.read_text()
    gh.fail("comments", "403")
    with pytest.raises(GitHubError) as err:
        c.post(f"/repos/{REPO}/issues/7/comments", {"body": "x"})
    assert TOKEN not in str(err.value) and TOKEN not in repr(c.__dict__.get("stats"))
