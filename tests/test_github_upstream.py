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
from parity_gate.github import upstream, upstream_pass
from parity_gate.github.client import ClientSettings, GitHubClient
from parity_gate.model.findings import Example, OpCase
from parity_gate.model.gate import GateDecision
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.upstream import (
    MatchKind,
    OpRef,
    Symptom,
    UpstreamMatch,
    UpstreamReport,
)
from parity_gate.ops import causes, signatures

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
    return GitHubClient(gh.url, token, ClientSettings(**opts))  # type: ignore[arg-type]


def op_case(variant: str, aten: str, outcome: Outcome = Outcome.MISMATCH,
            dtype: str = "float32", cls: str = "specials", *, call: str | None = None,
            example: tuple[str, str] = ("-0.0", "0.0"), reason: str | None = None
            ) -> CaseResult:
    """A failing op case as the sweep writes it (default: a sign of zero lost)."""
    name = variant.split(".")[0]
    return CaseResult(CaseKey(f"op/{variant}", dtype, cls, None, "cpu"), outcome,
                      reason=reason or f"o0: {outcome.value} on {cls}",
                      op=OpCase(variant=variant, family="pointwise",
                                call=call or f"torch.{name}(x)", op=aten, aten_ops=[aten],
                                user_op=f"torch.{name}",
                                example=Example("o0", [3], example[0], example[1],
                                                {"x": example[0]})))


def make_run(*cases: CaseResult) -> RunResult:
    run = RunResult(cases=list(cases), manifest={"command": "ops"},
                    versions={"torch": "2.13.0", "onnxscript": "0.7.2",
                              "onnxruntime": "1.32.0"})
    run.gate = GateDecision(blocking=[c.id for c in run.failures], fail_on="any-failure")
    return run


ATAN2 = OpRef("aten.atan2.default", "atan2")
INSTALLED = {"torch": "2.13.0", "onnxscript": "0.7.2", "onnxruntime": "1.32.0"}
NO_KERNEL = "onnxruntime load: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an " \
    "implementation for Atan(7) node with name 'node_Atan_1'"


def sigs(run: RunResult) -> list[tuple[str, str, list[str], list[str], str]]:
    return [(s.symptom.value, s.owner.value, s.dtypes, s.input_classes, s.lead)
            for s, _ in signatures.group(run)]


def test_one_signature_per_defect_not_per_overload() -> None:
    """A different symptom on one overload is another report; one kernel gap reached by two
    ops is one; the lead case is the most ordinary (normal before specials, float32 first);
    eager's own findings and module cases are not reported."""
    run = make_run(
        op_case("atan2", "aten.atan2.default", dtype="float16", example=("nan", "0.0")),
        op_case("atan2", "aten.atan2.default", example=("nan", "0.0")),
        op_case("atan2", "aten.atan2.default", cls="normal", example=("0.5", "0.75")),
        op_case("atan2", "aten.atan2.default", Outcome.NO_KERNEL, "float64", reason=NO_KERNEL),
        op_case("arctan2", "aten.atan2.default", Outcome.NO_KERNEL, "float64", "normal",
                reason=NO_KERNEL),
        op_case("add", "aten.add.Tensor", Outcome.EAGER_ERROR),
        CaseResult(CaseKey("mlp", "float32", "f", 1, "cpu"), Outcome.MISMATCH))
    assert sigs(run) == [
        ("missing_kernel", "kernel", ["float64"], ["normal", "specials"],
         "op/arctan2/float64/normal/cpu"),
        ("wrong_values", "translation", ["float32"], ["normal"], "op/atan2/float32/normal/cpu"),
        ("nan_dropped", "translation", ["float32", "float16"], ["specials"],
         "op/atan2/float32/specials/cpu"),
    ]
    kernel = signatures.group(run)[0][0]
    assert kernel.kernel == "Atan(7)" and kernel.variants == ["arctan2", "atan2"]


def test_arguments_that_matter_split_reduce_modes_but_not_flags() -> None:
    call = "torch.scatter_reduce(x, 1, i, s, reduce='{}', include_self={})"
    run = make_run(*(op_case(f"scatter_reduce.{m}.{inc}", "aten.scatter_reduce.two",
                             call=call.format(m, inc), example=("1.0", "2.0"))
                     for m in ("mean", "amax") for inc in (True, False)))
    found = signatures.group(run)
    assert [(s.args, s.variants) for s, _ in found] == [
        (["include_self", "reduce='amax'"], ["scatter_reduce.amax.False",
                                             "scatter_reduce.amax.True"]),
        (["include_self", "reduce='mean'"], ["scatter_reduce.mean.False",
                                             "scatter_reduce.mean.True"])]


@pytest.mark.parametrize(("example", "outcome", "symptom"), [
    (("nan", "0.0"), Outcome.MISMATCH, Symptom.NAN_DROPPED),
    (("0.0", "nan"), Outcome.MISMATCH, Symptom.NAN_INTRODUCED),
    (("-0.0", "0.0"), Outcome.MISMATCH, Symptom.SIGNED_ZERO_LOST),
    (("3e38", "inf"), Outcome.MISMATCH, Symptom.OVERFLOW_TO_INF),
    (("-inf", "-3.4e38"), Outcome.MISMATCH, Symptom.INF_LOST),
    (("2.875", "2.0"), Outcome.MISMATCH, Symptom.WRONG_VALUES),
    (("1.0", "1.0"), Outcome.INVALID_MODEL, Symptom.INVALID_MODEL),
    (("1.0", "1.0"), Outcome.UNSUPPORTED_OP, Symptom.UNSUPPORTED),
])
def test_symptom_of(example: tuple[str, str], outcome: Outcome, symptom: Symptom) -> None:
    assert signatures.symptom_of(op_case("x", "aten.x.default", outcome,
                                         example=example)) is symptom


def test_queries_name_the_code_in_its_owners_words_and_the_trigger() -> None:
    run = make_run(op_case("atan2", "aten.atan2.default", example=("nan", "0.0")),
                   op_case("atan2", "aten.atan2.default", Outcome.NO_KERNEL, "float64",
                           reason=NO_KERNEL))
    found = {c.lead.symptom: c for c in causes.group(signatures.group(run))}
    kernel, nan = found[Symptom.MISSING_KERNEL], found[Symptom.NAN_DROPPED]
    # one search per defect, open and closed, issues and pull requests of every place it
    # may be filed: the torchlib function and the trigger (a NaN input) or a change to it
    assert [q for _, _, q in upstream.cause_queries(nan)] == [
        "repo:microsoft/onnxscript repo:pytorch/pytorch (atan2 OR aten_atan2) "
        "(nan OR fix OR implement OR add)"]
    # a dtype gap: the node and its dtype
    assert [q for _, _, q in upstream.cause_queries(kernel)] == [
        "repo:microsoft/onnxruntime repo:microsoft/onnxscript (float64 OR double)"]


# Near misses for `torch.mean` returning a number where eager returns NaN (the mean over an
# empty set), on onnxscript 0.7.2: none of them may suppress its report.
MEAN_CALL = "torch.mean(x, dim=-1, dtype=torch.float32)"
NEAR_MISSES = [
    Item(ONNXSCRIPT, 1501, "[torchlib] Implement aten::mean.dim with dtype", pr=True,
         state="closed", merged=True, milestone="v0.4.0",
         body="Adds aten_mean_dim; returns NaN for empty input like torch"),  # introduced it
    Item(ONNXSCRIPT, 1502, "Implement torch.mean for int inputs (NaN handling later)", pr=True,
         updated_at=RECENT),                                                # "Implement X"
    Item(PYTORCH, 1503, "[ONNX] scatter_reduce(reduce='mean') gives NaN", labels=ONNX_LABEL,
         body="torch.scatter_reduce(x, 0, i, s, reduce='mean') is nan"),  # another op, a word
    Item(ONNXSCRIPT, 1504, "Fix aten::mean NaN on empty input", pr=True, state="closed",
         merged=True, milestone="v0.6.0",
         body="torch.mean(x, dim=-1) returns 0 instead of nan"),  # merged before 0.7.2
    Item(ONNXSCRIPT, 1505, "[torchlib] fix mean of an empty dim", pr=True, state="closed",
         merged=True, body="aten::mean over an empty dim is nan in eager"),  # no release
]


def mean_run() -> RunResult:
    return make_run(op_case("mean.dtype_f32", "aten.mean.dim", cls="empty", call=MEAN_CALL,
                            example=("nan", "0.0")),
                    op_case("atan2", "aten.atan2.default", example=("nan", "0.0")),
                    op_case("remainder", "aten.remainder.Tensor", example=("0.0", "nan")))


def test_near_misses_never_suppress_and_a_true_duplicate_is_linked(gh: FakeGitHub) -> None:
    gh.items += [
        *NEAR_MISSES,
        # a fix merged after the installed release: claimed, with the release to upgrade to
        Item(ONNXSCRIPT, 2101, "[torchlib] Fix aten::atan2 returning 0 for NaN inputs", pr=True,
             state="closed", merged=True, milestone="v0.7.3",
             body="atan2(nan, nan) gave 0.0 instead of nan"),
        # the true duplicate: an open issue that names the call and the symptom
        Item(PYTORCH, 150001, "[ONNX] torch.remainder returns NaN where eager returns 0",
             labels=ONNX_LABEL, body="torch.remainder(0.0, inf) is nan after export"),
    ]
    got, warnings = upstream_pass.attach(mean_run(), client(gh), upstream.UpstreamOptions(
        mode="search"))
    assert warnings == []
    by_op = {r.signature.op_name: r for r in got.upstream if r.signature is not None}
    mean = by_op["mean"]
    assert mean.match is None and mean.describe() == "no known report"
    assert sorted(m.number for m in mean.related) == [1501, 1502, 1504, 1505]
    assert not any(m.confident for m in mean.related)
    assert "introduces the op (not a fix)" in mean.related[-1].why or any(
        "introduces" in " ".join(m.why) for m in mean.related)
    assert by_op["atan2"].describe() == ("fixed after your version in onnxscript#2101: "
                                         "upgrade to >= onnxscript 0.7.3")
    assert by_op["remainder"].describe() == "reported in pytorch#150001 (open issue)"
    assert len(gh.calls("search")) == 3  # one search per defect


def test_assess_reads_the_candidate() -> None:
    (mean, _), *_ = signatures.group(make_run(mean_run().cases[0]))
    said = [upstream.assess(mean, ONNXSCRIPT, i.to_json(), INSTALLED) for i in NEAR_MISSES]
    assert [m is not None and m.confident for m in said] == [False] * 5
    assert said[2] is None  # scatter_reduce's 'mean' names another op
    exact = Item(ONNXSCRIPT, 7, "torch.mean(x, dim=-1) returns 0.0, eager NaN, on empty input")
    hit = upstream.assess(mean, ONNXSCRIPT, exact.to_json(), INSTALLED)
    assert hit is not None and hit.confident and hit.kind is MatchKind.OPEN_ISSUE


def test_every_wording() -> None:
    def said(kind: MatchKind, fixed_in: str | None = None) -> str:
        m = UpstreamMatch(ONNXSCRIPT, 5, "t", "u", kind, fixed_in=fixed_in)
        return UpstreamReport(op=ATAN2, match=m).describe()

    assert said(MatchKind.CLOSED_ISSUE).startswith("reported in onnxscript#5 (closed issue)")
    assert said(MatchKind.CLOSED_PR) == "attempted in onnxscript#5 (closed PR, not merged)"
    assert said(MatchKind.MERGED_PR, "onnxscript 0.8.0") == (
        "fixed after your version in onnxscript#5: upgrade to >= onnxscript 0.8.0")
    assert UpstreamReport(op=ATAN2, searched=False, error="search stopped: x").describe() == \
        "not searched upstream (search stopped: x)"


def test_cache_per_run_and_across_runs(gh: FakeGitHub, tmp_path: Path) -> None:
    gh.items.append(Item(ONNXSCRIPT, 3, "aten::atan2 loses the sign of zero", pr=True))
    run = make_run(op_case("atan2", "aten.atan2.default"), op_case("abs", "aten.abs.default"))
    opts = upstream.UpstreamOptions(mode="search")
    cold = client(gh, cache_dir=tmp_path)
    first, _ = upstream_pass.attach(run, cold, opts)
    assert cold.stats.sent == 2
    again, _ = upstream_pass.attach(run, cold, opts)  # the same run asks again: nothing sent
    assert cold.stats.sent == 2 and cold.stats.run_cache_hits == 2
    warm = client(gh, cache_dir=tmp_path)
    second, _ = upstream_pass.attach(run, warm, opts)
    assert warm.stats.sent == 0 and warm.stats.disk_cache_hits == 2
    stale = client(gh, cache_dir=tmp_path, cache_ttl_s=0)  # expired: revalidated by ETag
    third, _ = upstream_pass.attach(run, stale, opts)
    assert stale.stats.sent == 2 and stale.stats.not_modified == 2
    assert first.upstream == second.upstream == third.upstream == again.upstream
    assert all(TOKEN not in f.read_text() for f in tmp_path.iterdir())


def test_a_malformed_answer_cache_is_asked_again_with_one_warning(
        gh: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cached answer with the right key but a wrong field (`fetched_at` a string) was
    `internal error: TypeError` on every run: now it is asked again and rewritten."""
    gh.items.append(Item(ONNXSCRIPT, 3, "aten::atan2 loses the sign of zero", pr=True))
    run = make_run(op_case("atan2", "aten.atan2.default"))
    opts = upstream.UpstreamOptions(mode="search")
    first, _ = upstream_pass.attach(run, client(gh, cache_dir=tmp_path), opts)
    files = sorted(tmp_path.glob("*.json"))
    doc = json.loads(files[0].read_text())
    files[0].write_text(json.dumps({**doc, "fetched_at": "yesterday"}))
    capsys.readouterr()
    warm = client(gh, cache_dir=tmp_path)
    second, _ = upstream_pass.attach(run, warm, opts)
    assert second.upstream == first.upstream and warm.stats.sent == 1
    assert capsys.readouterr().err.splitlines() == [
        f"parity-gate: warning: {files[0]}: malformed GitHub answer cache (fetched_at: Input "
        "should be a valid number); asking again"]
    again = client(gh, cache_dir=tmp_path)
    upstream_pass.attach(run, again, opts)
    assert again.stats.sent == 0 and capsys.readouterr().err == ""


def test_a_search_budget_stops_searching_and_the_cache_goes_on(gh: FakeGitHub,
                                                                tmp_path: Path) -> None:
    run = mean_run()
    budget = client(gh, cache_dir=tmp_path, search_budget=1)
    got, warnings = upstream_pass.attach(run, budget, upstream.UpstreamOptions(mode="search"))
    assert budget.stats.requests["search"] == 1
    assert [r.searched for r in got.upstream] == [True, False, False]
    assert "not searched: the search budget of 1 searches per run is spent" in \
        got.upstream[1].describe()
    assert warnings == ["upstream: 2 defect(s) not searched: the search budget of 1 searches "
                        "per run is spent (the answers are cached: the next run goes on)"]
    again = client(gh, cache_dir=tmp_path, search_budget=6)
    got, warnings = upstream_pass.attach(run, again, upstream.UpstreamOptions(mode="search"))
    assert [r.searched for r in got.upstream] == [True, True, True] and warnings == []
    assert again.stats.requests["search"] == 2 and again.stats.disk_cache_hits == 1


@pytest.mark.parametrize("fault", ["500", "422", "timeout", "ratelimit", "403"])
def test_faults_become_warnings_and_never_touch_the_verdict(gh: FakeGitHub, fault: str) -> None:
    gh.items.append(Item(ONNXSCRIPT, 3, "aten::abs loses the sign of zero", pr=True))
    run = make_run(op_case("atan2", "aten.atan2.default"), op_case("abs", "aten.abs.default"))
    gh.fail("search", fault, times=8, reset_in=3600, delay=1.0)
    got, warnings = upstream_pass.attach(run, client(gh, timeout_s=0.3, retries=1),
                                    upstream.UpstreamOptions(mode="search"))
    assert got.verdict == run.verdict and got.gate == run.gate
    assert sorted(c.id for c in got.cases) == sorted(c.id for c in run.cases)
    assert warnings and all(TOKEN not in w for w in warnings)
    assert all(r.match is None and r.error for r in got.upstream)
    if fault == "ratelimit":  # stops at the first signature and says so for the rest
        assert len(gh.calls("search")) == 1
        assert got.upstream[1].searched is False
        assert "rate limit until" in got.upstream[1].describe()


def test_results_json_carries_the_matches(gh: FakeGitHub, tmp_path: Path) -> None:
    from parity_gate.report.write import run_json

    gh.items.append(Item(ONNXSCRIPT, 3, "aten::atan2 loses the sign of zero (-0)", pr=True,
                         body="fix: atan2(-0.0, x) sign"))
    got, _ = upstream_pass.attach(make_run(op_case("atan2", "aten.atan2.default")), client(gh),
                             upstream.UpstreamOptions(mode="search"))
    path = tmp_path / "results.json"
    path.write_bytes(run_json(got))
    doc = json.loads(path.read_text())
    assert doc["upstream"][0]["match"]["kind"] == "open_pr"
    assert doc["upstream"][0]["signature"]["symptom"] == "signed_zero_lost"
    assert read_results(path)[1].upstream == got.upstream
    md = upstream.markdown(got.upstream)
    assert "being fixed in onnxscript#3 (open PR)" in md and "](https://github.com/" in md


def test_the_cli_honours_the_actions_search_rate(gh: FakeGitHub, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """PARITY_GATE_SEARCH_PER_MINUTE paces `parity-gate upstream` as it paces the Action
    (without it, an unauthenticated run waits 6 s between searches)."""
    from parity_gate.cli import main
    from parity_gate.report.write import run_json

    results = tmp_path / "results.json"
    results.write_bytes(run_json(mean_run()))  # three defects: one search each
    monkeypatch.delenv("PARITY_GATE_UPSTREAM_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("PARITY_GATE_SEARCH_PER_MINUTE", "150")
    assert main(["upstream", "--results", str(results), "--api-url", gh.url,
                 "--search-only"]) == 0
    at = [c.at for c in gh.calls("search")]
    assert len(at) == 3 and all(0.3 <= b - a < 2.0 for a, b in itertools.pairwise(at))
    assert (tmp_path / "upstream-cache").is_dir()  # answers kept beside the results


def test_a_malformed_ledger_of_created_issues_is_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A value that is no URL string is not coerced into a link (`str({...})`)."""
    ledger = tmp_path / "created-issues.json"
    ledger.write_text('{"fp1": "https://github.com/o/r/issues/1", "fp2": {"x": 1}}')
    assert upstream._read_ledger(ledger) == {}
    assert capsys.readouterr().err.splitlines() == [
        f"parity-gate: warning: {ledger}: malformed ledger of created issues (fp2: Input "
        "should be a valid string); starting a new one"]
    ledger.write_text('{"fp1": "https://github.com/o/r/issues/1"}')
    assert upstream._read_ledger(ledger) == {"fp1": "https://github.com/o/r/issues/1"}


def test_a_report_of_a_special_value_never_claims_a_plain_wrong_number() -> None:
    """onnxscript#2604 says SDPA returned NaN for a fully masked row where eager returns 0: a
    model whose bool-mask attention returns the mean of V there (a number, not NaN) has
    another defect, which that report never claims; its own NaN signature it does."""
    call = "F.scaled_dot_product_attention(q, k, v, attn_mask=m)"
    number = op_case("sdpa.mask", "aten.scaled_dot_product_attention.default", cls="normal",
                     call=call, example=("0.0", "-1.475"))
    nan = op_case("sdpa.mask", "aten.scaled_dot_product_attention.default", cls="normal",
                  call=call, example=("0.0", "nan"))
    report = Item(ONNXSCRIPT, 2604, "[torchlib] SDPA mismatch for a fully masked row",
                  "A mismatch with aten: `F.scaled_dot_product_attention(q, k, v, "
                  "attn_mask=m)` with a row of `m` fully masked returned NaN in onnxruntime "
                  "where eager returns 0.")  # an open issue: it would claim its own defect
    (wrong, _), = signatures.group(make_run(number))
    (introduced, _), = signatures.group(make_run(nan))
    assert (wrong.symptom, introduced.symptom) == (Symptom.WRONG_VALUES, Symptom.NAN_INTRODUCED)
    seen = upstream.assess(wrong, ONNXSCRIPT, report.to_json(), INSTALLED)
    assert seen is not None and not seen.confident
    assert "describes another symptom: returns NaN where eager returns a number" in seen.why
    own = upstream.assess(introduced, ONNXSCRIPT, report.to_json(), INSTALLED)
    assert own is not None and own.confident
    assert "describes: returns NaN where eager returns a number" in own.why


PAD_ERROR = ("onnxruntime run: [ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned "
             "while running Pad node. Name:'node_pad_2' Status Message: Unexpected mode of 3")
SCATTER_ERROR = ("onnxruntime run: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status "
                 "code returned while running ScatterElements node. Name:'node_scatter_add_1' "
                 "Status Message: CPU execution provider: MLFloat16 data type is not supported "
                 "with ScatterElements opset 16 when reduction is 'add'.")
RESIZE_ERROR = ("Non-zero status code returned while running Resize node. Name:'n' Status "
                "Message: /onnxruntime_src/include/onnxruntime/core/framework/tensor.h:210 T* "
                "onnxruntime::Tensor::MutableData() [with T = float] utils::IsPrimitiveDataType"
                "<T>(dtype_) was false. Tensor type mismatch. T !=N11onnxruntime17Primitive")


def test_status_message_is_what_onnx_runtime_said_without_its_source_location() -> None:
    from parity_gate.engine.runtime import status_message

    assert status_message(PAD_ERROR) == "Unexpected mode of 3"
    assert status_message(SCATTER_ERROR) == ("MLFloat16 data type is not supported with "
                                             "ScatterElements opset 16 when reduction is 'add'.")
    assert status_message(RESIZE_ERROR) == "Tensor type mismatch. T !=N11onnxruntime17Primitive"
    assert status_message("no status here") == ""


def test_a_kernel_that_raises_is_one_cause_per_node_type_titled_by_what_it_said() -> None:
    """ONNX Runtime raising on a graph ONNX's reference evaluator runs is its kernel's defect
    (the sweep's `op.raised`): scatter_add and scatter_reduce reach the same ScatterElements
    kernel, one cause and one title; without that record the owner stays the translation."""
    from parity_gate.github import drafts
    from parity_gate.model.findings import ByDefinition
    from parity_gate.model.upstream import Owner
    from parity_gate.ops import causes

    def raising(variant: str, call: str, dtype: str, ran: bool = True) -> CaseResult:
        case = op_case(variant, f"aten.{variant.split('.')[0]}.two", Outcome.RUNTIME_ERROR,
                       dtype, "normal", call=call, reason=SCATTER_ERROR)
        assert case.op is not None
        case.op.example = None
        case.op.raised = ByDefinition("ONNX's reference evaluator", with_eager=True,
                                      owner=Owner.KERNEL) if ran else None
        return case

    run = make_run(raising("scatter_add", "torch.scatter_add(x, 1, i, s)", "float16"),
                   raising("scatter_reduce.sum", "torch.scatter_reduce(x, 1, i, s, reduce='sum')",
                           "bfloat16"))
    found = signatures.group(run)
    assert [(s.owner, s.kernel) for s, _ in found] == [(Owner.KERNEL, "ScatterElements")] * 2
    (cause,) = causes.group(found)
    assert cause.function == "ScatterElements" and len(cause.members) == 2
    title = drafts.title(cause.lead, cause, None, (), "MLFloat16 data type is not supported "
                         "with ScatterElements opset 16 when reduction is 'add'.")
    assert title == ("CPUExecutionProvider: ScatterElements raises on float16 and bfloat16: "
                     "MLFloat16 data type is not supported with ScatterElements opset 16 when "
                     "reduction is add")
    (unknown, _), = signatures.group(make_run(raising("scatter_add", "torch.scatter_add(x, 1, "
                                                      "i, s)", "float16", ran=False)))
    assert (unknown.owner, unknown.kernel) == (Owner.TRANSLATION, "")
