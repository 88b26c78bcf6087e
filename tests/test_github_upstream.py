"""The upstream search, ranking, wording, drafts and issue creation, against the local server."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from github_server import FakeGitHub, Item

from parity_gate.gate.merge import read_results
from parity_gate.github import upstream
from parity_gate.github.client import GitHubClient
from parity_gate.model.findings import Example, OpCase
from parity_gate.model.gate import GateDecision
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.upstream import MatchKind, OpRef, UpstreamMatch, UpstreamReport

TOKEN = "ghp_UPSTREAMsecret9876543210zyxwvuZYXWVU"
ONNXSCRIPT, PYTORCH = "microsoft/onnxscript", "pytorch/pytorch"
ONNX_LABEL = ["module: onnx"]
RECENT = (datetime.now(timezone.utc) - timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        yield server
        assert server.errors == [], server.errors


def client(gh: FakeGitHub, token: str | None = TOKEN, **kw: object) -> GitHubClient:
    opts = {"backoff_s": 0.01, "write_interval_s": 0.0, "timeout_s": 2.0,
            "search_per_minute": 60000, **kw}
    return GitHubClient(gh.url, token, **opts)  # type: ignore[arg-type]


def op_case(variant: str, aten: str, outcome: Outcome = Outcome.MISMATCH,
            dtype: str = "float32", cls: str = "specials") -> CaseResult:
    return CaseResult(CaseKey(f"op/{variant}", dtype, cls, None, "cpu"), outcome,
                      reason=f"o0: {outcome.value} on {cls}",
                      op=OpCase(variant=variant, family="pointwise", call=f"torch.{variant}(x)",
                                op=aten, aten_ops=[aten],
                                example=Example("o0", [3], "-0.0", "0.0", {"x": "-0.0"})))


def make_run(*cases: CaseResult) -> RunResult:
    run = RunResult(cases=list(cases), manifest={"command": "ops"},
                    versions={"torch": "2.13.0", "onnxscript": "0.7.2",
                              "onnxruntime": "1.32.0"})
    run.gate = GateDecision(blocking=[c.id for c in run.failures], fail_on="any-failure")
    return run


ATAN2 = OpRef("aten.atan2.default", "atan2")


def test_op_findings_group_by_overload_and_skip_non_exporter_outcomes() -> None:
    run = make_run(op_case("atan2", "aten.atan2.default"),
                   op_case("atan2", "aten.atan2.default", dtype="float16"),
                   op_case("add", "aten.add.Tensor", Outcome.NO_KERNEL),
                   CaseResult(CaseKey("mlp", "float32", "f", 1, "cpu"), Outcome.MISMATCH))
    found = upstream.op_findings(run)
    assert [(op.overload, len(cs)) for op, cs in found] == [("aten.atan2.default", 2)]
    assert OpRef("aten.sum.dim_IntList").name == "sum" and ATAN2.name == "atan2"


def test_queries_cover_both_repositories_issues_and_prs_apart() -> None:
    qs = [q for _, _, q in upstream.queries(ATAN2)]
    assert qs == [
        'repo:microsoft/onnxscript is:issue (atan2 OR "aten.atan2.default")',
        'repo:microsoft/onnxscript is:pr (atan2 OR "aten.atan2.default")',
        'repo:pytorch/pytorch is:issue label:"module: onnx" (atan2 OR "aten.atan2.default")',
        'repo:pytorch/pytorch is:pr label:"module: onnx" (atan2 OR "aten.atan2.default")',
    ]


@pytest.mark.parametrize(("items", "want"), [
    ([Item(ONNXSCRIPT, 2101, "[torchlib] Fix aten::atan2 with signed zeros", pr=True,
           updated_at=RECENT)], "being fixed in onnxscript#2101 (open PR)"),
    ([Item(ONNXSCRIPT, 1900, "Fix atan2 for -0", pr=True, state="closed", merged=True)],
     "fixed in onnxscript#1900 (merged): upgrade to a release that has it"),
    ([Item(PYTORCH, 150001, "[ONNX] torch.atan2 wrong for negative zero", labels=ONNX_LABEL)],
     "reported in pytorch#150001 (open issue)"),
    ([Item(PYTORCH, 150002, "[ONNX] atan2 is wrong")], "no known report"),  # label missing
    ([Item(ONNXSCRIPT, 77, "Refactor math ops", body="touches atan2 somewhere")],
     "no known report"),                                                 # a bare body word
    ([], "no known report"),
])
def test_ranking_and_wording(gh: FakeGitHub, items: list[Item], want: str) -> None:
    gh.items += items
    run = make_run(op_case("atan2", "aten.atan2.default"))
    got, warnings = upstream.attach(run, client(gh), upstream.UpstreamOptions(mode="search"))
    assert warnings == []
    (report,) = got.upstream
    assert report.describe() == want
    assert len(gh.calls("search")) == 4


def test_title_match_and_state_beat_recency() -> None:
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    items = [
        {"number": 1, "title": "Exporter crash list", "body": "aten.atan2.default crashes",
         "html_url": "u1", "state": "open", "updated_at": "2026-05-30T00:00:00Z",
         "pull_request": {"merged_at": None}},
        {"number": 2, "title": "aten::atan2 wrong sign", "body": "", "html_url": "u2",
         "state": "closed", "updated_at": "2024-01-01T00:00:00Z"},
        {"number": 3, "title": "[torchlib] atan2: handle -0", "body": "", "html_url": "u3",
         "state": "open", "updated_at": "2025-01-01T00:00:00Z", "pull_request": {}},
    ]
    ranked = upstream.rank(ATAN2, ONNXSCRIPT, items, now=now)
    assert [m.number for m in ranked] == [2, 3, 1]
    assert [m.kind for m in ranked] == [MatchKind.CLOSED_ISSUE, MatchKind.OPEN_PR,
                                        MatchKind.OPEN_PR]


def test_every_wording() -> None:
    def said(kind: MatchKind) -> str:
        m = UpstreamMatch(ONNXSCRIPT, 5, "t", "u", kind)
        return UpstreamReport(op=ATAN2, match=m).describe()

    assert said(MatchKind.CLOSED_ISSUE).startswith("reported in onnxscript#5 (closed issue)")
    assert said(MatchKind.CLOSED_PR) == "attempted in onnxscript#5 (closed PR, not merged)"
    assert UpstreamReport(op=ATAN2, searched=False, error="search stopped: x").describe() == \
        "not searched upstream (search stopped: x)"


def test_cache_per_run_and_across_runs(gh: FakeGitHub, tmp_path: Path) -> None:
    gh.items.append(Item(ONNXSCRIPT, 3, "aten::atan2 sign", pr=True))
    run = make_run(op_case("atan2", "aten.atan2.default"), op_case("abs", "aten.abs.default"))
    opts = upstream.UpstreamOptions(mode="search")
    cold = client(gh, cache_dir=tmp_path)
    first, _ = upstream.attach(run, cold, opts)
    assert cold.stats.sent == 8
    again, _ = upstream.attach(run, cold, opts)  # the same run asks again: nothing sent
    assert cold.stats.sent == 8 and cold.stats.run_cache_hits == 8
    warm = client(gh, cache_dir=tmp_path)
    second, _ = upstream.attach(run, warm, opts)
    assert warm.stats.sent == 0 and warm.stats.disk_cache_hits == 8
    stale = client(gh, cache_dir=tmp_path, cache_ttl_s=0)  # expired: revalidated by ETag
    third, _ = upstream.attach(run, stale, opts)
    assert stale.stats.sent == 8 and stale.stats.not_modified == 8
    assert first.upstream == second.upstream == third.upstream == again.upstream
    assert all(TOKEN not in f.read_text() for f in tmp_path.iterdir())


@pytest.mark.parametrize("fault", ["500", "422", "timeout", "ratelimit", "403"])
def test_faults_become_warnings_and_never_touch_the_verdict(gh: FakeGitHub, fault: str) -> None:
    gh.items.append(Item(ONNXSCRIPT, 3, "aten::abs wrong for int", pr=True))
    run = make_run(op_case("atan2", "aten.atan2.default"), op_case("abs", "aten.abs.default"))
    gh.fail("search", fault, times=8, reset_in=3600, delay=1.0)
    got, warnings = upstream.attach(run, client(gh, timeout_s=0.3, retries=1),
                                    upstream.UpstreamOptions(mode="search"))
    assert got.verdict == run.verdict and got.gate == run.gate
    assert sorted(c.id for c in got.cases) == sorted(c.id for c in run.cases)
    assert warnings and all(TOKEN not in w for w in warnings)
    assert all(r.match is None and r.error for r in got.upstream)
    if fault == "ratelimit":  # stops at the first op and says so for the rest
        assert len(gh.calls("search")) == 1
        assert got.upstream[1].searched is False
        assert "rate limit until" in got.upstream[1].describe()


def _repro(folder: Path) -> Path:
    folder.mkdir()
    (folder / "atan2__mismatch.py").write_text("import torch\nprint('repro atan2')\n")
    return folder


def test_drafts_for_unmatched_findings_only(gh: FakeGitHub, tmp_path: Path) -> None:
    gh.items.append(Item(ONNXSCRIPT, 3, "aten::abs wrong for int", pr=True))
    run = make_run(op_case("atan2", "aten.atan2.default"), op_case("abs", "aten.abs.default"))
    opts = upstream.UpstreamOptions(mode="draft", drafts=tmp_path / "drafts",
                                    repro_dir=_repro(tmp_path / "repro"))
    got, _ = upstream.attach(run, client(gh), opts)
    abs_, atan2 = got.upstream  # in case-id order
    assert abs_.match is not None and abs_.draft is None
    assert atan2.draft is not None and atan2.describe().startswith("no known report (draft:")
    text = Path(atan2.draft).read_text()
    assert text.splitlines()[1] == "# [torchlib] aten.atan2.default: mismatch for float32"
    assert "print('repro atan2')" in text and "- onnxscript: 0.7.2" in text
    assert "x=-0.0 → eager -0.0 vs onnx 0.0" in text
    assert [p.name for p in (tmp_path / "drafts").iterdir()] == ["aten.atan2.default.md"]


def test_create_opens_once_paced_and_capped(gh: FakeGitHub, tmp_path: Path) -> None:
    cases = [op_case(v, f"aten.{v}.default") for v in ("atan2", "acos", "asin", "erfinv")]
    run = make_run(*cases)
    opts = upstream.UpstreamOptions(mode="create", max_create=3, ledger=tmp_path / "l.json")
    c = client(gh, write_interval_s=0.3)
    got, warnings = upstream.attach(run, c, opts)
    posts = gh.calls("issues", "POST")
    assert len(posts) == 3 and [r.created is not None for r in got.upstream] == [
        True, True, True, False]
    assert "limit of 3 new issues per run" in warnings[0]
    assert all(b.at - a.at >= 0.28 for a, b in itertools.pairwise(posts))
    assert got.upstream[0].describe().startswith("reported by parity-gate in https://github")
    # A second run on another machine (no ledger): it finds its own issues by fingerprint.
    again, _ = upstream.attach(run, client(gh), upstream.UpstreamOptions(
        mode="create", max_create=3, ledger=tmp_path / "other.json"))
    assert len(gh.calls("issues", "POST")) == 4  # only erfinv's, left over by the cap
    assert [r.match.url if r.match else None for r in again.upstream][:3] == [
        r.created for r in got.upstream][:3]
    assert again.upstream[0].describe() == "reported in onnxscript#9000 (open issue)"


def test_create_never_when_a_match_exists(gh: FakeGitHub, tmp_path: Path) -> None:
    gh.items.append(Item(PYTORCH, 9, "[ONNX] aten.atan2.default wrong", labels=ONNX_LABEL))
    run = make_run(op_case("atan2", "aten.atan2.default"))
    got, _ = upstream.attach(run, client(gh), upstream.UpstreamOptions(
        mode="create", ledger=tmp_path / "l.json"))
    assert gh.calls("issues", "POST") == [] and got.upstream[0].created is None


def test_results_json_carries_the_matches(gh: FakeGitHub, tmp_path: Path) -> None:
    from parity_gate.report.write import run_json

    gh.items.append(Item(ONNXSCRIPT, 3, "aten::atan2 sign", pr=True))
    got, _ = upstream.attach(make_run(op_case("atan2", "aten.atan2.default")), client(gh),
                             upstream.UpstreamOptions(mode="search"))
    path = tmp_path / "results.json"
    path.write_bytes(run_json(got))
    doc = json.loads(path.read_text())
    assert doc["upstream"][0]["match"]["kind"] == "open_pr"
    assert read_results(path)[1].upstream == got.upstream
    md = upstream.markdown(got.upstream)
    assert "being fixed in onnxscript#3 (open PR)" in md and "](https://github.com/" in md


def test_create_finds_its_own_unlabelled_issue_by_fingerprint(gh: FakeGitHub,
                                                              tmp_path: Path) -> None:
    """Legacy-exporter findings go to pytorch/pytorch, where the issue cannot be labelled
    "module: onnx": the op search misses it, the fingerprint search does not."""
    import dataclasses

    from parity_gate.model.results import Provenance

    case = dataclasses.replace(op_case("atan2", "aten.atan2.default"),
                               provenance=Provenance(exporter="torchscript"))
    run = make_run(case)
    for ledger in ("a.json", "b.json"):  # two machines, no shared ledger
        got, _ = upstream.attach(run, client(gh), upstream.UpstreamOptions(
            mode="create", ledger=tmp_path / ledger))
    (post,) = gh.calls("issues", "POST")
    assert post.path == "/repos/pytorch/pytorch/issues"
    assert post.body["title"].startswith("[ONNX] aten.atan2.default")
    assert got.upstream[0].match is None and got.upstream[0].created is not None
