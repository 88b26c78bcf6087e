"""`parity-gate bisect` never gives a confident wrong answer: versions compared as pip does,
specs checked against the index before any probe, flaky cases reported (never bisected),
the boundary probed twice, the upstream window in either direction in the owner's words,
an own-model change said in words. On fakes: a fake installer and runner (the real
`Prober`, `judge` and `search`), a local index and the local GitHub server."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from bisect_wheels import serve_json
from test_bisect_units import (
    BAD,
    BAD_SET,
    CANDS,
    CASE,
    GOOD,
    OS,
    PASS,
    FakeInstaller,
    FakeRunner,
    World,
    _bisect,
    _broken_from,
)

from parity_gate.bisect.index import Release, between, released, uploaded
from parity_gate.bisect.judge import failure_signature, nondeterminism
from parity_gate.bisect.probe import Prober, refusal
from parity_gate.bisect.search import OWN_MODEL, search
from parity_gate.bisect.sets import differing, same_release
from parity_gate.model.bisect import Bisection, Phase, Verdict
from parity_gate.model.localisation import Culprit, Localisation
from parity_gate.model.precision import Reference, Ruling
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.report.bisect import markdown

RANDOM = ("eager is not deterministic: two runs on the same inputs differ in output0 (a "
          "random op in forward?)")


def _random(case: CaseResult) -> CaseResult:
    """The case as the gate writes it when its second eager run differed."""
    return replace(case, reference=Reference(Ruling.UNVERIFIED, error=RANDOM))


# ---------------------------------------------------------------- versions compared as pip does

def test_a_local_label_is_the_same_release() -> None:
    assert same_release("2.13.0+cpu", "2.13.0") and same_release("1.0", "1.0.0")
    assert not same_release("2.13.0+cpu", "2.13.1") and not same_release(None, "1")
    # the running torch 2.13.0+cpu is reused for a torch==2.13.0 pin: never heavy
    assert refusal({"torch": "2.13.0", "onnxruntime": "1.22.0"}, {"torch": "2.13.0+cpu"},
                   allow_heavy=False) == ""
    assert refusal({"torch": "2.14.0"}, {"torch": "2.13.0+cpu"}, False).startswith("refused")
    # a lock file bumping torch to the running build's release and onnxruntime together:
    # only onnxruntime is bisected
    assert differing({"torch": "2.12.0", "onnxruntime": "1.21.0"},
                     {"torch": "2.13.0", "onnxruntime": "1.22.0"}, ["torch", "onnxruntime"]) \
        == ["torch", "onnxruntime"]
    assert differing({"torch": "2.13.0+cpu", "onnxruntime": "1.21.0"},
                     {"torch": "2.13.0", "onnxruntime": "1.22.0"},
                     ["torch", "onnxruntime"]) == ["onnxruntime"]
    rel = [Release("2.12.0"), Release("2.13.0", uploaded="2026-01-02T00:00:00Z")]
    assert released(rel, "2.13.0+cpu") and not released(rel, "99.0.0")
    assert uploaded(rel, "2.13.0+cpu").startswith("2026-01-02")
    assert between(rel, "2.12.0", "2.13.0+cpu") == ["2.13.0+cpu"]


def test_the_torch_pin_users_write_probes_with_the_running_torch() -> None:
    """torch 2.12.0 → 2.13.0 and onnxruntime moved together, bisect running on torch
    2.13.0+cpu: torch is held at the running build in every probe (its good release is the
    multi-GB install), and onnxruntime is still found."""
    base = {"torch": "2.13.0+cpu"}
    good = {"torch": "2.12.0", "onnxruntime": "1.21.0"}
    bad = {"torch": "2.13.0", "onnxruntime": "1.22.0"}
    b, installer = _bisect(_broken_from("onnxruntime", "1.22.0"), good, bad,
                           {"torch": ["2.12.1", "2.13.0"], "onnxruntime": ["1.21.1", "1.22.0"]},
                           refuse=lambda pins: refusal(pins, base, allow_heavy=False))
    assert b.culprit == "onnxruntime" and b.packages[1].first_bad == "1.22.0"
    assert installer.asked and all(pins["torch"] == "2.13.0" for pins in installer.asked)
    assert b.answer().startswith("first bad: onnxruntime 1.22.0 (1.21.1 good); not probed: "
                                 "torch (held at 2.13.0, where bisect runs, in every probe: "
                                 "refused: installing torch 2.12.0 (a multi-GB build)")
    # when torch's move is what broke it, the good set with torch held fails: said so
    b, _ = _bisect(_broken_from("torch", "2.13.0"), good, bad,
                   {"torch": ["2.12.1", "2.13.0"], "onnxruntime": ["1.21.1", "1.22.0"]},
                   refuse=lambda pins: refusal(pins, base, allow_heavy=False))
    assert b.culprit is None and "torch's move is the suspect" in b.answer()
    # torch alone: nothing is probed, and the answer says why
    b, installer = _bisect(_broken_from("torch", "2.13.0"), {"torch": "2.12.0"},
                           {"torch": "2.13.0"}, {"torch": ["2.13.0"]},
                           refuse=lambda pins: refusal(pins, base, allow_heavy=False))
    assert not installer.asked and b.answer().startswith(
        "nothing else differs between the sets: no probe can tell; not probed: torch (held "
        "at 2.13.0")


# ---------------------------------------------------------------------------- flaky cases

def test_a_case_the_gate_found_nondeterministic_is_flaky_in_any_probe() -> None:
    def world(pins: Mapping[str, str]) -> CaseResult | str:
        return _random(BAD) if pins["onnxscript"] >= "0.5.6" else PASS

    b, _ = _bisect(world, {"onnxscript": "0.5.3"}, {"onnxscript": "0.6.0"},
                   {"onnxscript": OS})
    assert b.culprit is None and b.flaky == {CASE: RANDOM}
    assert len(b.probes) == 1  # the first repeat of the bad set carried the evidence
    assert b.answer().startswith(f"flaky, not bisected: {CASE} does not repeat (eager is "
                                 "not deterministic")
    assert f"- `{CASE.replace('_', chr(92) + '_')}`: eager is not deterministic" in \
        markdown([b])
    assert nondeterminism(_random(BAD)) == RANDOM and nondeterminism(BAD) == ""


def test_a_boundary_that_does_not_repeat_names_no_culprit() -> None:
    """A model that fails about half its runs: whichever way the probes fall, the answer
    is never a culprit; here the second probe of the first bad release passes."""
    calls: dict[str, int] = {}

    def world(pins: Mapping[str, str]) -> CaseResult | str:
        key = json.dumps(sorted(pins.items()))
        calls[key] = calls.get(key, 0) + 1
        if pins["onnxscript"] == "0.5.6" and calls[key] > 2:  # (install, run): 2 calls
            return PASS  # the second probe of the first bad release passes
        return BAD if pins["onnxscript"] >= "0.5.6" else PASS

    b, _ = _bisect(world, {"onnxscript": "0.5.3"}, {"onnxscript": "0.6.0"},
                   {"onnxscript": OS})
    assert b.culprit is None
    assert b.flaky == {CASE: "onnxscript 0.5.6 was bad in one probe and good in another"}
    assert b.probes[-1].phase is Phase.RECHECK


def test_a_last_good_release_that_fails_on_its_second_probe_names_the_failing_cases() -> None:
    other = "cnn/float32/img/b2/cpu"
    other_key = replace(BAD.key, module="cnn", inputs="img")
    calls: dict[str, int] = {}

    class Two(FakeRunner):
        def run(self, python: Path, name: str,
                cases: list[str]) -> tuple[dict[str, CaseResult] | None, str]:
            pins = dict(json.loads(python.name))
            key = json.dumps(sorted(pins.items()))
            calls[key] = calls.get(key, 0) + 1
            first = BAD if pins["onnxscript"] >= "0.5.6" else PASS
            second = first
            if pins["onnxscript"] == "0.5.4" and calls[key] > 1:
                second = BAD  # the other case fails on 0.5.4's second probe
            return {CASE: first, other: replace(second, key=other_key)}, ""

    world = _broken_from("onnxscript", "0.5.6")
    prober = Prober(FakeInstaller(world), Two(world),
                    {CASE: failure_signature(BAD), other: failure_signature(BAD)})
    b = search({"onnxscript": "0.5.3"}, {"onnxscript": "0.6.0"}, {"onnxscript": OS}, prober,
               cases=[CASE, other])
    assert b.culprit is None
    assert b.flaky == {other: "onnxscript 0.5.4 was good in one probe and bad in another"}


@pytest.mark.parametrize("seed", range(200))
def test_a_coin_flip_model_is_never_given_a_culprit(seed: int) -> None:
    """Each run of the case fails with probability one half, whatever is installed (and
    the gate's second eager run tells only half the time): no seed names a package."""
    import random

    rng = random.Random(seed)

    def world(pins: Mapping[str, str]) -> CaseResult | str:
        if rng.random() < 0.5:
            return PASS
        return _random(BAD) if rng.random() < 0.5 else BAD

    b, _ = _bisect(world, GOOD, BAD_SET, CANDS)
    assert b.culprit is None, b.answer()
    assert b.flaky, b.answer()


def test_a_good_set_that_fails_once_and_passes_once_is_flaky() -> None:
    calls: dict[str, int] = {}

    def world(pins: Mapping[str, str]) -> CaseResult | str:
        if pins["onnxscript"] != "0.5.3":
            return BAD
        calls["good"] = calls.get("good", 0) + 1
        return BAD if calls["good"] <= 2 else PASS  # (install, run) of the first probe

    b, _ = _bisect(world, {"onnxscript": "0.5.3"}, {"onnxscript": "0.6.0"},
                   {"onnxscript": OS})
    assert b.culprit is None and b.flaky == {
        CASE: "the good set failed as the bad run did in one probe and passed in another"}


def test_the_good_set_and_the_repeats_run_once_per_command() -> None:
    """Two failures (two signatures): the second search reuses the first's runs of the good
    set and of the bad set, and they are not counted against the budget again."""
    other = "cnn/float32/img/b2/cpu"
    other_key = replace(BAD.key, module="cnn", inputs="img")
    assert other_key.id == other
    world = _broken_from("onnxscript", "0.5.6")
    installer = FakeInstaller(world)
    runs: list[list[str]] = []

    class Both(FakeRunner):
        def run(self, python: Path, name: str,
                cases: list[str]) -> tuple[dict[str, CaseResult] | None, str]:
            runs.append(cases)
            got, why = super().run(python, name, cases)
            if got is None:
                return None, why
            return {CASE: got[CASE], other: replace(got[CASE], key=other_key)}, ""

    memo: dict[str, object] = {}
    found = []
    for case in (CASE, other):
        prober = Prober(installer, Both(world), {case: failure_signature(BAD)},
                        everyone=[CASE, other], memo=memo)  # type: ignore[arg-type]
        found.append(search({"onnxscript": "0.5.3"}, {"onnxscript": "0.6.0"},
                            {"onnxscript": OS}, prober, cases=[case]))
    assert [b.culprit for b in found] == ["onnxscript", "onnxscript"]
    first, second = found
    assert [p.reused for p in second.probes[:3]] == [True, True, True]
    assert not any(p.reused for p in second.probes[3:])
    assert runs[:3] == [[CASE, other]] * 3  # both failures' cases, in one run each
    assert len(runs) == len(first.probes) + len(second.probes) - 3


# --------------------------------------------------------------------- own-model change

def test_an_own_model_change_is_said_in_words() -> None:
    b, installer = _bisect(lambda pins: BAD, GOOD, dict(GOOD), CANDS)
    assert not installer.asked and b.culprit is None
    assert b.answer() == OWN_MODEL
    assert "no dependency is involved" in OWN_MODEL and "the model's own" in OWN_MODEL


# ------------------------------------------------------------------- upstream: the window

def _culprit_case(onnx_nodes: list[str], aten: str = "aten.layer_norm.default") -> CaseResult:
    loc = Localisation(culprit=Culprit(scope="(root)", kind="Net", aten=aten,
                                       call=f"{aten}(%x)", onnx_nodes=onnx_nodes))
    return replace(BAD, localisation=loc)


def test_upstream_vocabulary_follows_the_owner() -> None:
    from parity_gate.bisect.upstream import looks_for, terms

    case = _culprit_case(["LayerNormalization"])
    assert terms(case, "onnxruntime") == ["LayerNormalization"]  # never the ATen name
    assert terms(case, "onnxscript") == ["aten_layer_norm", "layer_norm"]
    assert terms(case, "torch") == ["layer_norm"]
    schema = replace(BAD, reason="onnx.onnx_cpp2py_export.checker.ValidationError: No Op "
                     "registered for RMSNormalization with domain_version of 23")
    assert terms(schema, "onnx") == ["RMSNormalization"]
    assert looks_for("1.26.0", "1.27.0") == "regression"
    assert looks_for("1.27.0", "1.26.0") == "fix"


@pytest.fixture
def github() -> Iterator[object]:
    from github_server import FakeGitHub, Item

    with FakeGitHub() as gh:
        ort = "microsoft/onnxruntime"
        gh.items += [
            Item(ort, 501, "Fix LayerNormalization for rows with a large offset", pr=True,
                 merged=True, merged_at="2026-02-10T00:00:00Z"),
            Item(ort, 502, "LayerNormalization: vectorise", pr=True, merged=True,
                 merged_at="2025-10-01T00:00:00Z"),   # before 1.26.0: outside the window
            Item(ort, 503, "layer_norm docs", pr=True, merged=True,
                 merged_at="2026-02-11T00:00:00Z"),   # the ATen name: not ORT's vocabulary
        ]
        yield gh


def test_upstream_finds_the_fix_in_a_downgrade_window(github: object,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime 1.27.0 good, 1.26.0 bad (a fix being located): the window runs from
    1.26.0's upload to 1.27.0's, and the kernel's name finds the fix."""
    from parity_gate.bisect.command import _upstream

    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("PARITY_GATE_UPSTREAM_TOKEN", raising=False)
    b, _ = _bisect(_broken_from_below("onnxruntime", "1.27.0"), {"onnxruntime": "1.27.0"},
                   {"onnxruntime": "1.26.0"}, {"onnxruntime": ["1.26.0"]})
    assert b.culprit == "onnxruntime"
    refs = {"onnxruntime": [Release("1.26.0", uploaded="2026-01-15T00:00:00Z"),
                            Release("1.27.0", uploaded="2026-03-01T00:00:00Z")]}
    _upstream(b, refs, [_culprit_case(["LayerNormalization"])], github.url)  # type: ignore[attr-defined]
    rec = b.packages[0]
    assert (rec.last_good, rec.first_bad, rec.upstream_looks_for) == \
        ("1.27.0", "1.26.0", "fix")
    assert [c.number for c in rec.upstream] == [501] and rec.upstream_note == ""
    text = markdown([b])
    assert "Likely fixed by (between 1.27.0 and 1.26.0, looking for the fix):" in text
    assert "(merged 2026-02-10; mentions LayerNormalization)" in text
    [query] = [e.query["q"][0] for e in github.log if e.path == "/search/issues"]  # type: ignore[attr-defined]
    assert "merged:2026-01-15..2026-03-01" in query and "LayerNormalization" in query


def _broken_from_below(pkg: str, fixed: str) -> World:
    from packaging.version import Version

    return lambda pins: BAD if Version(pins[pkg]) < Version(fixed) else PASS


# ---------------------------------------------------------- bad input: one line, exit 2

RELEASES = {v: [{"yanked": False, "upload_time_iso_8601": f"2025-0{i + 1}-01T00:00:00Z"}]
            for i, v in enumerate(["0.5.3", "0.5.4", "0.6.0", "0.6.1"])}


@pytest.fixture(scope="module")
def index_url() -> Iterator[str]:
    with serve_json({name: {"info": {"name": name}, "releases": RELEASES}
                     for name in ("onnxscript", "onnxruntime")}) as url:
        yield url


@pytest.fixture
def bad_run(tmp_path: Path) -> Path:
    from parity_gate.model.gate import GateDecision

    path = tmp_path / "results.json"
    run = RunResult(cases=[BAD], versions={"onnxscript": "0.6.1"},
                    gate=GateDecision(blocking=[CASE]))
    path.write_text(json.dumps(run.to_dict()))
    return path


@pytest.mark.parametrize(("good", "bad", "extra", "message"), [
    ("onnxscript==0.5.3", "onnxscript==99.0.0", [],
     "bisect: --bad pins: onnxscript==99.0.0 is not a release on {index} (expected one of "
     "its releases; newest: 0.6.1)"),
    ("onnxscript==0.5.0", "onnxscript==0.6.0", [],
     "bisect: --good pins: onnxscript==0.5.0 is not a release on {index}"),
    ("onnxscript==0.5.3,onnxruntme==1.2.0", "onnxscript==0.6.0", [],
     "bisect: --good: onnxruntme: not a package bisect moves (expected one of onnx, "
     "onnxruntime, onnxruntime-gpu, onnxscript, torch; --package onnxruntme adds your own)"),
    ("onnxscript==0.5.3", "onnxscript==0.6.0,onnxruntime==1.22.0", [],
     "bisect: --bad pins: onnxruntime==1.22.0 has no pin in --good (expected both sides to "
     "pin onnxruntime, or neither)"),
    ("onnxscript==0.5.3", "onnxscript==0.6.0", ["--package", "mylib"],
     "bisect: --package mylib: pinned in neither --good nor --bad"),
    ("onnxscript==0.5.3", "onnxscript==0.6.0", ["--max-probes", "0"],
     "bisect: --max-probes 0: expected a positive finite number"),
    ("{manifest}", "onnxscript==0.6.0", [],
     "--good {manifest}: a YAML file (the manifest?), not a package set"),
])
def test_bad_specs_are_one_line_and_exit_2_before_any_probe(
        tmp_path: Path, bad_run: Path, index_url: str, good: str, bad: str, extra: list[str],
        message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from parity_gate.cli import main

    manifest = tmp_path / "parity.yml"
    manifest.write_text("version: 1\nmodules: []\n")
    fill = {"{manifest}": str(manifest)}
    argv = ["bisect", str(manifest), "--good", fill.get(good, good), "--bad", bad, "--from",
            str(bad_run), "--select", CASE, "--index", index_url, "--out",
            str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), *extra]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    want = message.replace("{index}", index_url).replace("{manifest}", str(manifest))
    assert code == 2 and err.startswith(want) and "\n" not in err, err
    assert not (tmp_path / "cache").exists()  # nothing was probed


def test_a_case_the_bad_run_found_nondeterministic_is_flaky_with_no_probe(
        tmp_path: Path, index_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from parity_gate.cli import main

    results = tmp_path / "results.json"
    results.write_text(json.dumps(RunResult(cases=[_random(BAD)]).to_dict()))
    manifest = tmp_path / "parity.yml"
    manifest.write_text("version: 1\nmodules: []\n")
    code = main(["bisect", str(manifest), "--good", "onnxscript==0.5.3", "--bad",
                 "onnxscript==0.6.0", "--from", str(results), "--index", index_url, "--out",
                 str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--no-write"])
    err = capsys.readouterr().err
    assert code == 1, err
    [answer] = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert answer["flaky"] == {CASE: RANDOM} and answer["probes"] == []
    assert f"flaky, not bisected: {CASE} does not repeat (eager is not deterministic" in err
    assert not (tmp_path / "cache").exists()


def test_judged_verdicts_are_unchanged_for_a_steady_case() -> None:
    b, _ = _bisect(_broken_from("onnxscript", "0.5.6"), GOOD, BAD_SET, CANDS)
    assert isinstance(b, Bisection) and b.repeat == \
        "the failure repeated in 2 probes of the bad set"
    assert [p.verdict for p in b.probes[:2]] == [Verdict.BAD, Verdict.BAD]


# ------------------------------------------- the Action: every changed lock file takes part

@pytest.mark.process
def test_the_action_reads_every_changed_requirements_file(
        tmp_path: Path, index_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    """requirements.txt bumps onnxscript, constraints.txt onnxruntime: both sets are read
    (the second file's bad pin is the one the index lacks, so bisect stops there, exit 2,
    before any probe)."""
    import os
    import subprocess

    from parity_gate.github import bisect_step
    from parity_gate.model.gate import GateDecision

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "parity.yml").write_text("version: 1\nmodules: []\n")

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (ws / "requirements.txt").write_text("onnxscript==0.5.3\n")
    (ws / "constraints.txt").write_text("onnxruntime==0.5.3\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    base = git("rev-parse", "HEAD")
    (ws / "requirements.txt").write_text("onnxscript==0.6.0\n")
    (ws / "constraints.txt").write_text("onnxruntime==9.9.9\n")
    git("commit", "-qam", "bump")
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RunResult(cases=[BAD], gate=GateDecision(blocking=[CASE]))
                                  .to_dict()))
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"base": {"sha": base}}}))
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "GITHUB_EVENT_PATH": str(event),
           "PARITY_GATE_BISECT_INDEX": index_url}
    said = bisect_step.run({"manifest": "parity.yml", "bisect_budget": "6,20m"}, ws, results,
                           tmp_path / "out", env, cache_dir=tmp_path / "cache")
    err = capfd.readouterr().err
    assert said.startswith("bisect finished (exit 2)"), (said, err)
    assert f"bisect: --bad {ws / 'constraints.txt'} (pins): onnxruntime==9.9.9 is not a " \
        "release on" in err, err
    assert not (tmp_path / "cache").exists()


def test_an_own_model_change_from_the_command(tmp_path: Path, bad_run: Path, index_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from parity_gate.cli import main

    manifest = tmp_path / "parity.yml"
    manifest.write_text("version: 1\nmodules: []\n")
    code = main(["bisect", str(manifest), "--good", "onnxscript==0.6.1", "--bad",
                 "onnxscript==0.6.1", "--from", str(bad_run), "--index", index_url, "--out",
                 str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--no-write"])
    err = capsys.readouterr().err
    assert code == 1 and f"parity-gate bisect: {OWN_MODEL} (0 probes" in err, err
    assert not (tmp_path / "cache").exists()
