"""The baseline gate: file format, every decision (pure and through real runs), update, deltas.

Real runs use tests/data/gate: tiny Linear modules whose exported graph adds an
`offset` that eager never adds (`torch.onnx.is_in_onnx_export()`), so each
module's eager/ONNX error is real and set by a factory kwarg.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from parity_gate import cli
from parity_gate.compare import Comparison, Verdict
from parity_gate.errors import UserError
from parity_gate.gate import baseline as bl
from parity_gate.gate import decision as gate
from parity_gate.gate.deltas import compute
from parity_gate.model.gate import Figures, GateDecision
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.policy import FAIL_ON
from parity_gate.model.record import encode_real as encode
from parity_gate.model.results import CaseResult, RunResult

DATA = Path(__file__).resolve().parent / "data" / "gate"


def cid(module: str) -> str:
    return f"{module}/float32/vec/b2/cpu"


def workdir(path: Path, baseline: bool = True) -> Path:
    for name in ("parity.yml", "next.yml", "models.py"):
        shutil.copy(DATA / name, path / name)
    if baseline:
        shutil.copy(DATA / "baseline.yml", path / "parity-baseline.yml")
    return path


def gate_of(doc: dict[str, Any]) -> GateDecision:
    """The recorded decision, read through the result model as every consumer reads it."""
    g = RunResult.from_dict(doc).gate
    assert g is not None
    return g


def ids(g: GateDecision, category: str) -> list[str]:
    return [r.id for r in g.of(category)]


def gate_run(manifest: Path, out: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["run", str(manifest), "--out", str(out), "--jobs", "1", "--quiet", *args])
    return code, json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    """One real run of the five modules against tests/data/gate/baseline.yml (found by default)."""
    work = workdir(tmp_path_factory.mktemp("gate"))
    code, doc = gate_run(work / "parity.yml", work / "r1")
    return code, doc, work


# ---------------------------------------------------------------------------
# the five decisions through real runs


def test_real_run_rules_each_case(real: tuple[int, dict[str, Any], Path]) -> None:
    code, doc, work = real
    g = gate_of(doc)
    assert code == 1 and not g.passed and doc["verdict"]["blocks"] is True
    assert doc["verdict"]["by_ruling"] == {"regression": 3, "fixed": 1, "known": 1, "stale": 1}
    assert g.fail_on == "regressions"  # the default once a baseline exists
    assert g.baseline == str(work / "parity-baseline.yml")
    assert ids(g, "regression") == [cid("fresh"), cid("grown"), cid("reshaped")]
    assert ids(g, "known") == [cid("steady")]
    assert ids(g, "fixed") == [cid("healed")]
    assert [s.entry for s in g.stale] == ["retired/**"]
    assert g.stale[0].where.endswith("parity-baseline.yml:26")
    assert sorted(g.blocking) == ids(g, "regression")
    why = {r.id: r.why for r in g.rulings}
    assert why[cid("fresh")] == "new failure (not in the baseline)"
    assert "max_abs grew 0.1001 → 0.5" in why[cid("grown")]
    assert "outcome mismatch → shape_mismatch" in why[cid("reshaped")]
    assert "remove it from the baseline" in why[cid("healed")]
    # the error really is the exported offset, recorded from the worst comparison
    steady = next(r for r in g.rulings if r.id == cid("steady"))
    assert steady.figures.max_abs == pytest.approx(0.1, rel=1e-4)
    assert steady.figures.mismatch_fraction == 1.0


def test_summary_leads_with_regressions_then_fixed_known_stale(
        real: tuple[int, dict[str, Any], Path]) -> None:
    summary = (real[2] / "r1" / "summary.md").read_text()
    head = summary.splitlines()[0]
    assert head.startswith("## ❌ parity-gate: ") and head.endswith(
        "— blocking; 3 regressions, 1 fixed, 1 known, 1 stale entry")
    # the module table says each module's ruling once; fixes and stale entries follow
    rows = {line.split(" | ")[0].removeprefix("| `").removesuffix("`"):
            line.rstrip(" |").rsplit(" | ", 1)[-1]
            for line in summary.split("\n\n| module | outcome |", 1)[1].split("\n\n")[0]
            .splitlines() if line.startswith("| `")}  # the module table only
    assert rows["fresh"] == rows["grown"] == rows["reshaped"] == "1 regression (blocking)"
    assert rows["steady"] == "1 known (not blocking)" and rows["healed"] == "—"
    heads = ["| module | outcome |", "### Fixed (1)", "### Stale baseline entries (1)",
             "<details><summary><b>reshaped</b>"]
    positions = [summary.index(h) for h in heads]
    assert positions == sorted(positions)
    import cmarkgfm  # what GitHub shows: the glob's `*` literal, not emphasis
    from cmarkgfm.cmark import Options

    shown = cmarkgfm.github_flavored_markdown_to_html(summary, options=Options.CMARK_OPT_UNSAFE)
    assert "remove baseline entry <code>healed/*/cpu</code>" in shown
    assert summary.count("steady/float32") <= 1  # a known failure is listed once


@pytest.mark.process
def test_real_run_without_regressions_passes(real: tuple[int, dict[str, Any], Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    work = real[2]
    code, doc = gate_run(work / "parity.yml", work / "r2", "--select", "steady",
                         "--select", "healed")
    g = gate_of(doc)
    # known failures remain, and the one verdict says they do not block
    assert code == 0 and g.passed and doc["verdict"]["blocks"] is False
    assert doc["verdict"]["by_outcome"]["mismatch"] == 1
    assert (ids(g, "known"), ids(g, "fixed"), ids(g, "regression")) == \
        ([cid("steady")], [cid("healed")], [])
    # entries of unselected modules are not stale: stale means "matches no planned case"
    assert [s.entry for s in g.stale] == ["retired/**"]
    err = capsys.readouterr().err
    assert "fixed healed/float32/vec/b2/cpu: now passes: remove it from the baseline" in err
    assert "baseline entry 'retired/**' matches no case" in err
    # the same results re-decided: --strict makes the fix block, as a strict xfail does
    merged = work / "m-strict"
    assert cli.main(["merge", str(work / "r2" / "results.json"), "--out", str(merged),
                     "--strict"]) == 1
    strict = gate_of(json.loads((merged / "results.json").read_text()))
    assert strict.blocking == [cid("healed")] and strict.strict is True
    assert cli.main(["merge", str(work / "r2" / "results.json"), "--out", str(merged),
                     "--fail-on", "any-failure"]) == 1
    assert gate_of(json.loads((merged / "results.json").read_text())).blocking == \
        [cid("steady")]


def test_fail_on_never_reports_but_passes(real: tuple[int, dict[str, Any], Path]) -> None:
    work = real[2]
    out = work / "m-never"
    assert cli.main(["merge", str(work / "r1" / "results.json"), "--out", str(out),
                     "--fail-on", "never"]) == 0
    doc = json.loads((out / "results.json").read_text())
    g = gate_of(doc)
    assert g.passed and len(g.blocking) == 3 and doc["verdict"]["blocks"] is False
    head = (out / "summary.md").read_text().splitlines()[0]
    assert head.startswith("## ⚠️ parity-gate: ") and "— not blocking (--fail-on never)" in head


@pytest.mark.process
def test_compare_to_shows_what_changed(real: tuple[int, dict[str, Any], Path],
                                       tmp_path: Path) -> None:
    work = workdir(tmp_path, baseline=False)
    old = real[2] / "r1" / "results.json"
    code, doc = gate_run(work / "next.yml", work / "r", "--compare-to", str(old))
    g = doc["gate"]
    assert code == 1 and g["fail_on"] == "any-failure" and g["baseline"] is None
    assert ids(gate_of(doc), "regression") == [cid("healed"), cid("steady")]  # every failure
    changes = g["compare_to"]["changes"]
    assert g["compare_to"]["path"] == str(old)
    assert [(c["id"], c["old_outcome"], c["new_outcome"]) for c in changes] == [
        (cid("healed"), "pass", "mismatch"),  # outcome changes first, worst change first
        (cid("fresh"), "mismatch", "pass"),
        (cid("grown"), "mismatch", None),
        (cid("reshaped"), "shape_mismatch", None),
        (cid("steady"), "mismatch", "mismatch"),  # then the largest error growth
    ]
    assert changes[-1]["growth"] == pytest.approx(3.0, rel=1e-3)
    summary = (work / "r" / "summary.md").read_text()
    assert f"### Changes since `{old}`" in summary
    assert "pass → **mismatch**" in summary


# ---------------------------------------------------------------------------
# the decision as a pure function


def case(module: str, outcome: Outcome = Outcome.MISMATCH, max_abs: float | None = 0.1,
         max_rel: float = 0.5, fraction: float = 1.0, batch: int = 2) -> CaseResult:
    key = CaseKey(module, "float32", "vec", batch, "cpu")
    comparisons = []
    if max_abs is not None:
        passed = outcome is Outcome.PASS
        comparisons.append(Comparison(
            name="out", passed=passed, verdict=Verdict.PASS if passed else Verdict.MISMATCH,
            reason="", shape_ref="(2, 3)", shape_got="(2, 3)", dtype_ref="float32",
            dtype_got="float32", atol=1e-5, rtol=1e-3, max_abs=max_abs, max_rel=max_rel,
            mismatch_fraction=fraction))
    return CaseResult(key, outcome, comparisons=comparisons)


def base(*entries: bl.Entry, factor: float | None = None) -> bl.Baseline:
    return bl.Baseline("b.yml", entries, factor)


def entry(id_: str, outcome: Outcome | None = Outcome.MISMATCH, max_abs: float | None = 0.1,
          max_rel: float | None = 0.5, fraction: float | None = 1.0) -> bl.Entry:
    return bl.Entry(id_, "known", None, outcome, Figures(max_abs, max_rel, fraction), line=3)


def categories(decision: gate.GateDecision) -> dict[str, str]:
    return {r.id: r.category for r in decision.rulings}


def test_without_baseline_every_failure_blocks() -> None:
    run = RunResult(cases=[case("a"), case("b", Outcome.PASS, 0.0),
                           CaseResult(CaseKey("c", "float32", "vec", 2, "cpu"),
                                      Outcome.SKIPPED, reason="no cuda")])
    d = gate.decide(run, None)
    assert d.fail_on == "any-failure" and d.baseline is None
    assert categories(d) == {cid("a"): "regression"}  # passes and skips are neither
    assert d.blocking == [cid("a")] and d.exit_code == 1
    assert gate.decide(run, "never").exit_code == 0


@pytest.mark.parametrize(("now", "expected"), [
    (0.1, "known"),
    (0.2, "known"),  # exactly the worsen factor is still within the record
    (0.2001, "regression"),
    (0.05, "known"),  # smaller error: still a known failure
    (math.inf, "regression"),
    (math.nan, "regression"),  # a NaN error counts as infinitely wrong
])
def test_error_growth_beyond_the_factor_is_a_regression(now: float, expected: str) -> None:
    run = RunResult(cases=[case("a", max_abs=now)])
    d = gate.decide(run, None, baseline=base(entry("a/**")))
    assert categories(d) == {cid("a"): expected}
    assert d.passed is (expected == "known")


def test_figure_growth_at_the_rounding_level_is_not_a_regression() -> None:
    """A known NaN-type float32 failure whose finite part moved 2e-8 → 9e-8 (both under
    float32's rounding level, 1.2e-4): machine noise, not a regression; the same growth
    above the level is one. The module gate and the op sweep share this rule."""
    known = base(entry("a/**", max_abs=2e-8, max_rel=2e-8, fraction=0.25))
    noise = gate.decide(RunResult(cases=[case("a", max_abs=9e-8, max_rel=9e-8,
                                              fraction=0.25)]), None, baseline=known)
    assert categories(noise) == {cid("a"): "known"} and noise.passed
    assert "figure growth at the rounding level of float32 ignored" in noise.rulings[0].why
    assert noise.rulings[0].figures.max_rel == 9e-8  # the report keeps the real figures
    above = base(entry("a/**", max_abs=2e-3, max_rel=2e-3, fraction=0.25))
    grown = gate.decide(RunResult(cases=[case("a", max_abs=9e-3, max_rel=9e-3,
                                              fraction=0.25)]), None, baseline=above)
    assert categories(grown) == {cid("a"): "regression"} and not grown.passed
    spread = gate.decide(RunResult(cases=[case("a", max_abs=9e-8, max_rel=9e-8,
                                               fraction=0.75)]), None, baseline=known)
    assert categories(spread) == {cid("a"): "regression"}  # more elements fail: counts


def test_worsen_factor_from_file_and_flag() -> None:
    run = RunResult(cases=[case("a", max_abs=0.25)])
    assert categories(gate.decide(run, None, baseline=base(entry("a/**"))))[cid("a")] == \
        "regression"
    loose = base(entry("a/**"), factor=3.0)
    d = gate.decide(run, None, baseline=loose)
    assert categories(d)[cid("a")] == "known" and d.worsen_factor == 3.0
    assert categories(gate.decide(run, None, baseline=loose, worsen_factor=2.0))[cid("a")] \
        == "regression"


def test_every_figure_counts_and_zero_or_missing_records() -> None:
    grown_rel = RunResult(cases=[case("a", max_rel=1.2)])
    # max_rel grew while max_abs did not: a smaller element, not a worse export (issue 34:
    # the needed tolerance decides, in roundings at the output's scale) ...
    assert categories(gate.decide(grown_rel, None, baseline=base(entry("a/**"))))[cid("a")] \
        == "known"
    # ... but where the record has no max_abs, max_rel's growth still counts.
    assert categories(gate.decide(grown_rel, None, baseline=base(
        entry("a/**", max_abs=None))))[cid("a")] == "regression"
    from_zero = RunResult(cases=[case("a", fraction=0.1)])
    assert categories(gate.decide(from_zero, None,
                                  baseline=base(entry("a/**", fraction=0.0))))[cid("a")] \
        == "regression"
    unrecorded = base(entry("a/**", None, None, None, None))
    assert categories(gate.decide(RunResult(cases=[case("a", max_abs=9.0)]), None,
                                  baseline=unrecorded))[cid("a")] == "known"
    infinite = base(entry("a/**", max_abs=math.inf))
    assert categories(gate.decide(RunResult(cases=[case("a", max_abs=1e30)]), None,
                                  baseline=infinite))[cid("a")] == "known"


def test_outcome_severity_decides_before_figures() -> None:
    crash = RunResult(cases=[case("a", Outcome.CRASH, max_abs=None)])
    d = gate.decide(crash, None, baseline=base(entry("a/**")))
    assert categories(d)[cid("a")] == "regression"
    assert "outcome mismatch → crash" in d.rulings[0].why
    # milder than recorded: the figures measured something else, so it stays known
    milder = RunResult(cases=[case("a", Outcome.MISMATCH, max_abs=5.0)])
    recorded_crash = base(entry("a/**", Outcome.CRASH, None, None, None))
    assert categories(gate.decide(milder, None, baseline=recorded_crash))[cid("a")] == "known"


def test_fixed_blocks_only_under_strict() -> None:
    run = RunResult(cases=[case("a", Outcome.PASS, 0.0)])
    b = base(entry("a/**"))
    d = gate.decide(run, None, baseline=b)
    assert categories(d) == {cid("a"): "fixed"} and d.passed and d.blocking == []
    strict = gate.decide(run, None, baseline=b, strict=True)
    assert not strict.passed and strict.blocking == [cid("a")]
    assert gate.decide(run, "never", baseline=b, strict=True).passed


def test_any_failure_with_a_baseline_blocks_known_too() -> None:
    run = RunResult(cases=[case("a")])
    d = gate.decide(run, "any-failure", baseline=base(entry("a/**")))
    assert categories(d) == {cid("a"): "known"} and not d.passed


def test_stale_is_judged_against_the_planned_universe() -> None:
    run = RunResult(cases=[case("a")])
    b = base(entry("a/**"), entry("b/**"), entry("gone/*"))
    d = gate.decide(run, None, baseline=b, universe={cid("a"), cid("b")})
    assert [s.entry for s in d.stale] == ["gone/*"] and d.stale[0].where == "b.yml:3"
    assert [s.entry for s in gate.decide(run, None, baseline=b).stale] == ["b/**", "gone/*"]


def test_skipped_cases_are_neither_but_keep_their_entry_alive() -> None:
    skipped = CaseResult(CaseKey("a", "float32", "vec", 2, "cuda"), Outcome.SKIPPED, "no cuda")
    d = gate.decide(RunResult(cases=[skipped]), None, baseline=base(entry("a/**")))
    assert d.rulings == [] and d.stale == [] and d.blocking == []
    assert d.all_skipped and not d.passed  # nothing ran: blocks (--allow-all-skipped passes)


def test_exact_id_wins_over_globs_and_first_glob_wins() -> None:
    b = base(entry("a/*"), entry("a/**", max_abs=10.0), entry(cid("a"), max_abs=1.0))
    assert b.entry_for(cid("a")).id == cid("a")
    assert b.entry_for("a/float16/vec/b2/cpu").id == "a/*"  # `*` crosses `/`, like --select
    assert b.entry_for("ab/float32/vec/b2/cpu") is None
    run = RunResult(cases=[case("a", max_abs=1.5)])
    assert categories(gate.decide(run, None, baseline=b))[cid("a")] == "known"


def test_real_json_re_decides_to_the_recorded_gate(real: tuple[int, dict[str, Any], Path]
                                                   ) -> None:
    _, doc, work = real
    run = RunResult.from_dict(doc)
    again = gate.decide(run, None, baseline=bl.load(work / "parity-baseline.yml"),
                        universe={c.id for c in run.cases}).to_dict()
    assert again == doc["gate"]
    json.dumps(again, allow_nan=False)  # the report is written with allow_nan=False


def test_cli_fail_on_choices_match_the_gate() -> None:
    assert cli.FAIL_ON == FAIL_ON


# ---------------------------------------------------------------------------
# the file format


def test_dump_parse_round_trip() -> None:
    b = base(entry("a/**", max_abs=math.inf), bl.Entry("b/x", "why: colons", "https://x.invalid/1",
                                                      Outcome.CRASH), factor=3.0)
    text = bl.dump(b)
    assert text.startswith("# parity-gate baseline")
    again = bl.parse(text, "b.yml")
    assert again.worsen_factor == 3.0
    assert [(e.id, e.reason, e.link, e.outcome, e.figures) for e in again.entries] == \
        [(e.id, e.reason, e.link, e.outcome, e.figures) for e in b.entries]
    assert bl.parse("", "b.yml").entries == ()
    assert bl.parse(bl.dump(again), "b.yml") == again


OUTCOMES = ("'mismatch', 'metric_drop', 'shape_mismatch', 'dtype_mismatch', 'baked_shape', "
            "'runtime_error', 'no_kernel', 'invalid_model', 'unsupported_op', 'export_error', "
            "'eager_error', 'out_of_memory', 'timeout' or 'crash'")
ENTRY_KEYS = "id, link, max_abs, max_rel, mismatch_fraction, outcome, reason"

# (file text, its one problem in full): located at the value (or key) to edit, worded and
# located by the same machinery as the manifest's (tests/test_manifest_errors.py).
BAD = [
    ("known_failures:\n  - id: a\n    reason: [unclosed\n",
     "b.yml:4:1: invalid YAML: expected ',' or ']', but got '<stream end>' (expected a baseline "
     "file with a `known_failures` list)"),
    # a misspelt required key is said once, at the typo, not again as missing
    ("known_failures:\n  - id: a/*\n    reasn: typo\n",
     "b.yml:3:5: known_failures[0].reasn: unknown key; did you mean `reason`? "
     f"(expected one of: {ENTRY_KEYS})"),
    ("known_failures:\n  - id: a/*\n    reason: x\n    max_abs: 0.1\n    lnk: u\n",
     "b.yml:5:5: known_failures[0].lnk: unknown key; did you mean `link`? "
     f"(expected one of: {ENTRY_KEYS})"),
    ("known_failure:\n  - id: a\n",
     "b.yml:1:1: known_failure: unknown key; did you mean `known_failures`? "
     "(expected one of: known_failures, performance, version, worsen_factor)"),
    ("known_failures:\n  - id: a/*\n",
     "b.yml:2:5: known_failures[0].reason: required key `reason` is missing (expected it here)"),
    ("known_failures:\n  - reason: x\n",
     "b.yml:2:5: known_failures[0].id: required key `id` is missing (expected it here)"),
    ("known_failures:\n  - {id: a, reason: '  '}\n",
     "b.yml:2:21: known_failures[0].reason: got '  ' (expected a non-blank string)"),
    ("known_failures:\n  - id: 5\n    reason: x\n",
     "b.yml:2:9: known_failures[0].id: got 5 (expected a string)"),
    ("known_failures:\n  - {id: a, reason: x, link: 3}\n",
     "b.yml:2:30: known_failures[0].link: got 3 (expected a string)"),
    ("known_failures:\n  - {id: a, reason: x, outcome: mismtach}\n",
     "b.yml:2:33: known_failures[0].outcome: invalid value 'mismtach'; did you mean `mismatch`? "
     f"(expected {OUTCOMES})"),
    ("known_failures:\n  - {id: a, reason: x, outcome: pass}\n",
     f"b.yml:2:33: known_failures[0].outcome: invalid value 'pass' (expected {OUTCOMES})"),
    ("known_failures:\n  - {id: a, reason: x, max_abs: -1}\n",
     "b.yml:2:33: known_failures[0].max_abs: got -1 (expected a number >= 0)"),
    ("known_failures:\n  - {id: a, reason: x, max_rel: lots}\n",
     "b.yml:2:33: known_failures[0].max_rel: got 'lots' (expected a number)"),
    ("known_failures:\n  - {id: a, reason: x}\n  - {id: a, reason: y}\n",
     "b.yml:3:10: known_failures[1].id: duplicate id 'a' (expected each id once; first listed "
     "at line 2)"),
    ("known_failures:\n  - id: a\n    reason: x\n    id: b\n",
     "b.yml:4:5: known_failures[0].id: duplicate key (expected each key once)"),
    ("worsen_factor: 0.5\n", "b.yml:1:16: worsen_factor: got 0.5 (expected a number >= 1"),
    ("worsen_factor: .inf\n", "b.yml:1:16: worsen_factor: got inf (expected a finite number)"),
    ("version: 2\n", "b.yml:1:10: version: invalid value 2 (expected 1)"),
    ("known_failures: {id: a}\n", "b.yml:1:17: known_failures: got dict (expected a list)"),
    ("known_failures:\n  - a\n", "b.yml:2:5: known_failures[0]: got 'a' (expected a mapping)"),
    ("- a\n", "b.yml:1:1: (top level): expected a mapping with a `known_failures` list"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_baseline_is_one_located_line(text: str, message: str) -> None:
    with pytest.raises(UserError) as err:
        bl.parse(text, "b.yml")
    assert len(err.value.problems) == 1, err.value.problems
    assert err.value.problems[0].startswith(message), err.value.problems


def test_every_baseline_problem_at_once_in_file_order() -> None:
    text = ("version: 1\nknown_failures:\n"
            "  - {id: a, reason: x, outcome: pass}\n"       # line 3
            "  - {id: b, reason: x, max_abs: -1, lnk: u}\n"  # line 4: two problems
            "  - {id: a, reason: y}\n"                       # line 5: duplicate id
            "worsen_factor: 0\n")                            # line 6
    with pytest.raises(UserError) as err:
        bl.parse(text, "b.yml")
    assert [p.split(": ")[0:2] for p in err.value.problems] == [
        ["b.yml:3:33", "known_failures[0].outcome"],
        ["b.yml:4:33", "known_failures[1].max_abs"],
        ["b.yml:4:37", "known_failures[1].lnk"],
        ["b.yml:5:10", "known_failures[2].id"],
        ["b.yml:6:16", "worsen_factor"],
    ]


def test_baseline_figures_accept_inf_words_and_read_nan_as_inf() -> None:
    b = bl.parse("known_failures:\n  - {id: a, reason: x, max_abs: inf, max_rel: .nan, "
                 "mismatch_fraction: 1}\n  - {id: b, reason: x, max_abs: .inf}\n", "b.yml")
    assert b.entries[0].figures == Figures(math.inf, math.inf, 1.0)
    assert b.entries[1].figures.max_abs == math.inf
    assert [e.line for e in b.entries] == [2, 3]
    assert bl.parse("version: 1\nknown_failures:\n", "b.yml").entries == ()


def test_known_findings_file_loads_and_round_trips() -> None:
    path = Path(bl.__file__).resolve().parent.parent / "ops" / "known-findings.yml"
    known = bl.load(path)
    assert len(known.entries) > 500
    again = bl.parse(bl.dump(known), str(path))
    assert [(e.id, e.reason, e.link, e.outcome, e.figures) for e in again.entries] == \
        [(e.id, e.reason, e.link, e.outcome, e.figures) for e in known.entries]


def test_bad_baseline_fails_run_before_any_work(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    work = workdir(tmp_path)
    bad = work / "parity-baseline.yml"
    bad.write_text("known_failures:\n  - id: steady/**\n    reason: x\n    outcom: crash\n")
    assert cli.main(["run", str(work / "parity.yml"), "--out", str(work / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{bad}:4:5: known_failures[0].outcom: unknown key; did you mean "
                   f"`outcome`? (expected one of: {ENTRY_KEYS})"]
    assert not (work / "o").exists()
    missing = work / "nope.yml"
    assert cli.main(["run", str(work / "parity.yml"), "--baseline", str(missing)]) == 2
    assert f"{missing}: baseline file not found" in capsys.readouterr().err
    bad.unlink()
    assert cli.main(["run", str(work / "parity.yml"), "--worsen-factor", "0.5"]) == 2
    assert "--worsen-factor: got 0.5 (expected a number >= 1)" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# baseline update


def test_update_round_trips_through_the_gate(real: tuple[int, dict[str, Any], Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    _, _, work = real
    path = work / "updated.yml"
    shutil.copy(work / "parity-baseline.yml", path)
    results = work / "r1" / "results.json"
    assert cli.main(["baseline", "update", "--from", str(results), "--baseline", str(path),
                     str(work / "parity.yml"), "--reason", "offset added in models.py"]) == 0
    err = capsys.readouterr().err
    assert "removed healed/*/cpu: fixed: now passes" in err
    assert "removed retired/**: stale: matches no case" in err
    assert f"added {cid('fresh')}: new failure: mismatch" in err
    assert "updated grown/**: recorded figures refreshed: max_abs 0.1001 → 0.5001" in err
    assert "1 added, 3 updated, 2 removed" in err
    new = bl.load(path)
    by_id = {e.id: e for e in new.entries}
    assert list(by_id) == [cid("steady"), "grown/**", cid("reshaped"), cid("fresh")]
    assert by_id[cid("steady")].link == "https://example.invalid/issues/1"  # kept
    assert by_id[cid("steady")].reason == "export-only offset of 0.1 (models.py)"
    assert by_id[cid("fresh")].reason == "offset added in models.py"
    assert by_id[cid("reshaped")].outcome is Outcome.SHAPE_MISMATCH
    assert by_id[cid("reshaped")].figures == Figures()  # a shape mismatch has no figures
    assert new.worsen_factor == 2.0
    # the refreshed baseline accepts the very run it was made from
    run = RunResult.from_dict(json.loads(results.read_text()))
    d = gate.decide(run, None, baseline=new)
    assert (len(d.of("known")), d.of("regression"), d.of("fixed"), d.stale) == (4, [], [], [])
    # and a second update changes nothing (it adds no entry, so it needs no reason)
    before = path.read_text()
    assert cli.main(["baseline", "update", "--from", str(results), "--baseline",
                     str(path)]) == 0
    assert path.read_text() == before
    assert "0 added, 0 updated, 0 removed" in capsys.readouterr().err


def test_update_creates_the_default_file_with_a_reason(real: tuple[int, dict[str, Any], Path],
                                                       tmp_path: Path) -> None:
    work = workdir(tmp_path, baseline=False)
    results = real[2] / "r1" / "results.json"
    assert cli.main(["baseline", "update", str(work / "parity.yml"), "--from", str(results),
                     "--reason", "tracked in #42"]) == 0
    created = bl.load(work / "parity-baseline.yml")
    assert {e.id for e in created.entries} == {cid(m) for m in ("fresh", "grown", "reshaped",
                                                               "steady")}
    assert {e.reason for e in created.entries} == {"tracked in #42"}
    assert [p.name for p in work.iterdir() if p.name.startswith(".")] == []  # no temp files


def test_update_never_leaves_half_a_file(real: tuple[int, dict[str, Any], Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "parity-baseline.yml"
    target.write_text("known_failures: []\n")

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    code = cli.main(["baseline", "update", "--from", str(real[2] / "r1" / "results.json"),
                     "--baseline", str(target), "--reason", "export-only offsets"])
    assert code == 130
    assert target.read_text() == "known_failures: []\n"
    assert [p.name for p in tmp_path.iterdir()] == ["parity-baseline.yml"]


def test_update_refuses_partial_results(real: tuple[int, dict[str, Any], Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    doc = dict(real[1])
    for field, value, message in (("shard", "1/2", "results of shard 1/2 only"),
                                  ("interrupted", True, "the run was interrupted")):
        partial = tmp_path / f"{field}.json"
        partial.write_text(json.dumps({**doc, field: value}))
        assert cli.main(["baseline", "update", "--from", str(partial), "--baseline",
                         str(tmp_path / "b.yml")]) == 2
        assert f"{partial}: {message}" in capsys.readouterr().err
    assert not (tmp_path / "b.yml").exists()
    assert cli.main(["baseline", "update", "--from", str(tmp_path / "none.json")]) == 2
    assert "none.json: results file not found" in capsys.readouterr().err


def test_update_pure_keeps_skipped_and_drops_redundant() -> None:
    skipped = CaseResult(CaseKey("gpu", "float32", "vec", 2, "cuda"), Outcome.SKIPPED, "no cuda")
    run = RunResult(cases=[skipped, case("a", max_abs=0.3)])
    old = base(entry("gpu/**"), entry(cid("a")), entry("a/*"))
    new, changes = bl.update(old, run, "why")
    assert [e.id for e in new.entries] == ["gpu/**", cid("a")]
    assert new.entries[0] == old.entries[0]  # nothing to learn from a skipped case
    assert [str(c) for c in changes] == [
        f"updated {cid('a')}: recorded figures refreshed: max_abs 0.1 → 0.3",
        "removed a/*: redundant: every case it matches has its own entry",
    ]


def test_recorded_figures_round_up_so_the_run_is_within_its_record() -> None:
    recorded = bl.record(entry("a"), [case("a", max_abs=0.123456789, max_rel=1 / 3)])
    assert recorded.figures.max_abs == 0.1235 and recorded.figures.max_rel == 0.3334
    assert recorded.figures.max_abs >= 0.123456789


# ---------------------------------------------------------------------------
# deltas


def test_deltas_order_and_json() -> None:
    old = RunResult(cases=[case("a", Outcome.PASS, 0.0), case("b", max_abs=0.1),
                           case("c", max_abs=0.1), case("d", max_abs=0.1),
                           case("gone"), case("other")])
    new = RunResult(cases=[case("a", Outcome.CRASH, None), case("b", max_abs=0.4),
                           case("c", max_abs=0.2), case("d", max_abs=0.1),
                           case("e", max_abs=math.nan)])
    d = compute(old, new, "old.json", elsewhere={cid("other")})
    assert [(c.id, c.old_outcome, c.new_outcome) for c in d.changes] == [
        (cid("a"), "pass", "crash"),
        (cid("e"), None, "mismatch"),
        (cid("gone"), "mismatch", None),
        (cid("b"), "mismatch", "mismatch"),
        (cid("c"), "mismatch", "mismatch"),
    ]
    assert d.unchanged == 1  # d; `other` ran in another shard
    assert d.changes[3].growth == pytest.approx(4.0)
    json.dumps(d.to_dict(), allow_nan=False)
    assert encode(math.inf) == "inf" and encode(math.nan) == "nan" and encode(1.5) == 1.5


def test_indexed_matching_agrees_with_testing_every_entry_against_every_case() -> None:
    """The index (exact ids, globs by literal prefix, sorted ids) answers exactly as the
    rule does entry by entry: the first exact id, else the first matching glob in file
    order, and stale = matches no id. (The sweep gates ~10^5 cases on ~10^4 entries.)"""
    import random

    rng = random.Random(7)
    parts = (["op/a", "op/a.b", "op/ab", "op/oi.x.1", "op/oi.x.12", "m"],
             ["float32", "float16", "int8"], ["normal", "specials", "vec"], ["cpu", "cuda"])
    ids = sorted({"/".join(rng.choice(p) for p in parts) for _ in range(300)})
    pieces = ["*", "**", "?", "[fi]", "float3?", "op/a*", "op/oi.x.1*", "op/oi.x.[0-9]*"]
    patterns = [rng.choice(ids) for _ in range(40)] + [
        "/".join(rng.choice(p + pieces[:4]) for p in parts[:rng.randint(1, 4)])
        + rng.choice(["", "/*", "*"]) for _ in range(200)] + [rng.choice(pieces)
                                                             for _ in range(10)]
    entries = tuple(bl.Entry(p, "r") for p in dict.fromkeys(patterns))
    b = bl.Baseline("b.yml", entries)
    for case_id in [*ids, "op/zz/float32/normal/cpu", "op/a"]:
        exact = next((e for e in entries if e.id == case_id), None)
        naive = exact or next((e for e in entries if e.matches(case_id)), None)
        assert b.entry_for(case_id) == naive, case_id
    half = ids[::2]
    assert b.unmatched(half) == [e for e in entries if not any(e.matches(i) for i in half)]
    assert any(b.unmatched(half)) and len(b.unmatched(half)) < len(entries)


def test_got_worse_survives_a_change_of_cpu() -> None:
    """op/lstm.bidirectional/float16/specials/cpu as recorded on one CPU (max_abs 0.000244,
    max_rel 0.006162) and measured on another (the same max_abs, one float16 step at that
    scale; max_rel 0.02393 on a near-zero element): the same failure, not a regression.
    A needed tolerance that grows by many float16 roundings at the output's scale is one."""
    def lstm(max_abs: float, max_rel: float, ref: float, got: float) -> CaseResult:
        key = CaseKey("lstm", "float16", "specials", 2, "cpu")
        return CaseResult(key, Outcome.MISMATCH, comparisons=[Comparison(
            name="o0", passed=False, verdict=Verdict.MISMATCH, reason="", shape_ref="(2, 3)",
            shape_got="(2, 3)", dtype_ref="float16", dtype_got="float16", atol=1e-2,
            rtol=1e-2, max_abs=max_abs, max_rel=max_rel, mismatch_fraction=0.05,
            ref_value=ref, got_value=got)])

    recorded = base(entry("lstm/**", max_abs=0.000244, max_rel=0.006162, fraction=0.05))
    other_cpu = gate.decide(RunResult(cases=[lstm(0.000244, 0.02393, 0.0102, 0.0100)]),
                            None, baseline=recorded)
    assert categories(other_cpu) == {"lstm/float16/specials/b2/cpu": "known"}
    assert other_cpu.passed
    worse = gate.decide(RunResult(cases=[lstm(0.125, 0.125, 1.0, 0.875)]), None,
                        baseline=recorded)
    assert categories(worse) == {"lstm/float16/specials/b2/cpu": "regression"}
    assert "max_abs grew" in worse.rulings[0].why
