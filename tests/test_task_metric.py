"""Task-metric parity (issue 51): a digits classifier trained on scikit-learn's digits,
exported at float32 (no drop), at float16 (judged by its interval) and with a planted
export-only defect that flips about 1 % of its labels (a drop, its flipped samples named);
the paired statistics themselves on data whose answer is known."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import junitparser
import numpy as np
import pytest

from parity_gate.cli import main
from parity_gate.compare.task import Paired, paired_stats, predictions

DATA = Path(__file__).resolve().parent / "data" / "task"


# ------------------------------------------------------------------- pure: the statistics


def _labels(n: int, accuracy: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    return y, np.where(rng.random(n) < accuracy, y, (y + 1) % 10)


def test_identical_predictions_pass_with_an_interval_of_zero() -> None:
    y, e = _labels(500, 0.9)
    s = paired_stats("top1", Paired(y, e, e.copy()), 0.5)
    assert (s.verdict, s.delta, s.low, s.high, s.eager_only, s.onnx_only) == (
        "pass", 0, 0, 0, 0, 0)
    assert s.p_value == 1.0


def test_a_planted_drop_fails_with_its_discordant_samples_and_mcnemar() -> None:
    y, e = _labels(2000, 0.9)
    o = e.copy()
    hit = np.flatnonzero(e == y)[:20]  # 1 point of 2,000
    o[hit] = (y[hit] + 1) % 10
    s = paired_stats("top1", Paired(y, e, o), 0.25)
    assert s.verdict == "drop" and s.delta == pytest.approx(-1.0)
    assert (s.eager_only, s.onnx_only) == (20, 0) and s.flipped == tuple(int(i) for i in hit)
    assert s.p_value is not None and s.p_value < 1e-5  # exact: 2 * 0.5**20
    assert s.high < -0.25 and s.flips is not None and sum(a for a, _ in s.flips.values()) == 20


def test_a_small_slice_straddling_the_budget_is_inconclusive_and_says_what_settles_it() -> None:
    y, e = _labels(200, 0.9)
    o = e.copy()
    o[np.flatnonzero(e == y)[:1]] += 1
    s = paired_stats("top1", Paired(y, e, o), 0.4)
    assert s.verdict == "inconclusive" and s.settle is not None and s.settle > 200
    assert "inconclusive: the slice is too small" in s.describe()


def test_the_bootstrap_is_seeded_and_paired() -> None:
    y, e = _labels(300, 0.8)
    o = np.where(np.arange(300) % 7 == 0, (e + 1) % 10, e)
    a = paired_stats("top1", Paired(y, e, o), 1.0, seed=3)
    b = paired_stats("top1", Paired(y, e, o), 1.0, seed=3)
    assert (a.low, a.high) == (b.low, b.high)
    # paired: a constant shift of both sides' errors leaves the delta's interval at zero
    r = np.linspace(0, 1, 300)
    s = paired_stats("mae", Paired(r, r + 0.1, r + 0.1), 0.0)
    assert s.verdict == "pass" and s.low == s.high == 0


def test_the_mean_metrics_are_scikit_learns() -> None:
    """Accuracy, MAE and MSE are read as per-sample means (fast); they equal sklearn's."""
    from sklearn import metrics as skm

    rng = np.random.default_rng(2)
    y, e = _labels(1000, 0.9)
    o = np.where(rng.random(1000) < 0.9, y, (y + 2) % 10)
    s = paired_stats("top1", Paired(y, e, o), 0.5)
    assert s.eager == pytest.approx(100 * skm.accuracy_score(y, e), abs=1e-9)
    assert s.onnx == pytest.approx(100 * skm.accuracy_score(y, o), abs=1e-9)
    r = rng.normal(size=1000)
    a, b = r + rng.normal(scale=0.1, size=1000), r + rng.normal(scale=0.2, size=1000)
    for metric, fn in (("mae", skm.mean_absolute_error), ("mse", skm.mean_squared_error)):
        got = paired_stats(metric, Paired(r, a, b), 1.0)
        assert (got.eager, got.onnx) == (pytest.approx(fn(r, a)), pytest.approx(fn(r, b)))


@pytest.mark.parametrize("metric", ["f1_macro", "f1_micro", "topk", "mae", "mse"])
def test_every_metric_reports_a_drop_the_same_way(metric: str) -> None:
    rng = np.random.default_rng(1)
    if metric in ("mae", "mse"):
        y = rng.normal(size=1000)
        e = y + rng.normal(scale=0.1, size=1000)
        s = paired_stats(metric, Paired(y, e, e + 0.5), 0.01)
        assert s.verdict == "drop" and s.delta > 0
        return
    scores = rng.normal(size=(1000, 10))
    y = scores.argmax(1)
    worse = scores.copy()
    worse[:100, 0] += 10  # the first 100 samples all say classes 0 then 1
    worse[:100, 1] += 9
    e_pred, e_hit = predictions(metric, scores, y, 2)
    o_pred, o_hit = predictions(metric, worse, y, 2)
    s = paired_stats(metric, Paired(y, e_pred, o_pred, e_hit, o_hit), 0.5)
    assert s.verdict == "drop" and s.delta < 0, s.describe()


# ------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    sys.path.insert(0, str(DATA))
    try:
        import task_models
        images, labels = task_models.digits()
    finally:
        sys.path.remove(str(DATA))
    folder = tmp_path_factory.mktemp("task")
    np.savez(folder / "digits.npz", images=images, labels=labels)
    (folder / "task_models.py").write_text((DATA / "task_models.py").read_text())
    task = ("task: {name: digits, data: digits.npz, keys: {x: images}, labels: labels, "
            "metric: top1, batch_size: 512, resamples: 1000, max_drop: %s}")
    (folder / "parity.yml").write_text(f"""version: 1
defaults:
  batch_sizes: [4]
  dtypes: [float32, float16]
providers:
  cpu: {{required: true}}
fixtures:
  pix:
    kind: random
    inputs:
      x: {{shape: [batch, 64]}}
modules:
  - name: digits
    factory: "task_models:classifier"
    inputs: [{{name: x}}]
    fixtures: [pix]
    {task % 0.5}
  - name: planted
    factory: "task_models:planted"
    dtypes: [float32]
    inputs: [{{name: x}}]
    fixtures: [pix]
    {task % 0.25}
""")
    out = folder / "out"
    code = main(["run", str(folder / "parity.yml"), "--out", str(out), "--no-cache", "--quiet",
                 "--no-localise"])
    return code, json.loads((out / "results.json").read_text()), out


def _case(doc: dict[str, Any], case_id: str) -> dict[str, Any]:
    return next(c for c in doc["cases"] if c["id"] == case_id)


@pytest.mark.process
def test_a_lossless_export_holds_the_task_and_a_planted_flip_drops_it(
        digits_run: tuple[int, dict[str, Any], Path]) -> None:
    code, doc, _ = digits_run
    assert code == 1
    clean = _case(doc, "digits/float32/digits@task/b512/cpu")
    assert clean["outcome"] == "pass", clean["reason"]
    task = clean["task"]
    assert task["samples"] == 1797 and task["delta"] == 0 and task["low"] == task["high"] == 0
    assert task["eager"] > 95  # the classifier was trained: its accuracy is real
    half = _case(doc, "digits/float16/digits@task/b512/cpu")
    assert half["task"]["verdict"] in ("pass", "inconclusive", "drop")
    assert half["task"]["low"] <= half["task"]["delta"] <= half["task"]["high"]
    assert (half["outcome"] == "pass") == (half["task"]["verdict"] == "pass")
    planted = _case(doc, "planted/float32/digits@task/b512/cpu")
    assert planted["outcome"] == "metric_drop", planted["reason"]
    t = planted["task"]
    assert t["verdict"] == "drop" and t["onnx_only"] == 0 and 10 <= t["eager_only"] <= 25
    assert len(t["flipped"]) == t["eager_only"] and t["p_value"] < 1e-3
    assert [f["label"] for f in t["flips"]] and all(f["onnx_only"] == 0 for f in t["flips"])
    # the tensor cases of the planted module fail too: its export really differs
    assert _case(doc, "planted/float32/pix/b4/cpu")["outcome"] == "mismatch"


@pytest.mark.process
def test_the_reports_show_the_metric_table_flips_and_properties(
        digits_run: tuple[int, dict[str, Any], Path]) -> None:
    _, doc, out = digits_run
    summary = (out / "summary.md").read_text()
    assert "### Task metrics" in summary
    row = next(ln for ln in summary.splitlines()
               if ln.startswith("| `planted/float32/digits@task/b512/cpu`"))
    assert "**drop**" in row and "budget 0.25 pt" in row
    planted = _case(doc, "planted/float32/digits@task/b512/cpu")
    assert f"flipped samples: {planted['task']['flipped'][0]}" in summary
    page = (out / "report.html").read_text()
    assert '<section id="tasks">' in page and "flips per true class" in page
    suite = next(s for s in junitparser.JUnitXml.fromfile(str(out / "junit.xml"))
                 if s.name == "planted")
    props = {p.name: p.value for p in suite.properties()}
    assert props["task.float32/digits@task/b512/cpu.verdict"] == "drop"


def test_a_check_whose_extra_is_missing_is_one_located_line_at_load() -> None:
    from parity_gate.manifest import load
    from parity_gate.manifest.located import Problems, load_document

    text = "modules:\n  - name: m\n    task: {data: d.npz}\n"
    doc = load_document(text, "p.yml")
    module = doc.data["modules"][0]
    problems = Problems(doc)
    load._check_extras(module, ("modules", 0), problems)  # sklearn and scipy are installed
    assert not problems
    load._check_extras(module, ("modules", 0), problems,
                       (("task", None, "task", ("no_such_module_for_parity_gate",)),))
    (item,) = problems.items
    assert item[2] == ("p.yml:3:11: modules[0].task: needs no_such_module_for_parity_gate, "
                       "which this environment lacks (expected the `task` extra: pip install "
                       "'parity-gate[task]')")
