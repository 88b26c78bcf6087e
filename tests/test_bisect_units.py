"""`parity-gate bisect`'s logic on a fake installer: the search, package isolation, skips,
the probe bound, the judge, the version listing (from a local index) and the sets.

The fake installer and runner stand in for venv + pip + a run of the gate; the real
`Prober`, `judge` and `search` do the rest, so what is checked here is what runs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from bisect_wheels import serve_json
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from parity_gate.bisect import index
from parity_gate.bisect.judge import failure_signature, judge
from parity_gate.bisect.probe import Prober, refusal
from parity_gate.bisect.search import Budget, next_index, probe_bound, search
from parity_gate.bisect.sets import differing, load_set, parse_pins
from parity_gate.errors import UserError
from parity_gate.model.bisect import Bisection, Phase, Probe, Verdict
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ExportCause
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.report.bisect import markdown

CASE = "mlp/float32/vec/b2/cpu"
BAD = CaseResult(CaseKey("mlp", "float32", "vec", 2, "cpu"), Outcome.MISMATCH, "o0 differs")
PASS = CaseResult(CaseKey("mlp", "float32", "vec", 2, "cpu"), Outcome.PASS)


def _export_error(kind: str) -> CaseResult:
    return CaseResult(CaseKey("mlp", "float32", "vec", 2, "cpu"), Outcome.EXPORT_ERROR,
                      f"translation: {kind}", cause=ExportCause(kind, "no"))


# What a package set computes: the fake world's rule, from the full set of pins.
World = Callable[[Mapping[str, str]], CaseResult | str]


class FakeInstaller:
    """Records every set it was asked for; "installs" unless the world says it cannot."""

    def __init__(self, world: World) -> None:
        self.world, self.asked = world, []  # type: ignore[var-annotated]

    def prepare(self, pins: Mapping[str, str]) -> tuple[Path | None, str]:
        self.asked.append(dict(pins))
        got = self.world(pins)
        if isinstance(got, str) and got.startswith("cannot install"):
            return None, got
        return Path("/fake") / json.dumps(sorted(pins.items())), ""


class FakeRunner:
    def __init__(self, world: World) -> None:
        self.world = world

    def run(self, python: Path, name: str,
            cases: list[str]) -> tuple[dict[str, CaseResult] | None, str]:
        pins = dict(json.loads(python.name))
        got = self.world(pins)
        if isinstance(got, str):
            return None, got  # a crash or a hang: no results
        return {CASE: got}, ""


def _bisect(world: World, good: dict[str, str], bad: dict[str, str],
            candidates: dict[str, list[str]], **kw: object) -> tuple[Bisection, FakeInstaller]:
    installer = FakeInstaller(world)
    prober = Prober(installer, FakeRunner(world), {CASE: failure_signature(BAD)})
    return search(good, bad, candidates, prober, cases=[CASE], **kw), installer  # type: ignore[arg-type]


OS = ["0.5.4", "0.5.6", "0.5.7", "0.6.0"]
GOOD = {"onnxscript": "0.5.3", "onnxruntime": "1.20.1", "onnx": "1.17.0"}
BAD_SET = {"onnxscript": "0.6.0", "onnxruntime": "1.22.0", "onnx": "1.18.0"}
CANDS = {"onnxscript": OS, "onnxruntime": ["1.21.0", "1.21.1", "1.22.0"],
         "onnx": ["1.18.0"]}


def _searched(b: Bisection) -> list[Probe]:
    """The probes the bound counts (not the repeats of the bad set, not the rechecks)."""
    return [p for p in b.probes if p.phase not in (Phase.REPEAT, Phase.RECHECK)]


def _broken_from(pkg: str, first: str) -> World:
    return lambda pins: BAD if Version(pins[pkg]) >= Version(first) else PASS


def test_isolates_the_package_and_bisects_it_with_the_others_held_good() -> None:
    b, installer = _bisect(_broken_from("onnxscript", "0.5.6"), GOOD, BAD_SET, CANDS)
    assert b.culprit == "onnxscript"
    rec = {p.package: p for p in b.packages}
    assert (rec["onnxscript"].last_good, rec["onnxscript"].first_bad) == ("0.5.4", "0.5.6")
    assert rec["onnxscript"].exact
    assert rec["onnxruntime"].involved is False and rec["onnx"].involved is False
    assert b.answer() == ("first bad: onnxscript 0.5.6 (0.5.4 good); "
                          "onnxruntime and onnx not involved")
    # the bad set twice (the failure repeats), then every probe moved at most one package
    assert installer.asked[:2] == [BAD_SET, BAD_SET]
    for pins in installer.asked[2:]:
        moved = [p for p in pins if pins[p] != GOOD[p]]
        assert len(moved) <= 1, pins
    assert rec["onnxscript"].probes <= probe_bound(len(OS))
    # the boundary was probed a second time each before onnxscript was named
    assert rec["onnxscript"].confirmed
    assert [(p.version, p.verdict) for p in b.probes if p.phase is Phase.RECHECK] == \
        [("0.5.4", Verdict.GOOD), ("0.5.6", Verdict.BAD)]


def test_a_different_failure_is_a_skip_and_the_search_steps_around_it() -> None:
    def world(pins: Mapping[str, str]) -> CaseResult | str:
        v = Version(pins["onnxscript"])
        if v == Version("0.5.6"):
            return _export_error("ModuleNotFoundError")  # cannot export at all: skip
        return BAD if v >= Version("0.5.7") else PASS

    b, _ = _bisect(world, {"onnxscript": "0.5.3"}, {"onnxscript": "0.6.0"},
                   {"onnxscript": OS})
    rec = b.packages[0]
    assert rec.skipped == ["0.5.6"]
    assert (rec.last_good, rec.first_bad) == ("0.5.4", "0.5.7")
    assert not rec.exact and rec.skipped_between == ["0.5.6"]
    assert "not decided: 0.5.6" in b.answer()
    skip = next(p for p in b.probes if p.verdict is Verdict.SKIP)
    assert "export_error: ModuleNotFoundError" in skip.why  # the cause is reported


@pytest.mark.parametrize("broken", ["cannot install onnxscript==0.5.6: no wheel",
                                    "timed out after 900 s", "the run wrote no results"])
def test_install_failures_crashes_and_hangs_are_skips_never_verdicts(broken: str) -> None:
    def world(pins: Mapping[str, str]) -> CaseResult | str:
        v = Version(pins["onnxscript"])
        return broken if v == Version("0.5.6") else BAD if v >= Version("0.5.6") else PASS

    b, _ = _bisect(world, {"onnxscript": "0.5.3"}, {"onnxscript": "0.6.0"},
                   {"onnxscript": OS})
    rec = b.packages[0]
    assert rec.skipped == ["0.5.6"] and rec.first_bad == "0.5.7"
    assert [p.why for p in b.probes if p.verdict is Verdict.SKIP] == [broken]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.data())
def test_probe_bound_holds_and_the_answer_is_exact(n: int, data: st.DataObject) -> None:
    versions = [f"1.{i}.0" for i in range(1, n + 1)]
    first = data.draw(st.integers(0, n - 1))
    world = _broken_from("pkg", versions[first])
    b, _ = _bisect(world, {"pkg": "1.0.0"}, {"pkg": versions[-1]}, {"pkg": versions})
    rec = b.packages[0]
    assert rec.first_bad == versions[first] and rec.exact and rec.confirmed
    assert len(_searched(b)) == rec.probes <= math.ceil(math.log2(n)) + 2 if n > 1 else 2
    assert len(b.probes) == rec.probes + 4  # 2 repeats of the bad set, 2 rechecks


@pytest.mark.parametrize("n", [8, 32])
def test_skips_earn_probes_up_to_twice_the_bound_then_leave_versions_undecided(n: int) -> None:
    versions = [f"1.{i}.0" for i in range(1, n + 1)]

    def world(pins: Mapping[str, str]) -> CaseResult | str:
        v = Version(pins["pkg"])
        if Version("1.1.0") < v < Version(versions[-1]):
            return "timed out after 900 s"
        return BAD if v >= Version(versions[-1]) else PASS

    b, _ = _bisect(world, {"pkg": "1.0.0"}, {"pkg": versions[-1]}, {"pkg": versions})
    rec = b.packages[0]
    assert rec.probes == len(_searched(b)) <= 2 * probe_bound(n)
    assert rec.first_bad == versions[-1] and not rec.exact and "not decided" in b.answer()
    if n == 32:  # 30 versions that cannot be judged: the bound stops it
        assert rec.probes == 2 * probe_bound(32) and rec.untested
        assert f"probe bound of {probe_bound(32)} (+" in rec.not_probed


def test_a_good_set_that_fails_in_a_probe_is_a_contradiction() -> None:
    b, _ = _bisect(lambda pins: BAD, GOOD, BAD_SET, CANDS)
    assert b.culprit is None and [p.phase for p in b.probes] == \
        [Phase.REPEAT, Phase.REPEAT, Phase.CONFIRM, Phase.CONFIRM]
    assert b.answer().startswith("contradiction: the good set passed these cases, but a "
                                 "probe of it fails them as the bad run did (mismatch): the "
                                 "failure does not come from the packages that differ")
    b, _ = _bisect(lambda pins: "cannot install x" if pins == GOOD else BAD, GOOD, BAD_SET,
                   CANDS)
    assert "do not pass in a probe of the good set (skip: cannot install x)" in b.answer()


def test_heavy_packages_are_refused_and_reported_not_probed() -> None:
    good = {"torch": "2.12.0", "onnxscript": "0.5.3"}
    bad = {"torch": "2.13.0", "onnxscript": "0.6.0"}
    base = {"torch": "2.12.0", "onnxscript": "0.6.0"}  # bisect runs where good torch is
    b, installer = _bisect(_broken_from("onnxscript", "0.5.7"), good, bad,
                           {"onnxscript": OS, "torch": ["2.12.1", "2.13.0"]},
                           refuse=lambda pins: refusal(pins, base, allow_heavy=False))
    assert b.culprit == "onnxscript"
    assert all(p["torch"] == "2.12.0" for p in installer.asked)  # never installed
    assert "not probed: torch (2.12.0..2.13.0, 2 release(s): refused: installing torch " \
           "2.13.0 (a multi-GB build); --allow-heavy allows it)" in b.answer()
    assert refusal({"torch": "2.13.0"}, base, allow_heavy=True) == ""


def test_the_budget_stops_the_search() -> None:
    b, _ = _bisect(_broken_from("onnxscript", "0.5.6"), GOOD, BAD_SET, CANDS,
                   budget=Budget(probes=4))
    assert len(b.probes) == 4  # 2 repeats, the good set, onnxscript alone
    assert any("probe budget of 4 spent" in p.not_probed for p in b.packages)
    # what an earlier failure of the same command spent counts (probes and minutes)
    b, _ = _bisect(_broken_from("onnxscript", "0.5.6"), GOOD, BAD_SET, CANDS,
                   budget=Budget(probes=5, used_probes=4))
    assert len(b.probes) == 1 and "the bad set was not probed again" in b.repeat
    # a boundary the budget leaves unconfirmed names no culprit (exit 1), and says so
    b, _ = _bisect(_broken_from("onnxscript", "0.5.6"), {"onnxscript": "0.5.3"},
                   {"onnxscript": "0.6.0"}, {"onnxscript": OS}, budget=Budget(probes=7))
    assert b.culprit is None and b.answer().startswith(
        "first bad, not confirmed: onnxscript 0.5.6 (0.5.4 good); the boundary was not "
        "probed a second time (probe budget of 7 spent)")
    b, _ = _bisect(_broken_from("onnxscript", "0.5.6"), GOOD, BAD_SET, CANDS,
                   budget=Budget(seconds=60, used_seconds=61))
    assert not b.probes and "time budget of 1 min spent" in b.answer()


def test_no_single_package_reproduces_it() -> None:
    def world(pins: Mapping[str, str]) -> CaseResult | str:
        both = pins["onnxscript"] == "0.6.0" and pins["onnxruntime"] == "1.22.0"
        return BAD if both else PASS

    b, _ = _bisect(world, GOOD, BAD_SET, CANDS)
    assert b.culprit is None
    assert "onnxscript, onnxruntime, onnx moved together do (the repeats of the bad set): " \
        "they break it together" in b.answer()
    assert b.probes[0].pins == BAD_SET and b.probes[0].phase is Phase.REPEAT
    assert "| bad set | \\- | repeat | bad |" in markdown([b])
    b, _ = _bisect(lambda pins: PASS, GOOD, BAD_SET, CANDS)  # the failure never reproduces
    assert b.answer().startswith(f"flaky, not bisected: {CASE} does not repeat (the bad run "
                                 "failed (mismatch); a probe of the same bad set passed")
    assert len(b.probes) == 1 and b.culprit is None


def test_next_index_prefers_the_middle_and_steps_around_skips() -> None:
    assert next_index(0, 8, set()) == 4
    assert next_index(0, 8, {4}) == 3
    assert next_index(0, 2, {1}) is None


def test_judge_by_signature() -> None:
    want = {CASE: failure_signature(BAD)}
    assert judge(want, {CASE: BAD})[0] is Verdict.BAD
    assert judge(want, {CASE: PASS})[0] is Verdict.GOOD
    verdict, _, why = judge(want, {CASE: _export_error("KeyError")})
    assert verdict is Verdict.SKIP and "not the bad run's mismatch" in why
    assert judge(want, {})[0] is Verdict.SKIP
    skipped = CaseResult(BAD.key, Outcome.SKIPPED, "no cuda")
    assert judge(want, {CASE: skipped})[0] is Verdict.SKIP


def test_the_answer_joins_results_json_and_the_summary() -> None:
    b, _ = _bisect(_broken_from("onnxscript", "0.5.6"), GOOD, BAD_SET, CANDS)
    run = RunResult(cases=[BAD], bisect=[b])
    back = RunResult.from_dict(json.loads(json.dumps(run.to_dict())))
    assert [x.answer() for x in back.bisect] == [b.answer()]
    text = markdown(back.bisect)
    assert "first bad: onnxscript 0.5.6 (0.5.4 good)" in text
    assert "| onnxscript | 0.5.6 | bisect | bad |" in text


# ------------------------------------------------------------ the index, on a local server

RELEASES = {
    "0.5.3": [{"yanked": False, "upload_time_iso_8601": "2025-01-01T00:00:00Z"}],
    "0.5.4": [{"yanked": False, "upload_time_iso_8601": "2025-02-01T00:00:00Z"}],
    "0.5.5": [{"yanked": True, "upload_time_iso_8601": "2025-02-02T00:00:00Z"}],
    "0.5.6rc1": [{"yanked": False, "upload_time_iso_8601": "2025-02-03T00:00:00Z"}],
    "0.5.6": [{"yanked": False, "upload_time_iso_8601": "2025-03-01T00:00:00Z"}],
    "0.5.8": [],  # no files: nothing to install
    "0.6.0": [{"yanked": False, "upload_time_iso_8601": "2025-04-01T00:00:00Z"}],
}


@pytest.fixture(scope="module")
def local_index() -> Iterator[str]:
    with serve_json({"onnxscript": {"info": {"name": "onnxscript"}, "releases": RELEASES}}) \
            as url:
        yield url


def test_versions_between_from_the_index(local_index: str) -> None:
    rel = index.releases("onnxscript", local_index)
    assert index.between(rel, "0.5.3", "0.6.0") == ["0.5.4", "0.5.6", "0.6.0"]
    assert index.between(rel, "0.5.3", "0.6.0", pre=True, yanked=True) == \
        ["0.5.4", "0.5.5", "0.5.6rc1", "0.5.6", "0.6.0"]
    assert index.between(rel, "0.6.0", "0.5.3") == ["0.5.6", "0.5.4", "0.5.3"]  # downgrade
    assert index.between(rel, "0.5.3", "0.5.7+local") == ["0.5.4", "0.5.6", "0.5.7+local"]
    assert {r.version: r.uploaded for r in rel}["0.5.6"].startswith("2025-03-01")
    with pytest.raises(UserError, match="not on the index"):
        index.releases("nosuch", local_index)


def test_sets_from_pins_requirements_lock_and_results(tmp_path: Path) -> None:
    assert parse_pins("onnxscript==0.5.3, onnxruntime==1.22.0", "pins") == \
        {"onnxscript": "0.5.3", "onnxruntime": "1.22.0"}
    req = tmp_path / "requirements.txt"
    req.write_text("# lock\nonnxscript==0.5.3  # via x\ntorch>=2\n--index-url x\n"
                   "onnx_ir==1.1.0 \\\n    --hash=sha256:00\n")
    assert load_set(str(req))[0] == {"onnxscript": "0.5.3", "onnx-ir": "1.1.0"}
    lock = tmp_path / "uv.lock"
    lock.write_text('[[package]]\nname = "onnxruntime"\nversion = "1.22.0"\n')
    assert load_set(str(lock))[0] == {"onnxruntime": "1.22.0"}
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"versions": {"torch": "2.13.0+cpu", "python": "3.11",
                                            "providers_available": ["CPU"]}}))
    assert load_set(str(res))[0] == {"torch": "2.13.0+cpu"}
    bad = tmp_path / "bad.txt"
    bad.write_text("onnxscript==0.5.3\nnot a requirement!\n")
    with pytest.raises(UserError, match=r"bad.txt:2: 'not a requirement!' is not a requirement"):
        load_set(str(bad))
    with pytest.raises(UserError, match="not a file, and not pins"):
        load_set("nosuchfile")
    assert differing({"onnxscript": "1", "torch": "2"}, {"onnxscript": "2", "torch": "2"},
                     ["torch", "onnxscript"]) == ["onnxscript"]


def test_phase_of_each_probe_is_recorded() -> None:
    b, _ = _bisect(_broken_from("onnxscript", "0.5.6"), GOOD, BAD_SET, CANDS)
    assert [p.phase for p in b.probes[:3]] == [Phase.REPEAT, Phase.REPEAT, Phase.CONFIRM]
    assert b.probes[2].package == ""
    assert {p.phase for p in b.probes[3:6]} == {Phase.ISOLATE}


# ------------------------------------------------- upstream: PRs merged between the releases

def test_likely_introduced_by_lists_prs_merged_between_the_releases(tmp_path: Path) -> None:
    from github_server import FakeGitHub, Item

    from parity_gate.bisect.upstream import merged_between
    from parity_gate.github.client import ClientSettings, GitHubClient

    with FakeGitHub() as gh:
        repo = "microsoft/onnxscript"
        gh.items += [
            Item(repo, 10, "[torchlib] Rewrite take_along_dim", pr=True, merged=True,
                 merged_at="2025-02-15T00:00:00Z"),
            Item(repo, 11, "[torchlib] take_along_dim docs", pr=True, merged=True,
                 merged_at="2024-12-01T00:00:00Z"),   # before the last good release
            Item(repo, 12, "[torchlib] Fix atan2", pr=True, merged=True,
                 merged_at="2025-02-16T00:00:00Z"),   # another function
            Item(repo, 13, "take_along_dim: try again", pr=True,
                 merged_at="2025-02-17T00:00:00Z"),   # not merged
        ]
        client = GitHubClient(gh.url, None,
                              ClientSettings(sleep=lambda s: None, search_per_minute=6000))
        prs, note = merged_between(client, "onnxscript", "2025-02-01T00:00:00Z",
                                   "2025-03-01T00:00:00Z", "take_along_dim")
    assert [p.number for p in prs] == [10] and note == ""
    assert prs[0].url.endswith("/pull/10") and prs[0].touches == "take_along_dim"
    b, _ = _bisect(_broken_from("onnxscript", "0.5.6"), GOOD, BAD_SET, CANDS)
    from dataclasses import replace
    b.packages = [replace(p, upstream=prs) if p.package == "onnxscript" else p
                  for p in b.packages]
    text = markdown([b])
    assert "Likely introduced by (between 0.5.4 and 0.5.6, looking for the regression):" \
        in text
    assert "- [onnxscript#10](" in text and "(merged 2025-02-15; mentions take\\_along\\_dim)" \
        in text


def test_no_upstream_search_without_a_function_or_a_repository() -> None:
    from parity_gate.bisect.upstream import merged_between
    from parity_gate.github.client import GitHubClient

    client = GitHubClient("http://127.0.0.1:9", None)
    assert merged_between(client, "numpy", "a", "b", "x")[1] == "no repository known for numpy"
    assert "no function or kernel" in merged_between(client, "onnxscript", "a", "b", "")[1]


# ----------------------------------------------------------- the Action: bisect on-regression

def test_action_bisect_inputs_and_decisions() -> None:
    from parity_gate.github.bisect_step import base_sha, lock_files, why_not
    from parity_gate.github.inputs import InputError, parse_budget, read_inputs

    assert parse_budget("16,45m") == (16, 45) and parse_budget("2h") == (None, 120)
    assert read_inputs({"INPUT_BISECT": "on-regression"})["bisect_budget"] == "16,45m"
    with pytest.raises(InputError, match=r"bisect_budget: got 'lots' \(expected probes"):
        read_inputs({"INPUT_BISECT_BUDGET": "lots"})
    with pytest.raises(InputError, match="bisect: got 'always'"):
        read_inputs({"INPUT_BISECT": "always"})
    assert lock_files(["src/a.py", "requirements-dev.txt", "ci/uv.lock", "poetry.lock",
                       "requirements/base.in", "README.md"]) == \
        ["requirements-dev.txt", "ci/uv.lock", "poetry.lock", "requirements/base.in"]
    event = {"pull_request": {"base": {"sha": "abc123"}}}
    assert base_sha(event) == "abc123" and base_sha({}) is None
    regressed = RunResult(cases=[BAD])
    from parity_gate.model.gate import GateDecision
    regressed.gate = GateDecision(blocking=[CASE])
    assert why_not(regressed, event, ["uv.lock"], "") == ""
    assert why_not(regressed, event, ["src/a.py"], "") == \
        "the pull request changes no requirements or lock file"
    assert why_not(regressed, {}, None, "") .startswith("not a pull request event")
    assert "fetch-depth" in why_not(regressed, event, None,
                                    "git diff abc...HEAD failed; check out with "
                                    "`fetch-depth: 0`")
    assert why_not(RunResult(cases=[PASS], gate=GateDecision()), event, ["uv.lock"], "") \
        == "no regression"


# ------------------------------------------------------------------ the command's bad input

@pytest.fixture
def bad_results(tmp_path: Path) -> Path:
    from parity_gate.model.gate import GateDecision

    path = tmp_path / "results.json"
    run = RunResult(cases=[BAD], versions={"onnxscript": "0.6.1"},
                    gate=GateDecision(blocking=[CASE]))
    path.write_text(json.dumps(run.to_dict()))
    return path


@pytest.mark.parametrize(("argv", "message"), [
    (["--good", "onnxscript==0.6.0", "--bad", "{res}", "--select", "nomatch/*", "m.yml"],
     "--select nomatch/*: matches no failing case of the bad run (1 failing)"),
    (["--good", "onnxscript>=0.6", "--bad", "{res}"],
     "onnxscript>=0.6: not a file, and not pins like onnxscript==0.5.3"),
    (["--good", "onnxscript==0.6.0", "--bad", "{res}"],
     "bisect: the cases come from `parity-gate run`: give its manifest"),
    (["--good", "onnxscript==0.6.0", "--bad", "onnxscript==0.6.1"],
     "bisect: which cases failed? (expected --from RESULTS.json"),
    (["nosuch.yml", "--good", "onnxscript==0.6.0", "--bad", "{res}"],
     "nosuch.yml: no such manifest"),
])
def test_bad_input_is_one_line_and_exit_2(bad_results: Path, argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from parity_gate.cli import main

    code = main(["bisect", *[a.replace("{res}", str(bad_results)) for a in argv]])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(message) and "\n" not in err, err


def test_the_upstream_search_term_names_the_kernel_for_an_onnxruntime_culprit() -> None:
    from parity_gate.bisect.upstream import touched

    reason = ("onnxruntime load: [ONNXRuntimeError] : 1 : FAIL : Exception during "
              "initialization: element_wise_ops.cc:2486 onnxruntime::Mod::Mod(const "
              "onnxruntime::OpKernelInfo&) Integer modulo by zero")
    case = CaseResult(BAD.key, Outcome.INVALID_MODEL, reason)
    assert touched(case, "onnxruntime") == "Mod"
    running = CaseResult(BAD.key, Outcome.RUNTIME_ERROR, "Non-zero status code returned "
                         "while running Pad node. Name:'n0'")
    assert touched(running, "onnxruntime") == "Pad"
    assert touched(_export_error("KeyError"), "onnxscript") == ""


def test_default_cases_are_those_that_passed_in_the_good_run() -> None:
    from parity_gate.bisect.command import failing_cases
    from parity_gate.model.gate import GateDecision

    other = CaseResult(CaseKey("cnn", "float32", "img", 2, "cpu"), Outcome.MISMATCH, "x")
    bad = RunResult(cases=[BAD, other], gate=GateDecision(blocking=[CASE, other.id]))
    good = RunResult(cases=[PASS, other])  # `other` failed there too: not a regression
    assert [c.id for c in failing_cases(bad, [], good)] == [CASE]
    assert [c.id for c in failing_cases(bad, [])] == [CASE, other.id]  # the gate's blocking
    assert [c.id for c in failing_cases(bad, ["cnn/*"], good)] == [other.id]
    with pytest.raises(UserError, match="no case fails in the bad run that passed"):
        failing_cases(RunResult(cases=[other]), [], good)
