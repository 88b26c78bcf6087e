"""Every failure explains itself on the first screen (issue 48): a batch size baked by the
model's code, an op the exporter translates wrongly and an export that stops in user code
each name their source line, op, owner and fix in the comment, the summary and the page,
annotate the changed line, and leave a repro that fails the same way."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import cmarkgfm
import junitparser
import pytest

from parity_gate.cli import main
from parity_gate.github.annotations import annotate
from parity_gate.localise import sized
from parity_gate.model.comparison import Comparison, Verdict
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import ExportCause, ExportStage
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.plan.probes import Assumption
from parity_gate.report import html, markdown
from parity_gate.report.modules import ModuleView

DATA = Path(__file__).resolve().parent / "data" / "explained"


def planted(tag: str) -> int:
    """The line of the model's code marked `PLANTED: tag`."""
    lines = (DATA / "acmeml" / "ranker.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if f"PLANTED: {tag}" in line)


# ------------------------------------------------------------------- pure: the fix rules


def _broken(text: str, op: str, code: str, sizes: dict[str, int]) -> sized.Broken:
    symbols = tuple(sorted(set(re.findall(r"[a-z_]+", text)) - {"and", "or"}))
    found = sized.broken([Assumption(text, symbols, op, "m.py:3")], sizes)
    assert found is not None
    return sized.Broken(found.assumption, found.symbol, found.value, code)


@pytest.mark.parametrize(("op", "code", "says"), [
    ("int", "n = int(h.shape[0])", "`int(h.shape[0])` makes the batch size a Python number"),
    ("math.prod", "k = math.prod(x.shape[:1])", "Python number"),
    ("", "if x.shape[0] == 4:", "Python branch on the batch size"),
    (".reshape", "y = self.fc(x).reshape(4, -1)", "a literal 4 in `.reshape`"),
    ("self.norm (nn.LayerNorm)", "y = self.norm(x)", "needs the batch size as a constant"),
])
def test_a_fixed_size_gets_the_fix_for_its_kind_of_line(op: str, code: str, says: str) -> None:
    fix = sized.fix_for(_broken("batch == 4", op, code, {"batch": 1}))
    assert says in fix and "4" in fix


def test_a_broken_relation_is_not_called_a_fixed_size() -> None:
    b = _broken("h % 4 == 0", "F.adaptive_avg_pool2d", "y = F.adaptive_avg_pool2d(x, 4)",
                {"h": 6})
    assert not b.fixed and "`h % 4 == 0`" in sized.fix_for(b)


def test_broken_prefers_a_fixed_size_with_a_line_and_ignores_held_ones() -> None:
    held = Assumption("batch >= 1", ("batch",), "x.view", "m.py:1")
    relation = Assumption("batch % 2 == 0", ("batch",), "x.view", "m.py:2")
    fixed = Assumption("batch == 4", ("batch",), "int", "m.py:3")
    found = sized.broken([held, relation, fixed], {"batch": 3})
    assert found is not None and found.assumption is fixed
    assert sized.broken([held, relation, fixed], {"batch": 4}) is None


@pytest.mark.parametrize(("op", "code", "call"), [
    ("int", "n = int(h.shape[0])", "int(h.shape[0])"),
    ("x.view", "y = x.view(4, -1) + 1", "x.view(4, -1)"),
    ("self.pool (nn.AdaptiveAvgPool2d)", "y = self.pool(x)", "self.pool(x)"),
    ("operator +", "y = a + b", "operator +"),
])
def test_the_call_is_named_as_the_line_writes_it(op: str, code: str, call: str) -> None:
    assert sized.call_text(op, code) == call


# ------------------------------------------------------------------- pure: the reports


def _case(module: str, outcome: Outcome, provider: str = "cpu", **kw: Any) -> CaseResult:
    return CaseResult(CaseKey(module, "float32", "feats", 1, provider), outcome, **kw)


def test_an_export_failure_is_a_located_cause_owned_by_the_step_it_stopped_in() -> None:
    cause = ExportCause("GuardOnDataDependentSymNode", "Could not guard", ExportStage.CAPTURE,
                        where="ranker.py:17: if h.mean() > 0:", hints=["use torch.cond"],
                        source="acmeml/ranker.py:17")
    view = ModuleView("m", [_case("m", Outcome.EXPORT_ERROR, reason="export failed",
                                  cause=cause)])
    found = view.cause
    assert found is not None and found.located
    assert (found.source, found.code, found.owner, found.fix) == (
        "acmeml/ranker.py:17", "if h.mean() > 0:", "model", "use torch.cond")
    translated = ModuleView("m", [_case("m", Outcome.EXPORT_ERROR, cause=ExportCause(
        "KeyError", "x", ExportStage.TRANSLATE, where="m.py:3: y()", source="m.py:3"))])
    assert translated.cause is not None and translated.cause.owner == "translation"


def test_an_absent_optional_provider_stays_out_of_the_headline() -> None:
    absent = ("CUDAExecutionProvider not available (onnxruntime offers: "
              "CPUExecutionProvider; install onnxruntime-gpu)")
    run = RunResult(cases=[_case("m", Outcome.PASS),
                           _case("m", Outcome.SKIPPED, "cuda", reason=absent)])
    assert "skipped" not in markdown.headline(run)
    run.cases.append(_case("n", Outcome.SKIPPED, reason="module skipped: flaky"))
    assert "(1 skipped)" in markdown.headline(run)


def test_no_time_column_when_no_figure_is_stable() -> None:
    run = RunResult(cases=[_case("m", Outcome.BAKED_SHAPE, reason="batch 1 fails")])
    assert "onnx/eager time" not in markdown.render(run)


def test_a_case_without_an_error_value_is_drawn_apart_from_the_error_scale() -> None:
    passed = Comparison("out", True, Verdict.PASS, "", "[4, 4]", "[4, 4]", "float32",
                        "float32", 1e-5, 1e-3, max_abs=1e-7)
    cases = [_case("m", Outcome.BAKED_SHAPE, reason="batch 1 fails"),
             CaseResult(CaseKey("m", "float32", "feats", 4, "cpu"), Outcome.PASS,
                        comparisons=[passed])]
    svg = html.batch_svg(cases)
    assert ">no value</text>" in svg
    # the baked case: its mark sits in the band (y 27 ± 4), above the plot's top (40)
    mark = re.search(r'<rect class="point" x="[\d.]+" y="([\d.]+)"[^>]*><title>b1: '
                     r"baked_shape, no error value", svg)
    assert mark is not None and float(mark.group(1)) < 40 - 4
    other = CaseResult(CaseKey("m", "float32", "feats", 2, "cpu"), Outcome.PASS,
                       comparisons=[passed])
    held = html.batch_svg([*cases[1:], other])
    assert "no value" not in held


# ------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def explained(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, Path]:
    repo = tmp_path_factory.mktemp("team")
    shutil.copytree(DATA, repo, dirs_exist_ok=True)
    out = repo / "out"
    code = main(["run", str(repo / "parity.yml"), "--out", str(out), "--no-cache", "--quiet"])
    return code, repo, out


def _first_screen(summary: str) -> str:
    """What a reviewer sees before scrolling: up to the module table."""
    return summary.split("| module |", 1)[0]


EXPECTED = {  # module → (planted tag, op, owner, words of the fix)
    "baked": ("baked", "int(h.shape[0])", "model", "makes the batch size a Python number"),
    "values": ("values", "aten.scatter_reduce.two", "translation",
               "the exporter translates `aten.scatter_reduce.two` wrongly"),
    "export": ("export", "GuardOnDataDependentSymNode", "model", "torch.where or torch.cond"),
}


@pytest.mark.process
def test_each_failure_names_line_op_owner_and_fix_on_the_first_screen(
        explained: tuple[int, Path, Path]) -> None:
    code, _, out = explained
    assert code == 1
    summary = (out / "summary.md").read_text()
    first = _first_screen(summary)
    rendered = cmarkgfm.github_flavored_markdown_to_html(first)
    lines = [ln for ln in first.splitlines() if ln.startswith("- **")]
    assert len(lines) == 3, first
    for module, (tag, op, owner, fix) in EXPECTED.items():
        line = next(ln for ln in lines if ln.startswith(f"- **{module}**"))
        assert f"`acmeml/ranker.py:{planted(tag)}`" in line, line
        assert f"`{op}`" in line and f"owner: **{owner}**" in line and fix in line, line
        assert "repro `artifacts/" in line, line
        assert f"acmeml/ranker.py:{planted(tag)}" in rendered
    # the raw ONNX Runtime error is not above the fold, and an optional CUDA is not counted
    assert "ONNXRuntimeError" not in first
    assert "skipped" not in summary.splitlines()[0]
    page = (out / "report.html").read_text()
    causes = page.split('<section id="causes">', 1)[1].split("</section>", 1)[0]
    for tag, op, owner, _ in EXPECTED.values():
        assert f"<code>{op}</code>" in causes
        assert f"acmeml/ranker.py:{planted(tag)}" in causes and f"<b>{owner}</b>" in causes
    suite = junitparser.JUnitXml.fromfile(str(out / "junit.xml"))
    texts = " ".join(str(r.message or "") + str(r.text or "") for s in suite for c in s
                     for r in c.result)
    assert f"acmeml/ranker.py:{planted('baked')}" in texts


@pytest.mark.process
def test_annotations_sit_on_the_changed_lines(explained: tuple[int, Path, Path]) -> None:
    _, repo, out = explained
    run = RunResult.from_dict(json.loads((out / "results.json").read_text()))
    notes = annotate(run, manifest_file="parity.yml", workspace=repo)
    on_code = {(a.file, a.line) for a in notes if a.file == "acmeml/ranker.py"}
    assert on_code == {("acmeml/ranker.py", planted(t)) for t in ("baked", "values", "export")}
    baked = next(a for a in notes if a.line == planted("baked"))
    assert "fix: `int(h.shape[0])`" in baked.message and "repro: artifacts/" in baked.message


@pytest.mark.process
def test_each_repro_fails_the_same_way_outside_the_gate(
        explained: tuple[int, Path, Path]) -> None:
    _, _, out = explained
    run = RunResult.from_dict(json.loads((out / "results.json").read_text()))
    for module in EXPECTED:
        loc = next(c.localisation for c in run.cases if c.key.module == module
                   and c.failed and c.localisation is not None
                   and (c.localisation.repro or c.localisation.node_repro))
        assert loc is not None
        folder = Path(loc.node_repro or loc.repro or "")
        done = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 1, (module, done.stdout, done.stderr[-2000:])
    baked = next(c for c in run.cases if c.key.module == "baked" and c.failed)
    assert baked.outcome is Outcome.BAKED_SHAPE
    hazard = next(f for f in run.findings if f.module == "baked"
                  and f.kind == "dynamic-dim-specialised")
    assert f"by int at acmeml/ranker.py:{planted('baked')}" in hazard.message
    assert baked.localisation is not None and baked.localisation.culprit is not None
    assert baked.localisation.culprit.owner is not None
    assert baked.localisation.culprit.owner.value == "model"


def test_a_cache_note_is_a_notice_not_a_warning_on_the_diff() -> None:
    from parity_gate.model.findings import Finding

    run = RunResult(cases=[_case("m", Outcome.PASS)], findings=[
        Finding("m", "cache", "float32: translation not reused: the weights changed (fc.bias)"),
        Finding("m", "training-mode", "module m is in training mode")])
    levels = {a.title: a.level for a in annotate(run, manifest_file="parity.yml")}
    assert levels == {"parity-gate: m cache": "notice", "parity-gate: m training-mode": "warning"}
