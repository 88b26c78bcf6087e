"""Upstream status for a model run's own failures: real export, real ONNX Runtime, real
localisation, then `parity-gate upstream --results` against the local GitHub server.

The models (tests/data/known_sdpa) reproduce the two ways torchlib's
scaled_dot_product_attention fails on a fully masked query row: NaN with a float
mask of -inf, the mean of V with a bool mask of False. Upstream texts are written
as their reports are (the op as code, the mask, the symptom); which of them claim a
defect is the search's reading, not the test's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from github_server import FakeGitHub, Item

from parity_gate.cli import main
from parity_gate.gate.merge import read_results
from parity_gate.github import comment
from parity_gate.model.results import RunResult
from parity_gate.model.upstream import Owner

ROOT = Path(__file__).resolve().parent.parent
KNOWN_SDPA = ROOT / "tests" / "data" / "known_sdpa"
ONNXSCRIPT = "microsoft/onnxscript"
SDPA = "torch.nn.functional.scaled_dot_product_attention"
BOOL_FIX = Item(
    ONNXSCRIPT, 2479, "[torchlib] Fix SDPA with a boolean attn_mask for a fully masked row",
    pr=True, body="`aten_scaled_dot_product_attention` with a bool `attn_mask` whose row is "
    "all False returns the mean of V for that row: wrong values, where eager returns "
    "zeros. This fixes it by zeroing the row after Softmax.")
FLOAT_FIX = Item(
    ONNXSCRIPT, 2654, "[torchlib] Fix NaN in scaled_dot_product_attention for fully masked "
    "rows of a float attn_mask", pr=True, state="closed", merged=True, milestone="v0.7.3",
    body="`aten_scaled_dot_product_attention` adds a float `attn_mask` of -inf before "
    "Softmax; a row that is all -inf gives NaN where torch returns 0. Use the lowest float "
    "instead of -inf and a NaN-safe softmax.")


@pytest.fixture(scope="module")
def model_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of the two models: both fail, both localised to the SDPA node."""
    out = tmp_path_factory.mktemp("sdpa") / "out"
    assert main(["run", str(KNOWN_SDPA / "parity.yml"), "--out", str(out), "--quiet"]) == 1
    return out


@pytest.fixture
def run_copy(model_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(model_run, out)
    return out


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server
        assert server.errors == [], server.errors


def upstream_cli(results: Path, gh: FakeGitHub, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_TOKEN", "PARITY_GATE_UPSTREAM_TOKEN")}
    env.update(PYTHONPATH=str(ROOT), PARITY_GATE_SEARCH_PER_MINUTE="60000")
    return subprocess.run([sys.executable, "-m", "parity_gate", "upstream", "--results",
                           str(results), "--api-url", gh.url, *extra],
                          capture_output=True, text=True, env=env, timeout=600, check=False)


def cause_items(markdown: str) -> dict[str, str]:
    """Each failing module's cause line as GitHub renders it, by module name."""
    html = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    items = [li.split("</li>")[0] for li in html.split("<li>")[1:]]
    return {m: li for li in items for m in ("float_mask_row", "bool_mask_row")
            if f"<strong>{m}</strong>" in li}


@pytest.mark.process
def test_each_localised_failure_is_a_signature_searched_and_shown_beside_its_case(
        run_copy: Path, gh: FakeGitHub) -> None:
    """A model run's localised failures are searched as the sweep's are: one signature per
    culprit (op as users call it, the mask it passes, the symptom, torchlib's function);
    the status goes into results.json and beside each failing case in summary.md and the
    PR comment; the defect nobody reported is drafted with the node repro attached."""
    gh.items += [BOOL_FIX]
    done = upstream_cli(run_copy / "results.json", gh)
    assert done.returncode == 0, done.stderr
    assert "2 defect(s), 1 drafted; 2 API call(s) (2 searches, 0 writes)" in done.stderr
    queries = [c.query["q"][0] for c in gh.calls("search")]
    assert all("scaled_dot_product_attention" in q for q in queries)
    run = read_results(run_copy / "results.json")[1]
    by_case = {r.cases[0]: r for r in run.upstream}
    assert set(by_case) == {"bool_mask_row/float32/vec/b2/cpu",
                            "float_mask_row/float32/vec/b2/cpu"}
    bool_r, float_r = by_case["bool_mask_row/float32/vec/b2/cpu"], \
        by_case["float_mask_row/float32/vec/b2/cpu"]
    for r in (bool_r, float_r):
        sig = r.signature
        assert r.op.source == "localised" and sig is not None
        assert (sig.user_op, sig.overload, sig.owner.value, sig.args, sig.lowering) == (
            SDPA, "aten.scaled_dot_product_attention.default", "translation", ["attn_mask"],
            "aten_scaled_dot_product_attention")
        assert sig.calls == ["return F.scaled_dot_product_attention(qkv, qkv, qkv, "
                             "attn_mask=self.mask)"]
    assert (bool_r.signature.symptom.value, bool_r.signature.input_classes) == (
        "wrong_values", ["normal"])
    assert (float_r.signature.symptom.value, float_r.signature.input_classes) == (
        "nan_introduced", ["specials"])  # the mask's -inf reaches the node
    assert bool_r.match is not None and bool_r.match.number == 2479
    assert float_r.match is None and float_r.draft is not None
    assert bool_r.status() == "known: onnxscript#2479, open PR"
    assert float_r.status() == "no report found: draft attached"

    draft = Path(float_r.draft)
    text = draft.read_text(encoding="utf-8")
    # the title quotes what the repro prints for its worst element (special values, not the
    # model's data), names the option by its kind, never a dangling "with attn_mask", and
    # the fully masked row the defect was measured to need (opened, the repro passes)
    assert text.splitlines()[1] == ("# [torchlib] scaled_dot_product_attention returns NaN "
                                    "instead of 0 with a float32 attn_mask for a fully "
                                    "masked row")
    # the repro stands alone: torchlib's defect as the one eager call in a module, its
    # arguments written out and renamed; no file attached, no case id or tool name
    assert not draft.with_suffix(".repro").exists()
    script = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert "return torch.ops.aten.scaled_dot_product_attention.default(x0, x0, x0, x1)" \
        in script and "np.load" not in script and "mask" not in script
    assert len(script.splitlines()) <= 30
    visible = re.sub(r"<!--.*?-->", "", text)  # the fingerprint is an HTML comment
    assert not any(w in visible for w in ("float_mask_row", "parity-gate", "parity_gate",
                                          "b2/cpu")), visible
    assert "attn\\_mask: float32 tensor" in text
    alone = draft.parent / "alone"
    alone.mkdir()
    (alone / "repro.py").write_text(script, encoding="utf-8")
    again = subprocess.run([sys.executable, "repro.py"], cwd=alone, capture_output=True,
                           text=True, timeout=300, check=False)
    assert again.returncode == 1 and "AssertionError" in again.stderr
    assert "| onnxruntime: nan" in again.stdout and "| onnxruntime: nan" in text

    summary = cause_items((run_copy / "summary.md").read_text(encoding="utf-8"))
    posted = cause_items(comment.body(run, "k", None, {}))
    for shown in (summary, posted):
        assert "upstream: known: onnxscript#2479, open PR" in shown["bool_mask_row"]
        assert "upstream: no report found: draft attached" in shown["float_mask_row"]


@pytest.mark.process
def test_a_merged_fix_in_a_newer_release_says_upgrade(run_copy: Path, gh: FakeGitHub) -> None:
    """Search only: the float-mask NaN is fixed in a release newer than the installed
    onnxscript (its milestone), so the case says which one to upgrade to; the bool-mask
    defect has no report and, with nothing drafted, says only that."""
    gh.items += [FLOAT_FIX]
    done = upstream_cli(run_copy / "results.json", gh, "--search-only")
    assert done.returncode == 0, done.stderr
    doc = json.loads((run_copy / "results.json").read_text())
    assert [u["op"]["source"] for u in doc["upstream"]] == ["localised", "localised"]
    run = RunResult.from_dict(doc)
    status = {r.cases[0].split("/")[0]: r.status() for r in run.upstream}
    installed = run.versions["onnxscript"]
    assert installed < "0.7.3", installed  # the fixture's milestone must be newer
    assert status == {"float_mask_row": "fixed in onnxscript 0.7.3: upgrade (onnxscript#2654)",
                      "bool_mask_row": "no report found"}
    shown = cause_items((run_copy / "summary.md").read_text(encoding="utf-8"))
    assert "upstream: fixed in onnxscript 0.7.3: upgrade (onnxscript#2654)" in \
        shown["float_mask_row"]


@pytest.mark.process
def test_the_float_mask_nan_cites_its_own_known_finding_and_records_its_trigger(
        model_run: Path) -> None:
    """The float-mask NaN row cites the float-mask finding, never the bool-mask one (mean of
    V), and the culprit records the option that triggers it with the mask's dtype."""
    run = read_results(model_run / "results.json")[1]
    locs = {c.key.module: c.localisation for c in run.cases}
    float_loc, bool_loc = locs["float_mask_row"], locs["bool_mask_row"]
    assert float_loc is not None and bool_loc is not None
    assert float_loc.known_op is not None and bool_loc.known_op is not None
    assert float_loc.known_op.finding == "op/sdpa.float_mask_fully_masked_row/float32/normal/cpu"
    assert "bool_mask" not in float_loc.known_op.finding
    assert bool_loc.known_op.finding == "op/sdpa.bool_mask_fully_masked_row/float32/normal/cpu"
    assert float_loc.culprit is not None and bool_loc.culprit is not None
    assert float_loc.culprit.options == {"attn_mask": "float32 tensor"}
    assert bool_loc.culprit.options == {"attn_mask": "bool tensor"}


@pytest.mark.process
def test_the_actions_post_step_searches_a_model_run(run_copy: Path, gh: FakeGitHub,
                                                    tmp_path: Path) -> None:
    """`upstream: search` in the Action's post step (in process: the Action's entry runs
    isolated, on the installed package) gives a model run the same statuses, in
    results.json, in summary.md beside each failing case and in the job summary."""
    from parity_gate.github import post

    gh.items += [BOOL_FIX]
    step_summary = tmp_path / "step-summary.md"
    inputs = {"comment": "off", "upstream": "search", "github_token": "",
              "upstream_token": "", "upstream_api_url": gh.url,
              "results": "out/results.json", "event_file": ""}
    env = {"GITHUB_STEP_SUMMARY": str(step_summary), "PARITY_GATE_SEARCH_PER_MINUTE": "60000"}
    assert post._post(inputs, run_copy.parent, run_copy, None, env) == 0
    assert len(gh.calls("search")) == 2  # one search per root cause
    run = read_results(run_copy / "results.json")[1]
    assert sorted(r.status() for r in run.upstream) == [
        "known: onnxscript#2479, open PR", "no report found"]
    shown = cause_items((run_copy / "summary.md").read_text(encoding="utf-8"))
    assert "upstream: known: onnxscript#2479, open PR" in shown["bool_mask_row"]
    assert "upstream: no report found" in shown["float_mask_row"]
    assert "### Upstream (2 defect(s)" in step_summary.read_text(encoding="utf-8")


def test_a_culprit_reads_as_the_op_users_call_with_the_options_that_matter() -> None:
    """The op as written on the source line when it is a torch function that exports as
    the culprit's ATen op (ATen's `special_` prefix, a loss's `_loss` kernel), else the op
    sweep's public name for it; a mode string keeps its value, a tensor or flag its name."""
    from parity_gate.model.localisation import Culprit
    from parity_gate.ops import localised

    def culprit(aten: str, code: str, **options: str) -> Culprit:
        return Culprit(scope="(root)", kind="M", aten=aten, call="", code=code,
                       options=options)

    pool = culprit("aten.avg_pool2d.default", "return self.pool(x)", divisor_override="3")
    scatter = culprit("aten.scatter_reduce.two", "y = x.scatter_reduce(0, i, s, reduce='mean')",
                      reduce="'mean'", include_self="False")
    mean = culprit("aten.mean.dim", "return torch.mean(x, dim=1)")
    erfcx = culprit("aten.special_erfcx.default", "return torch.special.erfcx(self.proj(x))")
    loss = culprit("aten.cross_entropy_loss.default",
                   "return F.cross_entropy(self.proj(x), target, label_smoothing=0.1)")
    var = culprit("prims.var.default", "return torch.var(self.proj(x), dim=1)")
    assert [localised.user_op_of(c) for c in (pool, scatter, mean, erfcx, loss, var)] == [
        "torch.nn.functional.avg_pool2d", "torch.scatter_reduce", "torch.mean",
        "torch.special.erfcx", "torch.nn.functional.cross_entropy", "torch.var"]
    assert localised.option_args(scatter) == ["include_self", "reduce='mean'"]
    assert localised.option_args(pool) == ["divisor_override"]


VARIANCE_HEAD = '''
import torch


class VarianceHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.var(self.proj(x), dim=1)


def variance_head() -> torch.nn.Module:
    return VarianceHead().eval()
'''
VARIANCE_MANIFEST = '''
version: 1
python_path: [.]
defaults: {batch_sizes: [2], dtypes: [float32]}
providers: {cpu: {required: true}}
fixtures:
  no_tokens: {kind: random, inputs: {x: {shape: [batch, 0, 8]}}}
modules:
  - {name: variance_head, factory: "varmodel:variance_head", fixtures: [no_tokens],
     inputs: [{name: x}]}
'''


@pytest.mark.process
def test_a_culprit_from_torchs_primitives_is_a_searched_signature(tmp_path: Path,
                                                                   gh: FakeGitHub) -> None:
    """`torch.var` exports as `prims.var.default`: localisation names the culprit with its
    namespace (not the bare `var.default`), and a primitive's failure is a defect searched
    upstream like an ATen op's, its status beside the case (it had none)."""
    (tmp_path / "varmodel.py").write_text(VARIANCE_HEAD, encoding="utf-8")
    (tmp_path / "parity.yml").write_text(VARIANCE_MANIFEST, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "parity.yml"), "--out", str(out), "--quiet"]) == 1
    done = upstream_cli(out / "results.json", gh, "--search-only")
    assert done.returncode == 0, done.stderr
    assert "1 defect(s)" in done.stderr
    run = read_results(out / "results.json")[1]
    (case,) = run.cases
    assert case.localisation is not None and case.localisation.culprit is not None
    assert case.localisation.culprit.aten == "prims.var.default"
    (report,) = run.upstream
    assert report.signature is not None and report.cases == [case.id]
    assert (report.signature.user_op, report.signature.overload) == ("torch.var",
                                                                     "prims.var.default")
    queries = [c.query["q"][0] for c in gh.calls("search")]
    assert queries and all("var" in q for q in queries), queries
    assert "upstream: no report found" in " ".join(
        (out / "summary.md").read_text(encoding="utf-8").split())


BY_THE_STANDARD = '''\
import torch


class MeanHead(torch.nn.Module):
    """Mean-pools the tokens: an empty sequence means an empty reduction."""

    def forward(self, x):
        return x.mean(dim=1)


class LogCap(torch.nn.Module):
    """A cap in log space: log(relu(x)) is -inf where x <= 0, then clamped from above."""

    def forward(self, x):
        return torch.clamp(torch.log(torch.relu(x)), max=0.0)
'''

BY_THE_STANDARD_MANIFEST = """\
version: 1
python_path: [.]
defaults: {batch_sizes: [2], performance: {measure: false}}
fixtures:
  empty: {kind: random, inputs: {x: {shape: [batch, 0, 4]}}}
  signs: {kind: random, inputs: {x: {shape: [batch, 8]}}}
modules:
  - {name: mean_head, factory: "stdmodels:MeanHead", inputs: [{name: x}], fixtures: [empty]}
  - {name: log_cap, factory: "stdmodels:LogCap", inputs: [{name: x}], fixtures: [signs]}
"""


@pytest.mark.process
def test_localisation_routes_by_the_standard_not_the_reference_evaluator(
        tmp_path: Path) -> None:
    """ReduceMean over an empty set is undefined by ONNX (ReduceMean-18), so a graph that
    reaches it relies on what the standard does not promise: torchlib's, though the
    reference evaluator's numpy mean gives eager's NaN. A one-sided Clip's missing bound
    is the type's lowest value by Clip-13's doc, so ONNX Runtime's -3.4e38 for -inf is
    right and the translation is at fault, though the reference evaluator keeps -inf (its
    input comes from a Log in the same cut). Both were routed to ONNX Runtime's kernel."""
    (tmp_path / "stdmodels.py").write_text(BY_THE_STANDARD, encoding="utf-8")
    (tmp_path / "parity.yml").write_text(BY_THE_STANDARD_MANIFEST, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "parity.yml"), "--out", str(out), "--quiet"]) == 1
    run = read_results(out / "results.json")[1]
    owners = {c.key.module: c.localisation.culprit for c in run.cases
              if c.localisation is not None and c.localisation.culprit is not None}
    assert set(owners) == {"mean_head", "log_cap"}, [c.reason for c in run.cases]
    for module, culprit in owners.items():
        assert culprit.owner is Owner.TRANSLATION, (module, culprit.owned_by, culprit.reference)
    assert "undefined" in owners["mean_head"].reference
