"""The markdown summary as GitHub shows it: rendered by cmark-gfm (GitHub's own fork, via
`cmarkgfm`) and read back as HTML, the way a reviewer sees the step summary or PR comment."""

from __future__ import annotations

from html.parser import HTMLParser

import cmarkgfm
from cmarkgfm.cmark import Options

from parity_gate.gate.decision import decide
from parity_gate.model.comparison import Comparison, Verdict
from parity_gate.model.findings import Finding, Lost, Stage, Step
from parity_gate.model.gate import GateDecision, Ruling
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import WORD_JOINER
from parity_gate.report import markdown

SKIP = ("CUDAExecutionProvider not available (onnxruntime offers: CPUExecutionProvider; "
        "install onnxruntime-gpu on a GPU machine)")
STACK = "Fatal Python error: Aborted\n  File \"models.py\", line 9 in <module>\n  a && b"


def mismatch(name: str = "out", max_abs: float = 0.5) -> Comparison:
    return Comparison(name, False, Verdict.REGION, "region: rows 0..1 wrong; needs atol>=0.5",
                      "(4, 2)", "(4, 2)", "float32", "float32", 1e-5, 1e-3, max_abs=max_abs,
                      max_rel=0.25, ulp=1234, needed_atol=max_abs, needed_rtol=0.3,
                      worst_index=(0, 1), ref_value=1.0, got_value=1.5, total=8,
                      mismatch_count=3, histogram={"1e-1..1e0": 3, "0": 5})


def key(module: str, batch: int, provider: str = "cpu") -> CaseKey:
    return CaseKey(module, "float32", "vec", batch, provider)


def sample_run() -> RunResult:
    lost = Lost(Step(Stage.EAGER, "float32/vec/b2"), signal="SIGABRT")
    cases = [
        *(CaseResult(key("crashy", b), Outcome.CRASH, "worker killed by SIGABRT in <module>",
                     STACK, lost=lost) for b in (2, 10)),
        *(CaseResult(key("hung", b), Outcome.CRASH, "worker killed by SIGSEGV") for b in (3,)),
        *(CaseResult(key("approx", b), Outcome.MISMATCH, "out: region", comparisons=[mismatch()])
          for b in (10, 2, 7)),
        CaseResult(key("shapes", 2), Outcome.SHAPE_MISMATCH, "out: shape", comparisons=[
            Comparison("out", False, Verdict.SHAPE, "shape: reference (2, 3) vs got (3, 2)",
                       "(2, 3)", "(3, 2)", "float32", "float32", 1e-5, 1e-3)]),
        CaseResult(key("fine", 2), Outcome.PASS),
        *(CaseResult(key(m, 2, "cuda"), Outcome.SKIPPED, SKIP)
          for m in ("crashy", "approx", "fine", "shapes")),
    ]
    run = RunResult(cases=cases, findings=[Finding("approx", "export_warning",
                                                   "TracerWarning in <lambda> @torch.jit")],
                    duration_s=34.2)
    run.gate = decide(run)
    return run


class Page(HTMLParser):
    """The rendered summary: text, tags in order, and where <details> folds are open."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[str] = []
        self.depth = 0
        self.outside: list[str] = []  # text outside every fold

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.depth += tag == "details"

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag == "details"

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if not self.depth:
            self.outside.append(data)


def github(md: str) -> tuple[str, Page]:
    html = cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)
    page = Page()
    page.feed(html)
    return html, page


def test_verdict_headline_names_what_happened_then_one_row_per_module() -> None:
    md = markdown.render(sample_run())
    first = md.splitlines()[0]
    assert first.startswith("## ❌ parity-gate: 2 modules crash, 1 changes shape, 1 mismatches")
    assert "blocking" in first and "differ from eager" not in md
    html, _ = github(md)
    assert html.index("<h2>") < html.index("Verdict: fail") < html.index("<table>")
    table = html[html.index("<table>"):html.index("</table>")]
    rows = table.count("<tr>") - 1
    assert rows == 5  # crashy, hung, shapes, approx, fine: modules, not cases
    assert table.index("crashy") < table.index("shapes") < table.index("approx")
    assert "atol ≥ 0.5" in table  # the needed tolerance has its own column, never cut
    assert "<details>" not in html[:html.index("</table>")]  # the table is not folded


def test_angle_brackets_ampersands_and_mentions_survive_github() -> None:
    run = sample_run()
    run.gate = GateDecision(baseline="b.yml", blocking=[],
                            rulings=[Ruling(c.id, "known", c.outcome.value,
                                            "known <upstream> bug & friends")
                                     for c in run.failures])
    html, page = github(markdown.render(run))
    text = "".join(page.text)
    assert "worker killed by SIGABRT in <module>" in text
    assert "known <upstream> bug & friends" in text
    assert "<module>" not in html and "<upstream>" not in html  # never a raw tag
    assert "@torch" not in text and "@\u2060torch" in text  # no notification to @torch


def test_exporter_text_with_markdown_punctuation_renders_literally() -> None:
    """An exporter's `16*s99 ... (16*s99` is not emphasis, `_x_`/`~~x~~`/`[x]` are not markup,
    and the tool's own `code` hint is a code span whose quotes show as quotes."""
    said = ("Cannot view a tensor with shape torch.Size([16*s99, 16, 2, 8]) as a tensor "
            "with shape (16*s99, 16, 16)! at reshape(*input_shape, -1) _private_ ~~gone~~; "
            'try `attn_implementation="eager"`')
    run = RunResult(cases=[CaseResult(key("swin", 2), Outcome.EXPORT_ERROR, said)])
    run.gate = decide(run)
    html, page = github(markdown.render(run))
    assert not {"em", "del", "a"} & set(page.tags)  # (strong: the tool's own outcome cells)
    text = "".join(page.text)
    assert said.replace('`attn_implementation="eager"`', 'attn_implementation="eager"') in text
    assert '<code>attn_implementation=&quot;eager&quot;</code>' in html
    assert "&amp;quot;" not in html and "\\*" not in text and "\\_" not in text


def test_per_case_detail_is_folded_numeric_and_capped() -> None:
    md = markdown.render(sample_run())
    approx = md[md.index("<summary><b>approx</b>"):]
    approx = approx[:approx.index("</details>")]
    assert approx.index("vec/b2/") < approx.index("vec/b7/") < approx.index("vec/b10/")
    many = RunResult(cases=[CaseResult(key("big", b), Outcome.MISMATCH, "x",
                                       comparisons=[mismatch()]) for b in range(60)])
    big = markdown.render(many)
    assert f"_{60 - markdown.CASE_ROWS} more in the artifact" in big
    assert "shape: shape:" not in md and "dtype: dtype:" not in md


def test_evidence_folds_hold_the_workers_last_lines_escaped() -> None:
    html, page = github(markdown.render(sample_run()))
    assert "Evidence: last lines of the worker's output" in html
    pre = html[html.index("<pre>"):html.index("</pre>")]
    assert "Fatal Python error: Aborted" in pre and "&lt;module&gt;" in pre
    assert "a &amp;&amp; b" in pre
    # a crash that printed nothing says so instead of showing an empty fold
    assert "The worker printed nothing" in "".join(page.text)


def test_skip_reasons_once_and_run_facts_on_their_own_lines() -> None:
    md = markdown.render(sample_run())
    assert md.count("CUDAExecutionProvider not available") == 1
    assert "skipped (reason 1)" in md
    html, _ = github(md)
    run = html[html.index("<h3>Run</h3>"):]
    for label in ("Outcomes:", "Time:", "Skipped:"):
        assert f"<li><strong>{label}</strong>" in run


def test_baseline_known_failures_listed_once_under_a_green_headline() -> None:
    run = sample_run()
    run.gate = GateDecision(baseline="b.yml", blocking=[], rulings=[
        Ruling(c.id, "known", c.outcome.value, "known since #12") for c in run.failures])
    md = markdown.render(run)
    assert md.startswith("## ✅ parity-gate: nothing blocking")
    # each known case once; the user's `#12` shown, not a cross-reference GitHub would make
    assert md.count(f"known since #{WORD_JOINER}12") == len(run.failures)
    assert "Known failures" not in md


def test_trimming_keeps_verdict_table_and_a_visible_note() -> None:
    cases = [CaseResult(CaseKey(f"mod{i:04d}", "float32", "vec", b, "cpu"), Outcome.MISMATCH,
                        "x" * 200, comparisons=[mismatch()]) for i in range(250)
             for b in (2, 4, 8, 16)]
    run = RunResult(cases=cases)
    limit = 64 * 1024
    md = markdown.render(run, limit=limit)
    assert len(md.encode()) <= limit
    html, page = github(md)
    assert "Verdict: fail" in html and "<table>" in html
    outside = "".join(page.outside)
    assert "Summary trimmed" in outside  # visible, not inside a fold
    assert html.count("<details>") == html.count("</details>")


def test_summary_of_1000_failing_cases_fits_github() -> None:
    """1,000 failing cases (the closing note's figure): far under 1 MiB, nothing trimmed."""
    cases = [CaseResult(CaseKey(f"mod{i:03d}", "float32", "vec", b, "cpu"), Outcome.MISMATCH,
                        "out: region", comparisons=[mismatch()])
             for i in range(100) for b in range(10)]
    md = markdown.render(RunResult(cases=cases))
    size = len(md.encode())
    assert size < markdown.STEP_SUMMARY_LIMIT and "Summary trimmed" not in md
    one = markdown.render(RunResult(cases=[CaseResult(
        CaseKey("one", "float32", "vec", b, "cpu"), Outcome.MISMATCH, "out: region",
        comparisons=[mismatch()]) for b in range(1000)]))
    assert len(one.encode()) < 64 * 1024  # one module: 25 rows, then "975 more"


def test_trim_of_a_foreign_summary_closes_its_fold() -> None:
    text = "## head\n\n<details><summary>x</summary>\n\n" + "row\n" * 5000
    out = markdown.trim(text, limit=4096)
    assert len(out.encode()) <= 4096
    _, page = github(out)
    assert "Summary trimmed" in "".join(page.outside)


def test_headline_counts_a_module_under_each_failing_outcome() -> None:
    """A module whose float16 eager run fails and whose float32 export fails: counted by
    its worst outcome alone, the export error went unsaid in the headline."""
    def case(module: str, dtype: str, outcome: Outcome) -> CaseResult:
        return CaseResult(CaseKey(module, dtype, "f", 1, "cpu"), outcome, "why")

    run = RunResult(cases=[case("a", "float32", Outcome.EAGER_ERROR),
                           case("b", "float32", Outcome.EXPORT_ERROR),
                           case("b", "float16", Outcome.EAGER_ERROR),
                           case("c", "float32", Outcome.EXPORT_ERROR)])
    assert markdown.headline(run).startswith(
        "## ❌ parity-gate: 2 modules fail in eager, 2 fail to export — blocking")


def test_every_stage_that_runs_one_librarys_code_names_it() -> None:
    """A crash's reason names whose code crashed, so its report goes to the right place."""
    assert Stage.LOADING.library == Stage.RUNNING.library == "ONNX Runtime"
    assert Stage.EXPORTING.library == "the exporter (torch.onnx)"
    assert Stage.STARTING.library == "" and Stage.RECHECKING.library == ""
