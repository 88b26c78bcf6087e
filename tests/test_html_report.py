"""report.html: one self-contained page; its charts are drawn by a real browser (headless
Chromium, Debian's `chromium` package) without a console error."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from parity_gate.gate.decision import decide
from parity_gate.model.comparison import Comparison, Verdict
from parity_gate.model.findings import Lost, Stage, Step
from parity_gate.model.keys import CaseKey
from parity_gate.model.localisation import LayerError, Localisation
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.report import html
from parity_gate.report.write import ReportPaths, write_all


def mismatch(max_abs: float) -> Comparison:
    return Comparison("logits", False, Verdict.REGION, "region: rows 0..1 wrong", "(4, 2)",
                      "(4, 2)", "float32", "float32", 1e-5, 1e-3, max_abs=max_abs,
                      max_rel=0.2, needed_atol=max_abs, needed_rtol=0.3, ref_value=0.5,
                      got_value=0.5 + max_abs, worst_index=(0, 1), total=8, mismatch_count=3,
                      histogram={"0": 0, "1e-6..1e-5": 5, "1e-5..1e-4": 2, "1e-3..1e-2": 3})


def sample() -> RunResult:
    curve = Localisation(curve=[LayerError(f"blocks.{i}", "Linear", 10.0 ** (i - 8), None,
                                           i < 5) for i in range(8)])
    cases = [CaseResult(CaseKey("enc", "float32", "tok", b, "cpu"), Outcome.MISMATCH,
                        "logits: region", comparisons=[mismatch(1e-3 * b)],
                        localisation=curve if b == 10 else None) for b in (2, 4, 10)]
    cases.append(CaseResult(CaseKey("enc", "float32", "tok", 1, "cpu"), Outcome.PASS,
                            comparisons=[Comparison("logits", True, Verdict.PASS, "", "(1, 2)",
                                                    "(1, 2)", "float32", "float32", 1e-5,
                                                    1e-3, max_abs=1e-7, max_rel=1e-6)]))
    cases += [CaseResult(CaseKey("boom", "float16", "tok", b, "cpu"), Outcome.CRASH,
                         "worker killed by SIGSEGV in <module>", "Fatal Python error\n  x < y",
                         lost=Lost(Step(Stage.EXPORTING, "float16"), signal="SIGSEGV"))
              for b in (2, 4)]
    cases.append(CaseResult(CaseKey("enc", "float32", "tok", 2, "cuda"), Outcome.SKIPPED,
                            "CUDA not available"))
    run = RunResult(cases=cases, started_at="2026-01-02T03:04:05+00:00", duration_s=12.0)
    run.gate = decide(run)
    return run


def test_self_contained_with_grid_and_charts() -> None:
    page = html.render(sample())
    assert "<script" not in page
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", page)  # nothing fetched
    assert "<module>" not in page and "&lt;module&gt;" in page
    cells = re.findall(r'data-outcome="([a-z_]+)"', page)
    assert sorted(cells) == ["crash", "mismatch", "skipped"]  # enc/cpu, enc/cuda, boom/f16
    assert page.count('<svg class="chart"') == (
        1 + 3 * 2 + 1)  # batch chart, (histogram + tolerance) x 3 cases, layer curve
    assert "error by batch size: enc/float32/tok/cpu" in page
    assert "per-layer error of enc/float32/tok/b10/cpu" in page  # the localisation hook
    assert "Fatal Python error" in page


def test_module_table_has_the_summarys_cells_and_baseline_column() -> None:
    """The page's module table says what the step summary says: a passing module's largest
    error, the needed tolerance, and (with a baseline) what the baseline made of it."""
    from parity_gate.gate import baseline as bl
    from parity_gate.report import markdown

    run = sample()
    run.cases.append(CaseResult(CaseKey("fine", "float32", "tok", 1, "cpu"), Outcome.PASS,
                                comparisons=[Comparison("logits", True, Verdict.PASS, "",
                                                        "(1, 2)", "(1, 2)", "float32",
                                                        "float32", 1e-5, 1e-3, max_abs=3e-7,
                                                        max_rel=1e-6)]))
    run.gate = decide(run, None, baseline=bl.Baseline("b.yml", (bl.Entry("boom/*", "known"),)))
    page = html.render(run)
    table = page[page.index('<section id="modules">'):]
    table = table[:table.index("</section>")]
    assert "<th>baseline</th>" in table
    assert "2 known (not blocking)" in table and "3 regressions (blocking)" in table
    assert "<td>3.00e-07</td>" in table  # the passing module's largest error, as in markdown
    assert "float32: atol ≥ 0.01 (rtol 0.001) or rtol ≥ 0.3 (atol 1e-05)" in table
    md = markdown.render(run)
    assert "3.00e-07" in md and "2 known (not blocking)" in md
    cells = dict((m[1].split()[0] + m[1].split()[-1], m[0]) for m in re.findall(
        r'<td class="cell( known)?"[^>]*>(?:<a [^>]*>)?([^<]*)<', page))
    assert cells == {"crashknown": " known", "mismatch3/4": "", "skipped1": "", "pass1": ""}
    assert "striped: known failures (baseline), not blocking" in page
    plain = html.render(sample())
    assert "<th>baseline</th>" not in plain and 'class="cell known"' not in plain \
        and "striped" not in plain  # no baseline: neither


def test_layer_curve_section_only_when_localised() -> None:
    run = sample()
    plain = next(c for c in run.cases if c.key.batch_size == 2 and c.key.module == "enc")
    assert html.layer_curve(plain) is None
    curved = next(c for c in run.cases if c.key.batch_size == 10)
    assert [p[0] for p in html.layer_curve(curved) or []][:2] == ["blocks.0", "blocks.1"]


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    assert exe is not None
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120)


PROBE = """<script>
const charts = [...document.querySelectorAll('svg.chart')].map(s => {
  const r = s.getBoundingClientRect();
  const drawn = [...s.querySelectorAll('rect.bar, circle.point, polyline.line')]
    .filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; }).length;
  return {w: r.width, h: r.height, drawn};
});
const cells = [...document.querySelectorAll('td.cell')].map(
  c => getComputedStyle(c).backgroundColor);
document.body.insertAdjacentHTML('beforeend',
  '<pre id="probe">' + JSON.stringify({charts, cells}) + '</pre>');
</script>"""


@pytest.mark.process
@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="needs Debian's chromium package (.ci/run installs it)")
def test_browser_draws_the_charts_without_console_errors(tmp_path: Path) -> None:
    paths = ReportPaths.in_folder(tmp_path / "out")
    write_all(sample(), paths)
    assert paths.html is not None and paths.html.is_file()
    shot = tmp_path / "report.png"
    proc = _chromium("--hide-scrollbars", "--window-size=1200,2400",
                     f"--screenshot={shot}", paths.html.as_uri(), tmp=tmp_path)
    assert shot.is_file() and shot.stat().st_size > 20_000, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines()
               if "CONSOLE" in line or "Uncaught" in line or "net::ERR" in line]
    assert console == [], console
    probed = tmp_path / "probed.html"
    probed.write_text(paths.html.read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium("--dump-dom", probed.as_uri(), tmp=tmp_path).stdout
    found = re.findall(r'<pre id="probe">(\{.*?)</pre>', dom, re.S)  # the one it wrote
    assert found, dom[-2000:]
    probe = json.loads(found[-1].replace("&quot;", '"'))
    assert len(probe["charts"]) == 8
    assert all(c["w"] > 100 and c["h"] > 50 and c["drawn"] > 0 for c in probe["charts"])
    assert len(set(probe["cells"])) == 3  # crash, mismatch and skipped in three colours


def test_a_pass_by_the_float64_check_is_marked_apart_from_a_plain_match() -> None:
    """Eager and ONNX differ, a float64 run excused it: the grid cell says so (dotted, with
    a legend) and the module's diagnosis says what excused it; a plain match is unmarked."""
    from parity_gate.model.precision import Reference, Ruling

    excused = Reference(Ruling.ONNX_ROUNDING, output="y", eager_error=1e-5, onnx_error=2e-5,
                        case_dtype="float32")
    run = RunResult(cases=[
        CaseResult(CaseKey("judged", "float32", "f", 1, "cpu"), Outcome.PASS,
                   "y: float32 eager and ONNX differ, but against float64 ...",
                   reference=excused),
        CaseResult(CaseKey("plain", "float32", "f", 1, "cpu"), Outcome.PASS)])
    page = html.render(run)
    cells = re.findall(r'<td class="cell([^"]*)"[^>]*>.*?</td>', page)
    assert sorted(cells) == ["", " judged"]
    assert "pass 1 (1 by float64)" in page
    assert "dotted: passed by the float64 check" in page
    assert "1 of 1 cases differ from eager but pass the float64 check: y: float32" in page
