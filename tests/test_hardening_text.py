"""Text from outside the tool is inert wherever it is posted or drafted (issue 22, item 5).

A results.json full of crafted values (the fork-safe workflow's trusted job reads one
a fork produced) is rendered the way GitHub shows it: cmark-gfm with GitHub's extensions
and raw HTML, then an allow-list sanitizer like GitHub's (the one `../shared/tools/look`
uses). What a reader sees must hold no image, no link but the tool's own to github.com, no
mention, no cross-reference, no HTML comment of the text's own, and the crafted text shown
literally. The PR comment and the upstream issue go through the fake GitHub, which records
what was posted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from github_server import FakeGitHub

from parity_gate.gate.merge import read_results
from parity_gate.github import comment, drafts, post, upstream, upstream_pass
from parity_gate.github.annotations import annotate
from parity_gate.github.client import ClientSettings, GitHubClient
from parity_gate.github.paths import Paths
from parity_gate.model.comparison import Comparison, Verdict
from parity_gate.model.findings import Example, Finding, OpCase
from parity_gate.model.gate import Figures, GateDecision, Ruling
from parity_gate.model.keys import CaseKey
from parity_gate.model.localisation import (
    Check,
    DivergentLayer,
    KnownOp,
    LayerError,
    Localisation,
    Status,
    StepRun,
)
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import (
    WORD_JOINER,
    code_block,
    code_span,
    inert,
    log_url,
    md_text,
)
from parity_gate.model.upstream import MatchKind, OpRef, UpstreamMatch, UpstreamReport
from parity_gate.report import html, markdown
from parity_gate.report.write import run_json

TOKEN = "ghp_HARDENINGtoken0123456789abcdefABCD"
REPO = "acme/models"
EVIL = "https://evil.example"
# Every kind of live text GitHub would act on, and the ways out of an escape: a blank line
# inside a code span, triple backticks, a table pipe, entities, a comment, raw tags.
PAYLOAD = (f"<img src={EVIL}/pixel.png> [PASS]({EVIL}/pass) [ok](javascript:alert(1)) "
           f"![x]({EVIL}/i.png) <a href=\"javascript:alert(1)\">PASS</a> @octocat "
           "@acme/reviewers #1 acme/models#2 GH-3 <!-- hidden --> ```py\n"
           f"`x\n\n<img src={EVIL}/span.png>` blank\n\n@inside | cell | www.evil.example "
           f"{EVIL}/bare mail@evil.example <details><summary>PASS</summary> "
           "<script>alert(1)</script> <style>*{}</style> &lt;img src=x&gt; &#64;octocat "
           "\u202eSSAP\u202c -->")
SHORT = "<b onmouseover=alert(1)>@octocat</b> #4 [PASS](javascript:x)"  # for names and ids


def crafted_run() -> RunResult:
    key = CaseKey(f"mod {SHORT}", f"float32 {SHORT}", f"vec {SHORT}", 2, f"cpu {SHORT}")
    cmp = Comparison(f"out {SHORT}", False, Verdict.REGION, PAYLOAD, "(4, 2)", "(4, 2)",
                     "float32", "float32", 1e-5, 1e-3, max_abs=0.5, max_rel=0.25, ulp=12,
                     needed_atol=0.5, needed_rtol=0.3, ref_value=1.0, got_value=1.5, total=8,
                     mismatch_count=3, histogram={f"1e-1..1e0 {SHORT}": 3, "0": 5})
    loc = Localisation(
        steps=[StepRun(Check.LAYER, Status.RAN, 1.0, PAYLOAD)],
        layer=DivergentLayer(f"h.0 {SHORT}", PAYLOAD, [SHORT], [SHORT], [SHORT]),
        curve=[LayerError(f"h.{i}```\n\n{SHORT}", SHORT, 10.0 ** -i, None, i > 0)
               for i in range(3)],
        known_op=KnownOp(f"aten.x``` {SHORT}", PAYLOAD, f"op/x {SHORT}", PAYLOAD),
        repro=f"artifacts/{SHORT}")
    mismatch = CaseResult(key, Outcome.MISMATCH, PAYLOAD, PAYLOAD, comparisons=[cmp],
                          localisation=loc)
    crash = CaseResult(CaseKey(f"crash {SHORT}", "float32", "vec", 2, "cpu"), Outcome.CRASH,
                       PAYLOAD, f"Traceback\n{PAYLOAD}\n</pre><img src={EVIL}/pre.png>")
    op = CaseResult(CaseKey(f"op/{SHORT}", "float32", "specials", None, "cpu"),
                    Outcome.MISMATCH, PAYLOAD,
                    op=OpCase(variant=f"../{SHORT}", family="pointwise", call=PAYLOAD,
                              op=f"aten.x.default {SHORT}\n::error::forged-op",
                              aten_ops=[SHORT],
                              example=Example(PAYLOAD, [3], PAYLOAD, PAYLOAD, {SHORT: PAYLOAD})))
    skipped = CaseResult(CaseKey("skip", "float32", "vec", 2, "cpu"), Outcome.SKIPPED, PAYLOAD)
    run = RunResult(
        cases=[mismatch, crash, op, skipped],
        findings=[Finding(f"mod {SHORT}", f"kind {SHORT}", PAYLOAD, "error")],
        versions={"torch": PAYLOAD, "onnxscript": PAYLOAD, "gpu": {"name": PAYLOAD,
                                                                     "driver": SHORT}},
        manifest={"path": f"parity.yml` {SHORT}\n\n@octocat"}, shard=None,
        upstream=[UpstreamReport(OpRef(SHORT, SHORT), [SHORT], UpstreamMatch(
                      "microsoft/onnxscript", 7, PAYLOAD, "javascript:alert(1)",
                      MatchKind.OPEN_ISSUE)),
                  UpstreamReport(OpRef(f"b {SHORT}"), [SHORT], UpstreamMatch(
                      "evil/x", 1, PAYLOAD, f"{EVIL}/track", MatchKind.OPEN_PR)),
                  UpstreamReport(OpRef(f"c {SHORT}"), [SHORT], created=f"{EVIL}/created"),
                  UpstreamReport(OpRef(f"d {SHORT}"), [SHORT], searched=False,
                                 error=PAYLOAD)])
    ids = [c.id for c in run.failures]
    run.gate = GateDecision(blocking=ids[:1], fail_on=f"any {SHORT}", baseline=f"b.yml {SHORT}",
                            hazards=[f"opset\n::error title=PASS::forged {SHORT}"],
                            rulings=[Ruling(i, f"known {SHORT}", "mismatch", PAYLOAD,
                                            f"entry {SHORT}", f"b.yml:1 {SHORT}", Figures())
                                     for i in ids])
    return run


@pytest.fixture(scope="module")
def untrusted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResult]:
    """The crafted run as the trusted job gets it: a results.json read back."""
    path = tmp_path_factory.mktemp("fork") / "results.json"
    path.write_bytes(run_json(crafted_run()))
    return path, read_results(path)[1]


# ---------------------------------------------------------------- GitHub's view

# GitHub's sanitizer allow-list (as ../shared/tools/look_md.py has it): other tags are
# dropped, their text kept.
ALLOWED = frozenset("""a abbr b bdo blockquote br caption cite code dd del details dfn div
dl dt em h1 h2 h3 h4 h5 h6 hr i img ins kbd li mark ol p picture pre q rp rt ruby s samp small
source span strike strong sub summary sup table tbody td tfoot th thead tr tt u ul var
input""".split())  # noqa: SIM905 (the list as GitHub's documentation writes it)
# What the tool itself writes; anything else in the rendered page came from the text.
TOOL_TAGS = {"h1", "h2", "h3", "p", "strong", "em", "b", "code", "pre", "table", "thead", "tbody",
             "tr", "th", "td", "details", "summary", "ul", "ol", "li", "blockquote", "sub",
             "a", "br"}
MENTION = re.compile(r"(?<![A-Za-z0-9_`])@[A-Za-z0-9]")
REFERENCE = re.compile(r"(?<![A-Za-z0-9_])(?:#\d|GH-\d)|[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+#\d",
                       re.IGNORECASE)


class GitHubView(HTMLParser):
    """Rendered markdown after GitHub's sanitizer: tags kept, hrefs and srcs, comments, and
    the text GitHub's mention and reference filters read (not inside code, pre or a)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.comments: list[str] = []
        self.live: list[str] = []
        self.text: list[str] = []
        self.quiet = 0  # inside code, pre or a

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED:
            return
        self.tags.append(tag)
        found = dict(attrs)
        if found.get("href") is not None:
            self.hrefs.append(found["href"] or "")
        if found.get("src") is not None:
            self.srcs.append(found["src"] or "")
        self.quiet += tag in ("code", "pre", "a")

    def handle_endtag(self, tag: str) -> None:
        if tag in ALLOWED:
            self.quiet -= tag in ("code", "pre", "a")

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if not self.quiet:
            self.live.append(data)

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    @property
    def shown(self) -> str:
        """What a reader sees, word joiners (invisible) left out."""
        return "".join(self.text).replace(WORD_JOINER, "")


def github(md: str) -> GitHubView:
    page = cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)
    view = GitHubView()
    view.feed(page)
    view.close()
    return view


def assert_inert(md: str, links: frozenset[str] = frozenset(), comments: int = 0) -> GitHubView:
    """Nothing in `md` acts: only the tool's own tags, links and comments."""
    view = github(md)
    assert "img" not in view.tags and not view.srcs
    assert set(view.tags) <= TOOL_TAGS, set(view.tags) - TOOL_TAGS
    assert set(view.hrefs) <= links, set(view.hrefs) - links
    assert not any("javascript:" in h.lower() for h in view.hrefs)
    assert len(view.comments) == comments, view.comments
    live = "".join(view.live)
    assert not MENTION.search(live), MENTION.findall(live)
    assert not REFERENCE.search(live), REFERENCE.findall(live)
    folds = len(re.findall(r"^<details>", md, re.MULTILINE))
    assert view.tags.count("details") == folds  # only the tool's folds
    return view


def assert_shown_literally(view: GitHubView) -> None:
    shown = " ".join(view.shown.split())
    for piece in (f"<img src={EVIL}/pixel.png>", f"[PASS]({EVIL}/pass)",
                  "<details><summary>PASS</summary>", "<script>alert(1)</script>",
                  "&lt;img src=x&gt;", "@octocat", "acme/models#2", "<!-- hidden -->"):
        assert piece in shown, piece


# ---------------------------------------------------------------- the summary and comment


def test_summary_of_crafted_results_is_inert(untrusted: tuple[Path, RunResult]) -> None:
    md = markdown.render(untrusted[1])
    view = assert_inert(md)
    assert_shown_literally(view)
    mermaid = md[md.index("```mermaid"):]
    assert mermaid.index("```", 3) == mermaid.index("\n```") + 1  # one block, closed once


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        yield server
        assert server.errors == [], server.errors


def _client(gh: FakeGitHub) -> GitHubClient:
    return GitHubClient(gh.url, TOKEN, ClientSettings(backoff_s=0.01, write_interval_s=0.0,
                                                      timeout_s=2.0, search_per_minute=60000))


def test_pr_comment_of_crafted_results_is_inert(gh: FakeGitHub,
                                                untrusted: tuple[Path, RunResult]) -> None:
    run = untrusted[1]
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": REPO,
           "GITHUB_RUN_ID": "42"}
    pr = comment.PullRequest(REPO, 7, "b" * 40)
    posted = comment.post(_client(gh), pr, run, comment.Mode.ALWAYS, comment.comment_key(run),
                          env)
    assert posted.action == "created"
    (body,) = [c["body"] for c in gh.comments[(REPO, 7)]]
    view = assert_inert(body, frozenset({"https://github.com/acme/models/actions/runs/42",
                                         "https://github.com/microsoft/onnxscript/issues/7"}),
                        comments=2)  # the sticky marker and the state digest
    assert_shown_literally(view)
    assert "parity.yml` <b onmouseover" in view.shown  # the key, whole, in one code span


def test_upstream_section_links_only_the_tools_own_github_pages(
        untrusted: tuple[Path, RunResult]) -> None:
    md = upstream.markdown(untrusted[1].upstream, [PAYLOAD])
    view = assert_inert(md, frozenset({"https://github.com/microsoft/onnxscript/issues/7"}))
    assert view.hrefs == ["https://github.com/microsoft/onnxscript/issues/7"]
    assert f"{EVIL}/track" not in view.hrefs and "being fixed in evil/x#1" in view.shown


# ---------------------------------------------------------------- upstream issues and drafts


def test_upstream_create_posts_an_inert_issue(gh: FakeGitHub, tmp_path: Path,
                                              untrusted: tuple[Path, RunResult]) -> None:
    got, warnings = upstream_pass.attach(untrusted[1], _client(gh), upstream.UpstreamOptions(
        mode="create", ledger=tmp_path / "ledger.json", verify=False))
    (posted,) = [c.body for c in gh.calls("issues", "POST")]
    assert "\n" not in posted["title"] and len(posted["title"]) <= 256
    assert not MENTION.search(posted["title"]) and not REFERENCE.search(posted["title"])
    view = assert_inert(posted["body"], comments=1)  # the fingerprint, an HTML comment
    assert f"<img src={EVIL}/pixel.png>" in " ".join(view.shown.split())
    assert not warnings and got.upstream[0].created


def test_upstream_draft_is_inert_and_its_repro_fenced(gh: FakeGitHub, tmp_path: Path,
                                                      untrusted: tuple[Path, RunResult]
                                                      ) -> None:
    run = untrusted[1]
    got, _ = upstream_pass.attach(run, _client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "drafts", verify=False))
    (draft,) = list((tmp_path / "drafts").iterdir())
    assert_inert(draft.read_text(), comments=2)  # "open at ..." and the fingerprint
    # A repro script that tries to close its fence stays inside it, as typed.
    script = f"x = 1  # ```\n\n<img src={EVIL}/repro.png>\n@octocat #5\n"
    (report,) = [r for r in got.upstream if r.signature is not None]
    assert report.signature is not None
    body = drafts.body(report.signature, run, script, None, report)
    view = assert_inert(body, comments=1)
    assert script.rstrip() in view.shown


def test_a_variant_naming_another_folder_reads_no_repro(gh: FakeGitHub, tmp_path: Path
                                                        ) -> None:
    """The repro is posted upstream: it is built from the catalogue's own record of the
    variant, never read from a file a (fork's) variant names (`../secret`)."""
    (tmp_path / "secret__mismatch.py").write_text("TOKEN = 'not for upstream'\n")
    case = CaseResult(CaseKey("op/x", "float32", "specials", None, "cpu"), Outcome.MISMATCH,
                      op=OpCase(variant="../secret", family="pointwise", call="torch.x(a)",
                                op="aten.x.default", aten_ops=["aten.x.default"]))
    got, _ = upstream_pass.attach(RunResult(cases=[case]), _client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "drafts", repro_dir=tmp_path / "repro"))
    assert "not drafted: no repro could be built" in got.upstream[0].describe()
    assert not (tmp_path / "drafts").exists()


# ---------------------------------------------------------------- the HTML report

PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3",
             "h4", "p", "b", "code", "pre", "section", "table", "tr", "th", "td", "span",
             "article", "div", "details", "summary", "ul", "li", "a", "br", "svg", "rect",
             "line", "text", "circle", "polyline"}
PAGE_ATTRS = {"lang", "charset", "name", "content", "class", "id", "style", "href", "title",
              "data-outcome", "role", "width", "height", "viewbox", "xmlns", "x", "y",
              "x1", "y1", "x2", "y2", "cx", "cy", "r", "fill", "points", "text-anchor",
              "transform"}


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.bad: list[str] = []
        self.text: list[str] = []
        self.styles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in PAGE_TAGS:
            self.bad.append(f"<{tag}>")
        self.styles += tag == "style"
        for name, value in attrs:
            if name not in PAGE_ATTRS or name.startswith("on"):
                self.bad.append(f"{tag} {name}")
            if name == "href" and not re.fullmatch(r"#module-\d+", value or ""):
                self.bad.append(f"href {value}")
            if name == "style" and not re.fullmatch(r"(background(-color)?|color):#[0-9a-f]{6}",
                                                    value or ""):
                self.bad.append(f"style {value}")

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def handle_comment(self, data: str) -> None:
        self.bad.append(f"<!--{data}-->")


def test_report_html_has_no_live_markup(untrusted: tuple[Path, RunResult]) -> None:
    page = html.render(untrusted[1])
    parsed = Page()
    parsed.feed(page)
    assert parsed.bad == [] and parsed.styles == 1
    shown = "".join(parsed.text).replace(WORD_JOINER, "")
    assert f"<img src={EVIL}/pixel.png>" in shown and "<script>alert(1)</script>" in shown


# ---------------------------------------------------------------- workflow commands


def test_no_text_starts_a_workflow_command(untrusted: tuple[Path, RunResult], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           gh: FakeGitHub) -> None:
    """The runner reads `::command::` at the start of any stdout or stderr line: a message
    may hold `\\n::error::`, only the tool's own annotations may start a line with `::`."""
    path, run = untrusted
    for a in annotate(run, manifest_file=f"parity.yml,{SHORT}"):
        line = a.render()
        assert "\n" not in line and "\r" not in line
        assert re.fullmatch(r"::(error|warning) (file=[^:,]*,)?(line=\d+,)?title=[^:,]*::.*",
                            line), line
    paths = Paths(tmp_path, path.parent, None)
    assert post.report_only({"results": str(path)}, paths, None) == 0
    inputs = {"results": str(path), "upstream": "search", "comment": "off",
              "upstream_api_url": gh.url, "upstream_token": TOKEN, "github_token": "",
              "event_file": ""}
    gh.fail("search", "422", times=50)
    copy = tmp_path / "copy" / "results.json"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    assert post.main({**inputs, "results": str(copy)}, Paths(tmp_path, copy.parent, None),
                     {"GITHUB_API_URL": gh.url}) == 0
    out = capsys.readouterr()
    commands = [line for line in (out.out + out.err).splitlines() if line.startswith("::")]
    assert commands and all(line.startswith(("::add-mask::", "::warning title=parity-gate%3A "
                                              "GitHub::")) for line in commands), commands
    assert "forged" in out.out and "upstream search for" in out.err


# ---------------------------------------------------------------- the neutraliser itself


def _norm(text: str) -> str:
    return " ".join(inert(text).replace(WORD_JOINER, "").split())


EDGES = [PAYLOAD, SHORT, "a `b` c", "x ``y`` z", "`|`", "@", "#", "www.", "https://x.y/z",
         "GH-12 (gh-7)", "1. item", "# head", " `` ", "a|b", "see #12 and pytorch/pytorch#3"]


def test_every_inline_form_is_inert_and_reads_as_typed() -> None:
    for text in EDGES:
        _inline_forms(text)


def _inline_forms(text: str) -> None:
    def cell(view: GitHubView) -> str:  # the text after the header cell "h"
        return " ".join(view.shown.split())[1:].strip()

    view = assert_inert(md_text(text))
    table = assert_inert(f"| h |\n|---|\n| {md_text(text)} |")
    if "`" not in text:
        assert " ".join(view.shown.split()) == _norm(text) == cell(table)
    view = assert_inert(f"x {code_span(text)} y")
    table = assert_inert(f"| h |\n|---|\n| {code_span(text, table=True)} |")
    assert view.tags.count("code") == table.tags.count("code") == 1
    assert " ".join(view.shown.split()) == f"x {_norm(text)} y" and cell(table) == _norm(text)
    view = assert_inert(code_block(text))
    assert view.shown.startswith(text.replace("\u202e", "").replace("\u202c", "") + "\n")
    assert inert(inert(text)) == inert(text)


# ---------------------------------------------------------------- ops --from on a forged shard

CONTROL_OR_BIDI = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f"
                             "\u202a-\u202e\u2066-\u2069]")


@pytest.mark.process
def test_ops_from_a_forged_shard_writes_inert_findings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A real sweep's results.json with op fields, reason, example and versions rewritten to
    markup, mentions, control bytes and bidi overrides: `ops --from` (a trusted job reading
    a fork's shard) writes findings.md and the job summary with nothing live, and code spans
    keep what they quote as typed (`@` included: GitHub acts on nothing in code)."""
    import json
    import os
    import subprocess
    import sys

    from parity_gate import cli

    root = Path(__file__).resolve().parent.parent
    first = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "parity_gate", "ops", "--out", str(first), "--no-baseline",
         "--jobs", "1", "--quiet", "--select", "op/avg_pool2d.divisor/float32/normal/*"],
        cwd=root, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 1, proc.stderr[-2000:]
    doc = json.loads((first / "results.json").read_text())
    raw = f"{PAYLOAD} \x00\x1b[31m\x9b\u200f"
    for case in doc["cases"]:
        case["reason"] = raw
        case["op"].update(user_op=f"torch.f` {raw}", op="aten.x@seq=8 ``` #5 \u202e\x00",
                          family=raw)
        case["op"]["example"]["eager"] = raw
    doc["versions"]["torch"] = raw
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    step = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    out = tmp_path / "from"
    assert cli.main(["ops", "--from", str(forged), "--out", str(out), "--no-baseline"]) == 1
    console = capsys.readouterr()
    for md in ((out / "findings.md").read_text(), step.read_text()):
        assert not CONTROL_OR_BIDI.search(md), CONTROL_OR_BIDI.findall(md)
        view = assert_inert(md)
        assert_shown_literally(view)
        assert "aten.x@seq=8 ``` #5" in view.shown  # in a code span, as typed
        assert "aten.x@seq=8" in md and f"@{WORD_JOINER}seq" not in md
    assert not CONTROL_OR_BIDI.search(console.out + console.err)
    assert not any(line.startswith("::") for line in (console.out + console.err).splitlines())


def test_a_logged_url_is_as_github_sent_it_without_control_characters() -> None:
    """The Action logs the sticky comment's URL: a link that works (no word joiner after
    `https:`), and nothing in it can end the line or recolour the log."""
    url = "https://github.com/acme/models/pull/7#issuecomment-12"
    assert log_url(url) == url and WORD_JOINER not in log_url(url)
    assert inert(url) != url  # what a post gets instead
    crafted = "https://github.com/a/b/pull/7\n::error::owned\x1b[31m\u202e#issuecomment-1\x00"
    assert log_url(crafted) == "https://github.com/a/b/pull/7::error::owned#issuecomment-1"
