"""Sharding is a pure function of the plan: checked on the bundled example without running."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity_gate import cli
from parity_gate.errors import UserError
from parity_gate.manifest.load import load_manifest
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseKey, CaseResult, RunResult
from parity_gate.plan.cases import Plan, plan
from parity_gate.plan.sharding import (
    EXPORT_WEIGHT,
    Shard,
    assign,
    costs,
    estimate,
    plan_ids,
    recorded_seconds,
    shard_plan,
    units,
)

EXAMPLE = Path(__file__).resolve().parent.parent / "parity_gate" / "example" / "parity.yml"


@pytest.fixture(scope="module")
def example() -> Plan:
    return plan(load_manifest(EXAMPLE), EXAMPLE, ["cpu"])


def ids(p: Plan) -> list[str]:
    return [k.id for j in p.jobs for k in j.cases] + [c.id for c in p.skipped]


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_every_case_in_exactly_one_shard(example: Plan, count: int) -> None:
    parts = [shard_plan(example, Shard(k, count)) for k in range(1, count + 1)]
    seen = Counter(i for p in parts for i in ids(p))
    assert set(seen) == plan_ids(example) and set(seen.values()) == {1}
    owner: dict[str, int] = {}
    for n, part in enumerate(parts):  # a module is never split; its skipped cases go with it
        for module, case_ids in units(part).items():
            assert module not in owner
            owner[module] = n
            assert sorted(case_ids) == sorted(units(example)[module])
    assert set(owner) == {"cnn", "encoder", "mlp"}
    assert parts == [shard_plan(example, Shard(k, count)) for k in range(1, count + 1)]


def test_split_does_not_depend_on_the_machine(example: Plan) -> None:
    """A CUDA runner and a CPU runner of one matrix must agree on who runs what."""
    gpu = plan(load_manifest(EXAMPLE), EXAMPLE, ["cpu", "cuda"])
    assert estimate(gpu) == estimate(example)
    for count in (2, 3):
        assert assign(costs(gpu), count) == assign(costs(example), count)


def test_estimate_is_cases_plus_exports(example: Plan) -> None:
    est = estimate(example)
    # mlp: 2 dtypes x (3 file + 4 edge batches) x 2 providers; cnn: 1 x 3 x 2
    assert est["mlp"] == 28 + 2 * EXPORT_WEIGHT
    assert est["cnn"] == 6 + EXPORT_WEIGHT
    assert assign(est, 2) == [["mlp"], ["cnn", "encoder"]]
    assert assign(est, 4) == [["mlp"], ["cnn"], ["encoder"], []]


def timed(module: str, dtype: str, export_s: float, run_s: float, batch: int = 2) -> CaseResult:
    key = CaseKey(module, dtype, "f", batch, "cpu")
    return CaseResult(key, Outcome.PASS,
                      timings={"export_s": export_s, "check_s": 0.0, "session_s": 0.5,
                               "run_s": run_s, "compare_s": 0.0, "eager_s": 0.0})


def test_recorded_seconds_count_a_shared_export_once() -> None:
    run = RunResult(cases=[timed("m", "float32", 10.0, 1.0, 1), timed("m", "float32", 10.0, 1.0, 4),
                           timed("m", "float16", 5.0, 2.0), timed("n", "float32", 1.0, 0.0)])
    assert recorded_seconds(run) == {"m": 10 + 5 + 0.5 + 0.5 + 1 + 1 + 2, "n": 1.5}


def test_recorded_timings_rebalance_and_fill_in_the_rest(example: Plan) -> None:
    recorded = {"cnn": 100.0, "encoder": 1.0}  # mlp unknown: estimate scaled to seconds
    c = costs(example, recorded)
    est = estimate(example)
    assert c["cnn"] == 100.0 and c["encoder"] == 1.0
    assert c["mlp"] == pytest.approx(est["mlp"] * 101.0 / (est["cnn"] + est["encoder"]))
    assert assign(costs(example, {"cnn": 100.0, "encoder": 1.0, "mlp": 10.0}), 2) == \
        [["cnn"], ["encoder", "mlp"]]
    assert assign(costs(example, {"gone": 5.0}), 2) == assign(estimate(example), 2)


def test_lpt_ties_break_by_name() -> None:
    assert assign({"b": 1.0, "a": 1.0, "c": 1.0, "d": 3.0}, 2) == [["d"], ["a", "b", "c"]]
    assert assign({}, 3) == [[], [], []]


@given(st.dictionaries(st.text("abcdefgh", min_size=1, max_size=4),
                       st.floats(0, 1000, allow_nan=False), max_size=30),
       st.integers(1, 6))
def test_assign_is_a_balanced_partition(module_costs: dict[str, float], count: int) -> None:
    shards = assign(module_costs, count)
    assert len(shards) == count
    assert sorted(m for s in shards for m in s) == sorted(module_costs)
    loads = [sum(module_costs[m] for m in s) for s in shards]
    if module_costs:  # greedy LPT: no shard exceeds the mean by more than one module
        assert max(loads) <= sum(loads) / count + max(module_costs.values()) + 1e-6
    assert assign(dict(reversed(module_costs.items())), count) == shards


@pytest.mark.parametrize("text", ["0/2", "3/2", "a/b", "2", "1/0", "-1/2"])
def test_bad_shard_is_a_usage_error(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match="expected K/N with 1 <= K <= N"):
        Shard.parse(text)
    assert cli.main(["run", str(EXAMPLE), f"--shard={text}"]) == 2
    assert capsys.readouterr().err.startswith(f"--shard: got {text!r}")


def test_shard_parse_and_str() -> None:
    assert Shard.parse(" 2 / 4 ") == Shard(2, 4) and str(Shard(2, 4)) == "2/4"
