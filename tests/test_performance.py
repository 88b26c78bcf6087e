"""The performance check: statistics (pure), placement parsing (real CPU profiles and logs,
GPU ones written from ONNX Runtime's formats: tests/data/performance/README.md), the gate's
rules, the reports, and one real run with a genuinely slow export and a control."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from parity_gate.cli import main
from parity_gate.compare import timing
from parity_gate.engine import placement
from parity_gate.engine.performance import latency, peak_rss_increase
from parity_gate.gate.decision import decide
from parity_gate.gate.performance import flags
from parity_gate.github.annotations import annotate
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.performance import (
    Latency,
    Performance,
    PerformanceLimits,
    PlacedNode,
    Placement,
)
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.report import html, junit, markdown

DATA = Path(__file__).parent / "data" / "performance"
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def events(name: str) -> list[dict[str, Any]]:
    return list(json.loads((DATA / name).read_text()))


# ---------------------------------------------------------------- statistics


def test_order_bounds_are_the_sign_test_interval_of_the_median() -> None:
    assert timing.order_bounds(5) is None  # 2 * (1/2)^5 > 5%: no 95% interval exists
    assert timing.order_bounds(6) == (0, 5)  # P(B <= 0) = 1/64 <= 2.5%
    assert timing.order_bounds(8) == (0, 7)
    assert timing.order_bounds(9) == (1, 7)  # P(B <= 1) = 10/512 <= 2.5%
    lo, hi = timing.order_bounds(60) or (0, 0)
    assert (lo, hi) == (21, 38)  # the textbook ranks 22 and 39 (1-based) for n = 60
    tail = sum(math.comb(60, j) for j in range(lo + 1)) / 2**60
    assert tail <= 0.025 < tail + math.comb(60, lo + 1) / 2**60


def test_paired_ratio_cancels_load_that_hits_both_sides_of_a_pair() -> None:
    # Load multiplies both sides of some pairs by up to 10x: the paired ratio stays 3.
    load = [1, 1, 10, 1, 4, 1, 1, 7, 1, 1]
    eager = [1e-3 * f for f in load]
    onnx = [3e-3 * f for f in load]
    r = timing.paired_ratio(eager, onnx)
    assert r.ratio == pytest.approx(3.0) and r.low == pytest.approx(3.0)
    assert r.high == pytest.approx(3.0) and r.narrow and r.pairs == 10
    # ...while a ratio of the two sides' separate medians would not be protected that way
    assert r.eager_s == pytest.approx(1e-3) and r.onnx_s == pytest.approx(3e-3)


def test_paired_ratio_interval_brackets_the_median() -> None:
    eager = [1.0] * 9
    onnx = [1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4, 9.0]
    r = timing.paired_ratio(eager, onnx)
    assert (r.low, r.ratio, r.high) == (1.2, 1.8, 2.4)  # order statistics 1 and 7 of 9
    assert not r.narrow
    with pytest.raises(ValueError):
        timing.paired_ratio([1.0], [])


def test_timing_stops_when_narrow_or_decided_and_never_past_the_bounds() -> None:
    same = [1e-3] * timing.MIN_PAIRS
    assert not timing.enough(same[:-1], same[:-1], 0.0, 1.0)  # below the minimum
    assert timing.enough(same, same, 0.0, 1.0)  # narrow
    noisy_e = [1.0] * 8
    noisy_o = [0.5, 3.0, 0.7, 2.5, 0.9, 2.0, 1.1, 1.6]  # interval 0.5..3.0: wide
    assert not timing.enough(noisy_e, noisy_o, 0.01, 1.0)  # budget left: keep timing
    assert timing.enough(noisy_e, noisy_o, 1.0, 1.0)  # budget spent, nothing to decide
    # The gate's limit inside the interval: up to EXTRA budgets to decide it...
    assert not timing.enough(noisy_e, noisy_o, 1.5, 1.0, limit=1.5)
    assert timing.enough(noisy_e, noisy_o, timing.EXTRA * 1.0, 1.0, limit=1.5)
    # ...and the limit wholly below the interval: decided, stop at once
    assert timing.enough(noisy_e, noisy_o, 0.0, 1.0, limit=0.4)
    assert timing.enough([1.0] * timing.MAX_PAIRS, [2.0] * timing.MAX_PAIRS, 0.0, 9.0)


def test_slowdown_is_judged_on_the_lower_bound_and_regression_on_disjoint_intervals() -> None:
    assert timing.slower(1.6, 1.5) and not timing.slower(1.4, 1.5)
    assert not timing.slower(99.0, None)  # latency gating off (the default)
    assert timing.regressed((2.0, 1.9, 2.1), (2.5, 2.2, 2.8))
    assert not timing.regressed((2.0, 1.8, 2.3), (2.4, 2.2, 2.7))  # within both noises
    assert not timing.regressed((2.0, 1.9, 2.1), (1.5, 1.4, 1.6))  # faster is no regression
    assert timing.inner_repeats(1e-5) == 50 and timing.inner_repeats(1e-2) == 1


def test_latency_loop_with_a_fake_clock_interleaves_and_reports_the_ratio() -> None:
    now = [0.0]
    calls: list[str] = []

    def clock() -> float:
        return now[0]

    def side(name: str, cost: float) -> Any:
        def call() -> None:
            calls.append(name)
            now[0] += cost
        return call

    lat = latency(side("e", 0.002), side("o", 0.006), budget_s=1.0, clock=clock)
    assert lat.ratio == pytest.approx(3.0) and lat.stable and lat.pairs == timing.MIN_PAIRS
    assert lat.eager_ms == pytest.approx(2.0) and lat.onnx_ms == pytest.approx(6.0)
    timed = calls[4:]  # after two warm-up calls per side
    # best of three blocks per side; the order alternates from one pair to the next
    assert timed[:6] == ["e"] * 3 + ["o"] * 3 and timed[6:12] == ["o"] * 3 + ["e"] * 3


def test_no_garbage_collection_is_charged_to_a_timed_call() -> None:
    """Right after an export the heap is full of the exporter's garbage: a full collection
    landing in one side's warm-up made eager look 300x slower on the HF zoo (a ~350 ms
    pause on a 1 ms model). Timing runs with the collector held off, then restores it."""
    import gc

    seen: list[bool] = []

    def call() -> None:
        seen.append(gc.isenabled())

    assert gc.isenabled()
    latency(call, call, budget_s=0.01)
    assert seen and not any(seen) and gc.isenabled()


def test_peak_rss_increase_sees_an_allocation() -> None:
    size = 64 << 20
    grown, got = peak_rss_increase(lambda: bytearray(b"\1" * size))
    assert len(got) == size
    if grown is None:
        pytest.skip("this kernel does not report a resettable peak RSS")
    assert grown >= size * 0.9


# ---------------------------------------------------------------- placement parsing


def test_real_cpu_profile_is_clean() -> None:
    p = placement.from_profile(events("cpu_profile.json"), CPU)
    assert p.by_provider == {CPU: 7} and p.nodes == 7
    assert not p.fallback and not p.memcpy and p.source == "profile"
    assert placement.arena_peak(events("cpu_profile.json")) == max(
        int(e["args"]["mem_in_use_peak"]) for e in events("cpu_profile.json")
        if "mem_in_use_peak" in e.get("args", {}))


def test_real_cpu_session_log_agrees_with_its_profile() -> None:
    p = placement.from_log((DATA / "cpu_session.log").read_text(), CPU)
    assert p is not None and p.by_provider == {CPU: 7} and not p.fallback
    assert placement.from_log("no placement lines here\n", CPU) is None


def test_cuda_profile_names_the_nodes_that_fell_back_and_the_memcpys() -> None:
    p = placement.from_profile(events("cuda_fallback_profile.json"), CUDA)
    assert [(n.name, n.op, n.provider) for n in p.fallback] == [
        ("node_NonMaxSuppression_4", "NonMaxSuppression", CPU),
        ("node_Unique_5", "Unique", CPU)]
    assert [n.name for n in p.memcpy] == ["Memcpy", "Memcpy_token_1", "Memcpy_token_2",
                                          "Memcpy_token_3"]
    assert p.by_provider == {CUDA: 7, CPU: 2}  # the second run's repeat counted once
    assert "2 fell back from CUDA: node_NonMaxSuppression_4" in p.describe()


def test_cuda_log_gives_the_same_placement_as_the_profile() -> None:
    p = placement.from_log((DATA / "cuda_fallback_session.log").read_text(), CUDA)
    q = placement.from_profile(events("cuda_fallback_profile.json"), CUDA)
    assert p is not None and p.source == "log"
    assert p.fallback == q.fallback and p.memcpy == q.memcpy and p.by_provider == q.by_provider


def test_cuda_session_with_every_node_on_cuda_is_clean() -> None:
    p = placement.from_profile(events("cuda_clean_profile.json"), CUDA)
    perf = Performance(limits=PerformanceLimits(max_fallback_nodes=0, gpu=True), placement=p)
    assert p.by_provider == {CUDA: 3} and flags(_case("m/float32/x/b1/cuda", perf)) == []


# ---------------------------------------------------------------- the gate and the reports


def _case(case_id: str, perf: Performance, outcome: Outcome = Outcome.PASS) -> CaseResult:
    module, dtype, inputs, batch, provider = case_id.split("/")
    return CaseResult(CaseKey(module, dtype, inputs, int(batch[1:]), provider), outcome,
                      performance=perf)


def _latency(ratio: float, low: float, high: float) -> Latency:
    return Latency(eager_ms=1.0, onnx_ms=ratio, ratio=ratio, low=low, high=high, pairs=20,
                   stable=True)


def test_gate_blocks_on_a_slowdown_and_a_fallback_and_warns_on_memcpy() -> None:
    fell = placement.from_profile(events("cuda_fallback_profile.json"), CUDA)
    gpu = PerformanceLimits(max_slowdown=1.5, max_fallback_nodes=0, memcpy="warn", gpu=True)
    run = RunResult(cases=[
        _case("slow/float32/x/b1/cpu", Performance(PerformanceLimits(max_slowdown=1.5),
                                                   _latency(5.0, 4.2, 6.1))),
        _case("noisy/float32/x/b1/cpu", Performance(PerformanceLimits(max_slowdown=1.5),
                                                    _latency(1.8, 1.2, 3.0))),
        _case("ungated/float32/x/b1/cpu", Performance(PerformanceLimits(),
                                                      _latency(9.0, 8.0, 10.0))),
        _case("det/float32/x/b1/cuda", Performance(gpu, _latency(1.0, 0.9, 1.1), fell)),
    ])
    decision = decide(run)
    got = {(f.id.split("/")[0], f.rule, f.blocks) for f in decision.performance}
    assert got == {("slow", "slowdown", True), ("det", "fallback", True),
                   ("det", "memcpy", False)}
    assert not decision.passed and decision.exit_code == 1
    fallback = next(f for f in decision.performance if f.rule == "fallback")
    assert fallback.nodes == ["node_NonMaxSuppression_4", "node_Unique_5"]
    run.gate = decision
    assert "performance rule(s) broken" in run.verdict.why
    notes = annotate(run)
    named = next(a for a in notes if a.title.endswith("fallback"))
    assert named.level == "error" and "node_NonMaxSuppression_4 (NonMaxSuppression" in \
        named.message
    summary = markdown.render(run)
    assert "### Performance: ONNX Runtime vs eager" in summary
    assert "**5.00× (4.20–6.10)**" in summary  # the flagged ratio stands out
    assert "2 fell back, 4 memcpy" in summary
    page = html.render(run)
    assert 'id="performance"' in page and "node_Unique_5" in page
    xml = junit.to_xml(run).decode()
    assert xml.count('type="performance"') == 2  # slow and det: both match eager, both block
    assert 'failures="2"' in xml


def test_placement_is_not_gated_on_cpu_and_memcpy_off_is_silent() -> None:
    fell = placement.from_profile(events("cuda_fallback_profile.json"), CUDA)
    off = PerformanceLimits(max_fallback_nodes=None, memcpy="off", gpu=True)
    assert [f.rule for f in flags(_case("m/float32/x/b1/cuda", Performance(off, None, fell)))
            ] == ["fallback"]  # reported...
    assert not flags(_case("m/float32/x/b1/cuda", Performance(off, None, fell)))[0].blocks
    cpu = PerformanceLimits(max_fallback_nodes=None, gpu=False)
    clean = Placement(CPU, {CPU: 3})
    assert flags(_case("m/float32/x/b1/cpu", Performance(cpu, None, clean))) == []
    nodes = [PlacedNode("a", "Memcpy", CPU)]
    assert flags(_case("m/float32/x/b1/cpu", Performance(cpu, None, Placement(CPU, {CPU: 1},
                                                                                nodes)))) == []


def test_performance_round_trips_through_results_json() -> None:
    fell = placement.from_profile(events("cuda_fallback_profile.json"), CUDA)
    case = _case("m/float32/x/b1/cuda", Performance(PerformanceLimits(gpu=True),
                                                    _latency(2.0, 1.5, 2.5), fell))
    run = RunResult(cases=[case])
    back = RunResult.from_dict(json.loads(json.dumps(run.to_dict())))
    assert back.cases[0].performance == case.performance


# ---------------------------------------------------------------- one real run


SLOW_MANIFEST = """\
version: 1
seed: 0
python_path: [{models}]
defaults:
  batch_sizes: [4]
  dtypes: [float32]
  performance: {{max_slowdown: 1.5}}
providers:
  cpu: {{required: true}}
fixtures:
  images:
    kind: random
    inputs:
      x: {{shape: [batch, 8, 32, 32]}}
  features:
    kind: random
    inputs:
      x: {{shape: [batch, 256]}}
modules:
  - name: patches
    factory: perf_models:Patches
    inputs: [{{name: x, dynamic: {{0: batch}}}}]
    fixtures: [images]
  - name: mlp
    factory: perf_models:MLP
    inputs: [{{name: x, dynamic: {{0: batch}}}}]
    fixtures: [features]
"""


@pytest.mark.process
def test_a_genuinely_slow_export_is_flagged_and_the_control_is_not(tmp_path: Path) -> None:
    manifest = tmp_path / "parity.yml"
    manifest.write_text(SLOW_MANIFEST.format(models=DATA))
    t0 = time.perf_counter()
    code = main(["run", str(manifest), "--out", str(tmp_path / "out"), "--quiet",
                 "--no-localise"])
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    cases = {c["id"].split("/")[0]: c for c in doc["cases"]}
    slow, control = cases["patches"]["performance"], cases["mlp"]["performance"]
    assert all(c["outcome"] == "pass" for c in cases.values())  # both match eager...
    assert code == 1  # ...but the slow one blocks
    assert slow["latency"]["low"] > 1.5, slow["latency"]
    assert control["latency"]["low"] <= 1.5, control["latency"]
    flagged = [(f["id"].split("/")[0], f["rule"]) for f in doc["gate"]["performance"]]
    assert flagged == [("patches", "slowdown")]
    assert slow["placement"]["by_provider"] == {CPU: slow["placement"]["by_provider"][CPU]}
    assert slow["placement"]["fallback"] == [] and slow["memory"]["source"] == "peak RSS"
    assert time.perf_counter() - t0 < 120


def test_too_few_pairs_are_never_stable() -> None:
    r = timing.paired_ratio([1.0] * 3, [2.0] * 3)
    assert (r.low, r.high) == (2.0, 2.0) and not r.narrow


def test_baseline_records_stable_ratios_and_flags_a_slowdown_beyond_both_noises(
        tmp_path: Path) -> None:
    from parity_gate.gate import baseline as bl

    def run_of(ratio: float, low: float, high: float, stable: bool = True,
               limit: float | None = None) -> RunResult:
        lat = Latency(eager_ms=1.0, onnx_ms=ratio, ratio=ratio, low=low, high=high,
                      pairs=20, stable=stable)
        return RunResult(cases=[_case("m/float32/x/b1/cpu",
                                      Performance(PerformanceLimits(max_slowdown=limit), lat))])

    recorded, changes = bl.update(bl.Baseline(str(tmp_path / "b.yml")),
                                  run_of(2.0, 1.9, 2.1))
    assert [str(c) for c in changes] == ["recorded performance: time ratios of 1 case(s)"]
    path = tmp_path / "b.yml"
    path.write_text(bl.dump(recorded))
    loaded = bl.load(path)
    assert [(r.id, r.figures) for r in loaded.performance] == [
        ("m/float32/x/b1/cpu", (2.0, 1.9, 2.1))]
    assert loaded.performance[0].line > 0
    # unstable figures are not recorded over the stable ones
    same, _ = bl.update(loaded, run_of(9.0, 1.0, 20.0, stable=False))
    assert same.performance[0].figures == (2.0, 1.9, 2.1)

    within = decide(run_of(2.2, 2.0, 2.4, limit=1.5 * 9), baseline=loaded)
    assert [f.rule for f in within.performance] == []  # overlaps the record: noise
    slower = decide(run_of(2.6, 2.3, 2.9), baseline=loaded)
    (flag,) = slower.performance
    assert flag.rule == "latency-regression" and not flag.blocks  # latency not gated
    assert f"{path}:" in flag.message and "recorded 2.00×" in flag.message
    gated = decide(run_of(2.6, 2.3, 2.9, limit=10.0), baseline=loaded)
    assert [(f.rule, f.blocks) for f in gated.performance] == [("latency-regression", True)]
    assert not gated.passed


def test_a_model_slower_than_the_budget_costs_its_warm_up_calls_only() -> None:
    now = [0.0]
    calls: list[str] = []

    def side(name: str, cost: float) -> Any:
        def call() -> None:
            calls.append(name)
            now[0] += cost
        return call

    lat = latency(side("e", 0.5), side("o", 1.0), budget_s=0.05, clock=lambda: now[0])
    assert calls == ["e", "e", "o", "o"] and lat.pairs == 1 and not lat.stable
    assert lat.ratio == pytest.approx(2.0)
    calls.clear()  # gated, the same model is timed until the ratio is decided
    lat = latency(side("e", 0.5), side("o", 1.0), budget_s=0.05, limit=1.5,
                  clock=lambda: now[0])
    # ...within EXTRA budgets: two pairs here (one block a side, no best-of), too few for
    # a 95% interval, so the gate warns instead of deciding (below)
    assert lat.pairs == 2 and len(calls) == 4 + 2 * 2 and not lat.stable
    (flag,) = flags(_case("m/float32/x/b1/cpu",
                          Performance(PerformanceLimits(max_slowdown=1.5), lat)))
    assert flag.rule == "slowdown" and not flag.blocks and "budget_s" in flag.message


def test_ungated_timing_past_its_budget_stops_once_an_interval_exists() -> None:
    e, o = [1.0] * 5, [2.0, 2.1, 1.9, 2.2, 1.8]
    assert not timing.enough(e, o, 1.2, 1.0)  # 5 pairs: no 95% interval yet
    assert timing.enough(e, o, 2.0, 1.0)  # twice the budget: stop regardless
    assert timing.enough([*e, 1.0], [*o, 2.0], 1.2, 1.0)  # 6 pairs: an interval
    assert not timing.enough([*e, 1.0], [*o, 2.0], 1.2, 1.0, limit=1.5)  # gated: decide


REUSE_MANIFEST = """\
seed: 0
python_path: [{models}]
defaults:
  batch_sizes: [2, 4]
  dtypes: [float32]
  performance: {{max_slowdown: 100}}
providers:
  cpu: {{required: true}}
fixtures:
  small:
    kind: random
    inputs:
      x: {{shape: [batch, 256], low: -1, high: 1}}
  large:
    kind: random
    inputs:
      x: {{shape: [batch, 256], low: -100, high: 100}}
modules:
  - name: mlp
    factory: perf_models:MLP
    inputs: [{{name: x, dynamic: {{0: batch}}}}]
    fixtures: [small, large]
"""


@pytest.mark.process
def test_cases_of_one_input_shape_share_one_timing(tmp_path: Path) -> None:
    """Two fixture sets at two batch sizes: two timings (one per shape), not four; the
    second set's cases say which case their figure was timed on."""
    manifest = tmp_path / "parity.yml"
    manifest.write_text(REUSE_MANIFEST.format(models=DATA))
    assert main(["run", str(manifest), "--out", str(tmp_path / "out"), "--quiet",
                 "--no-localise"]) == 0
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    lat = {c["id"]: c["performance"]["latency"] for c in doc["cases"]}
    own = sorted(i for i, v in lat.items() if not v["timed_on"])
    assert [i.split("/")[3] for i in own] == ["b2", "b4"], lat
    for case, v in lat.items():
        if v["timed_on"]:
            source = lat[v["timed_on"]]
            assert case.split("/")[3] == v["timed_on"].split("/")[3]  # same batch size
            assert (v["ratio"], v["low"], v["high"]) == (
                source["ratio"], source["low"], source["high"])
            assert v["spent_s"] == 0.0 and source["spent_s"] > 0
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "Performance" in md


def test_an_unstable_figure_says_why_and_is_recorded_where_no_record_is(
        tmp_path: Path) -> None:
    from parity_gate.gate import baseline as bl

    eager = [0.014, 0.134, 0.02, 0.09, 0.05, 0.11, 0.03, 0.07]  # a loaded machine
    onnx = [2e-5] * 8
    why = timing.instability(eager, onnx)
    assert why.startswith("eager's calls took 14–134 ms across 8 samples") and "busy" in why
    assert "too few" in timing.instability([1.0, 2.0], [1.0, 1.0])
    r = timing.paired_ratio(eager, onnx)
    lat = Latency(eager_ms=r.eager_s * 1e3, onnx_ms=r.onnx_s * 1e3, ratio=r.ratio, low=r.low,
                  high=r.high, pairs=r.pairs, stable=r.narrow, why=why)
    assert not lat.stable and "0.00×" not in lat.describe()
    assert "0.00034× (95% 0.00015–0.0014" in lat.describe() and why in lat.describe()
    run = RunResult(cases=[_case("m/float32/x/b1/cpu", Performance(PerformanceLimits(), lat))])
    recorded, changes = bl.update(bl.Baseline(str(tmp_path / "b.yml")), run)
    assert [str(c) for c in changes] == ["recorded performance: time ratios of 1 case(s)"]
    assert [(p.id, p.figures) for p in recorded.performance] == [
        ("m/float32/x/b1/cpu", (float(f"{r.ratio:.4g}"), float(f"{r.low:.4g}"),
                                float(f"{r.high:.4g}")))]
    # too few pairs for an interval: nothing recorded
    few = Latency(eager_ms=1, onnx_ms=1, ratio=1, low=0.5, high=2, pairs=3, stable=False)
    none, _ = bl.update(bl.Baseline(str(tmp_path / "c.yml")),
                        RunResult(cases=[_case("m/float32/x/b1/cpu",
                                               Performance(PerformanceLimits(), few))]))
    assert none.performance == ()
    from parity_gate.report import performance as report

    text = report.markdown(run, decide(run))
    assert "0.00034× (0.00015–0.0014) ~" in text and "14–134 ms" in text
