"""A model run's upstream drafts on the fewest elements that show each defect.

Real export, ONNX Runtime and localisation on blocks that hit real torchlib defects
(benchmarks/upstream_models), then `parity-gate upstream --results` in draft mode against
the local GitHub server. Each draft's script must stand alone (run here from the draft's
text, in an empty folder, it fails its assertion), feed one element per input where the
op is elementwise, read as chosen values (no value of random data in it or the title),
and two models that hit one defect must make one draft.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from github_server import FakeGitHub

from parity_gate.cli import main
from parity_gate.gate.merge import read_results
from parity_gate.model.upstream import Symptom
from parity_gate.ops import elements

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "benchmarks" / "upstream_models" / "models.py"
MANIFEST = """\
version: 1
python_path: [.]
defaults: {batch_sizes: [2], dtypes: [float32]}
providers: {cpu: {required: true}}
fixtures:
  vec: {kind: random, samples: 1, inputs: {x: {shape: [batch, 8]}}}
  grid:
    kind: random
    samples: 1
    inputs:
      dy: {shape: [batch, 8], dtype: int64, low: -2, high: 2}
      dx: {shape: [batch, 8], dtype: int64, low: -2, high: 2}
modules:
  - {name: grid_angle, factory: "models:grid_angle", fixtures: [grid],
     inputs: [{name: dy}, {name: dx}]}
  - {name: phase_wrap, factory: "models:phase_wrap", fixtures: [vec], inputs: [{name: x}]}
  - {name: overflow_guard, factory: "models:overflow_guard", fixtures: [vec], inputs: [{name: x}]}
  - {name: sanitised_logits, factory: "models:sanitised_logits", fixtures: [vec],
     inputs: [{name: x}]}
"""


def test_one_element_follows_broadcasting_and_refuses_what_is_not_elementwise() -> None:
    a = np.arange(16.0, dtype=np.float32).reshape(2, 8)
    b = np.arange(8, dtype=np.int64)
    one = elements.one_element({"a": a, "b": b, "s": np.float32(2.0) * np.ones(())},
                               (2, 8), (1, 3))
    assert one is not None
    assert (one["a"].shape, float(one["a"][0, 0])) == ((1, 1), 11.0)
    assert (one["b"].shape, int(one["b"][0]), one["b"].dtype) == ((1,), 3, np.int64)
    assert one["s"].shape == ()
    assert elements.one_element({"a": a}, (2, 4), (0, 0)) is None        # not its broadcast
    assert elements.one_element({"a": a[:, :1]}, (2, 8), (0, 0)) is None  # output is larger
    assert elements.one_element({"a": a[:1, :1]}, (1, 1), (0, 0)) is None  # one already


def test_a_title_quotes_only_chosen_values_and_rounding_keeps_specials() -> None:
    assert [elements.plain(v) for v in ("0.0", "-2.0", "nan", "-inf", "True", "0.25",
                                        "1.7e+308", "-0.3896045", "3663.7336")] == \
        [True] * 7 + [False, False]
    assert elements.call_text("torch.ops.aten.atan2.default(A['y'], A['x'])",
                              {"y": "0.0", "x": "-2.0"}) == "atan2(0.0, -2.0)"
    assert elements.call_text("torch.ops.aten.scalar_tensor.default("
                              "-1.7976931348623157e+308, dtype=torch.float64)", {}) == \
        "scalar_tensor(-1.798e+308, dtype=torch.float64)"
    assert elements.call_text("torch.ops.aten.atan2.default(A['y'], A['x'])", {"y": "0"}) \
        is None
    out = elements.rounded({"x": np.array([-0.35703796, np.inf, -0.0, 2.0], np.float32),
                            "i": np.array([7], np.int64)})
    assert out is not None
    assert out["x"].tolist() == [np.float32(-0.4), np.inf, 0.0, 2.0]
    assert np.signbit(out["x"][2]) and out["i"].tolist() == [7]
    assert elements.rounded({"x": np.array([0.5, np.nan], np.float32)}) is None


@pytest.mark.process
def test_model_run_drafts_stand_alone_on_one_chosen_element_one_per_defect(
        tmp_path: Path) -> None:
    (tmp_path / "parity.yml").write_text(MANIFEST, encoding="utf-8")
    shutil.copy(MODELS, tmp_path / "models.py")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "parity.yml"), "--out", str(out), "--quiet"]) == 1
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_TOKEN", "PARITY_GATE_UPSTREAM_TOKEN")}
    env.update(PYTHONPATH=str(ROOT), PARITY_GATE_SEARCH_PER_MINUTE="60000")
    with FakeGitHub() as gh:
        done = subprocess.run([sys.executable, "-m", "parity_gate", "upstream", "--results",
                               str(out / "results.json"), "--api-url", gh.url],
                              capture_output=True, text=True, env=env, timeout=600,
                              check=False)
        assert gh.errors == [], gh.errors
    assert done.returncode == 0, done.stderr
    run = read_results(out / "results.json")[1]
    reports = {r.signature.op_name: r for r in run.upstream if r.signature is not None}
    # both models' scalar_tensor(v, dtype=float64) past float32's range: one defect, read
    # at the culprit (overflow to inf), not at the model's bool output
    assert set(reports) == {"atan2", "remainder", "scalar_tensor"}, list(reports)
    overflow = reports["scalar_tensor"]
    assert overflow.signature is not None
    assert overflow.signature.symptom is Symptom.OVERFLOW_TO_INF
    assert sorted(c.split("/")[0] for c in overflow.cases) == ["overflow_guard",
                                                               "sanitised_logits"]
    titles = {}
    for name, r in reports.items():
        assert r.draft is not None, (name, r.not_drafted)
        text = Path(r.draft).read_text(encoding="utf-8")
        titles[name] = text.splitlines()[1]
        script = re.search(r"```python\n(.*?)\n```", text, re.S)
        assert script is not None and not Path(r.draft).with_suffix(".repro").exists()
        code = script.group(1)
        assert len(code.splitlines()) <= 30
        assert not re.search(r"grid_angle|phase_wrap|overflow_guard|sanitised|parity",
                             code)
        # every array in it is one element, every value a chosen one
        arrays = re.findall(r"np\.array\(\[([^\]]*)\]", code)
        assert all("," not in a for a in arrays), arrays
        assert all(elements.plain(v.replace("np.", "").strip()) for v in arrays), arrays
        folder = tmp_path / f"read-{name}"
        folder.mkdir()
        (folder / "repro.py").write_text(code + "\n", encoding="utf-8")
        again = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True,
                               text=True, timeout=300, check=False)
        assert again.returncode == 1 and "AssertionError" in again.stderr, again.stderr[-500:]
        assert again.stdout.strip().splitlines()[-1] in text  # the output the draft shows
    assert titles["atan2"] == \
        "# [torchlib] atan2(0.0, -2.0) returns -3.142 where eager returns 3.142"
    assert re.fullmatch(r"# \[torchlib\] remainder\(-?\d(\.\d)?, inf\) returns NaN instead "
                        r"of inf", titles["remainder"]), titles["remainder"]
    assert titles["scalar_tensor"].startswith("# [torchlib] scalar_tensor(")
    assert "dtype=torch.float64) returns inf instead of" in titles["scalar_tensor"]


ATAN2_ON_INTEGERS = """\
import torch
import onnxruntime as ort


class Model(torch.nn.Module):
    def forward(self, input, other):
        return torch.atan2(input, other)


inputs = (
    torch.tensor([{y}], dtype=torch.int64),
    torch.tensor([{x}], dtype=torch.int64),
)
model = Model().eval()
onnx_program = torch.onnx.export(model, inputs, dynamo=True)
session = ort.InferenceSession(onnx_program.model_proto.SerializeToString(), \
providers=['CPUExecutionProvider'])
feeds = {{i.name: t.detach().numpy() for i, t in zip(session.get_inputs(), inputs)}}
got = torch.from_numpy(session.run(None, feeds)[0])
expected = model(*inputs).detach()
torch.testing.assert_close(got, expected, equal_nan=True, atol=0.0, rtol=0.0)
"""


@pytest.mark.process
def test_an_integer_scope_is_measured_on_float32_before_a_title_says_it() -> None:
    """atan2(0, -3) on int64 fails because atan2(+0.0, -3.0) does: the float32 probe fails
    the same way, so the title must not say "on integer inputs"; a probe that passes keeps
    the scope, and a repro that is not one element gets no probe."""
    from parity_gate.ops import upstream_repro
    from parity_gate.ops.upstream_check import run_one

    stages = {15: "export", 16: "session", 20: "assert"}
    wrong = upstream_repro.Repro(ATAN2_ON_INTEGERS.format(y=0, x=-3), stages, "assert",
                                 "one element")
    probe = upstream_repro.float_probe(wrong)
    assert probe is not None
    assert "torch.tensor([0.0], dtype=torch.float32)" in probe.script
    assert "atol=0.0001, rtol=0.001)" in probe.script and "return torch.atan2(" in probe.script
    answer = run_one(probe.script, probe.stages)
    assert upstream_repro.reproduced(probe, answer["stage"], answer["error"], answer["output"])
    fine = upstream_repro.float_probe(upstream_repro.Repro(
        ATAN2_ON_INTEGERS.format(y=1, x=2), stages, "assert", "one element"))
    assert fine is not None
    answer = run_one(fine.script, fine.stages)
    assert not upstream_repro.reproduced(fine, answer["stage"], answer["error"],
                                         answer["output"])
    assert upstream_repro.float_probe(upstream_repro.Repro(
        ATAN2_ON_INTEGERS.format(y=0, x=-3), stages, "assert", "seeded")) is None


@pytest.mark.process
def test_sweep_titles_name_the_verified_trigger_and_no_unverified_scope(
        tmp_path: Path) -> None:
    """The bundled sweep's atan2 and scatter_reduce findings, drafted with every repro run:
    atan2's integer scope is measured wrong on float32 and its one-element repro's values
    name the trigger; scatter_reduce's sweep value at the worst index (a -0 that does not
    feed that output element) is no trigger, and its two behaviours are two drafts."""
    import gzip
    import json

    from test_github_upstream import client

    from parity_gate.github import upstream, upstream_pass
    from parity_gate.model.results import RunResult

    path = ROOT / "tests" / "data" / "upstream" / "bundled-findings.json.gz"
    run = RunResult.from_dict(json.loads(gzip.decompress(path.read_bytes())))
    keep = ("atan2", "scatter_reduce")
    run.cases = [c for c in run.cases if c.op is not None
                 and c.op.variant.split(".")[0].split("_")[0] in ("atan2", "scatter")
                 and c.failed]
    assert run.cases
    with FakeGitHub() as gh:
        _, warnings = upstream_pass.attach(run, client(gh), upstream.UpstreamOptions(
            mode="draft", drafts=tmp_path / "d", verify=True,
            check_cache=tmp_path / "checks.json"))
        assert gh.errors == [] and warnings == []
    titles = sorted(f.read_text(encoding="utf-8").splitlines()[1]
                    for f in (tmp_path / "d").iterdir())
    atan2 = [t for t in titles if "atan2" in t]
    assert "# [torchlib] atan2(0.0, -3.0) returns -3.142 where eager returns 3.142" in atan2
    assert not any("integer" in t for t in atan2), atan2
    scatter = [t for t in titles if "scatter_reduce" in t and "instead of" in t]
    assert any("instead of -inf" in t for t in scatter) and \
        any("instead of NaN" in t for t in scatter), titles
    assert not any("-0 input" in t for t in scatter), scatter
    assert all(k in " ".join(titles) for k in keep)


def test_a_fully_masked_row_is_opened_only_where_one_is() -> None:
    mask = np.array([[True, False], [False, False]])
    additive = np.array([[0.0, -np.inf], [-np.inf, -np.inf]], np.float32)
    out = elements.unmasked({"m": mask, "a": additive, "x": np.ones((2, 2), np.float32)})
    assert out is not None
    assert out["m"].tolist() == [[True, False], [True, True]]
    assert out["a"].tolist() == [[0.0, -np.inf], [0.0, 0.0]]
    assert mask.tolist() == [[True, False], [False, False]]  # the caller's arrays untouched
    assert elements.unmasked({"m": np.array([[True, False]]),
                              "e": np.zeros((2, 0), np.float32)}) is None
