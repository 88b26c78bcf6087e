"""A failing pull request's comment and job summary lead with the cause.

One real run of a module with a planted exporter defect (`avg_pool2d(divisor_override=)`,
which torchlib lowers to an AveragePool that divides by the window): the comment a reviewer
reads must name the culprit's source line, the op and the owner before any table, link the
run (never a runner path), cut no cell mid-word, fold what does not bear on the failure, and
show the figures the job summary shows. The culprit is also annotated on its own line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import cmarkgfm
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity_gate.github import comment
from parity_gate.github.annotations import annotate, culprit_location
from parity_gate.model.findings import Finding
from parity_gate.model.results import RunResult
from parity_gate.model.text import clip
from parity_gate.report.markdown import render

MODEL = '''\
import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        h = self.conv(x)
        h = F.avg_pool2d(h, 2, divisor_override=3)
        return h.flatten(1).mean(1)


class Fine(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def build():
    torch.manual_seed(0)
    return Net().eval()


def fine():
    return Fine().train()
'''

MANIFEST = """\
version: 1
seed: 0
python_path: [.]
defaults:
  batch_sizes: [1, 2]
  dtypes: [float32]
fixtures:
  images:
    kind: random
    samples: 1
    inputs:
      x: {shape: [batch, 3, 8, 8], distribution: normal}
modules:
  - name: pooled
    factory: models.pool:build
    inputs: [{name: x, dynamic: {0: batch}}]
    fixtures: [images]
  - name: fine
    factory: models.pool:fine
    inputs: [{name: x, dynamic: {0: batch}}]
    fixtures: [images]
"""

ENV = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/models",
       "GITHUB_RUN_ID": "4242"}
RUN_URL = "https://github.com/acme/models/actions/runs/4242"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResult, str]:
    """The workspace, the run's results and its summary.md, as an Actions job would leave
    them (absolute `--out`, as the Action passes it; GitHub's run variables set)."""
    ws = tmp_path_factory.mktemp("ws")
    (ws / "models").mkdir()
    (ws / "models" / "__init__.py").write_text("")
    (ws / "models" / "pool.py").write_text(MODEL)
    (ws / "parity.yml").write_text(MANIFEST)
    out = ws / "parity-reports"
    env = {**os.environ, **ENV, "GITHUB_STEP_SUMMARY": str(ws / "step-summary.md")}
    got = subprocess.run([sys.executable, "-m", "parity_gate", "run", "parity.yml", "--out",
                          str(out), "--quiet"], cwd=ws, env=env, capture_output=True,
                         text=True, timeout=600)
    assert got.returncode == 1, got.stdout + got.stderr
    run = RunResult.from_dict(json.loads((out / "results.json").read_text()))
    return ws, run, (out / "summary.md").read_text()


@pytest.mark.process
def test_the_comment_leads_with_culprit_line_op_owner_and_the_run(
        planted: tuple[Path, RunResult, str]) -> None:
    ws, run, _ = planted
    pr = comment.PullRequest("acme/models", 7, "a" * 40)
    body = comment.body(run, "parity.yml", pr, ENV)
    lines = [x for x in body.splitlines() if x.strip() and not x.startswith("<!--")]
    assert lines[0].startswith("## ❌") and lines[1].startswith("**Verdict: fail**")
    assert lines[2] == "### Why it blocks"
    cause = lines[3]
    assert cause.startswith("- **pooled** — 2 of 2 cases fail (mismatch)")
    for part in ("`models/pool.py:12`", "`h = F.avg_pool2d(h, 2, divisor_override=3)`",
                 "`aten.avg_pool2d.default`", "owner: **translation**", "aten_avg_pool2d",
                 f"]({RUN_URL})", "`artifacts/pooled__float32__images__b"):
        assert part in cause, (part, cause)
    assert str(ws) not in body  # no runner path anywhere: a reviewer cannot open one
    # What GitHub shows: the cause is the first list item, its code copyable as typed.
    html = cmarkgfm.github_flavored_markdown_to_html(body)
    first = re.search(r"<li>(.*?)</li>", html, re.DOTALL)
    assert first is not None and "<code>models/pool.py:12</code>" in first.group(1)
    assert f'<a href="{RUN_URL}">' in first.group(1)
    # The passing module is not a cause, and its training-mode warning is folded away.
    assert "**fine**" not in body.split("| module |")[0]


@pytest.mark.process
def test_comment_and_job_summary_show_the_same_figures(
        planted: tuple[Path, RunResult, str]) -> None:
    ws, run, summary = planted
    body = comment.body(run, "parity.yml", comment.PullRequest("acme/models", 7, "a" * 40), ENV)
    rows = [x for x in body.splitlines() if x.startswith(("|", "- **"))]
    assert rows and all(row in summary for row in rows), [r for r in rows if r not in summary]
    assert summary in (ws / "step-summary.md").read_text()


@pytest.mark.process
def test_the_culprit_is_annotated_on_its_source_line(
        planted: tuple[Path, RunResult, str], tmp_path: Path) -> None:
    ws, run, _ = planted
    notes = annotate(run, manifest_file="parity.yml", manifest_lines={"pooled": 14},
                     workspace=ws)
    on_source = [n for n in notes if n.file == "models/pool.py"]
    assert len(on_source) == 1 and on_source[0].line == 12 and on_source[0].level == "error"
    assert "aten.avg_pool2d.default" in on_source[0].title
    assert any(n.file == "parity.yml" and n.line == 14 for n in notes)  # the manifest too
    # A manifest in a subfolder: the source is relative to it; a file the workspace does
    # not have (an installed package, another checkout) is not annotated.
    assert culprit_location("models/pool.py:12", "ml/parity.yml", None) == (
        "ml/models/pool.py", 12)
    assert culprit_location("../../site/x.py:3", "parity.yml", None) is None
    assert not [n for n in annotate(run, manifest_file="parity.yml", workspace=tmp_path)
                if n.file == "models/pool.py"]


@pytest.mark.process
def test_noise_is_folded_and_unstable_timings_do_not_lead(
        planted: tuple[Path, RunResult, str]) -> None:
    _, run, _ = planted
    run = dataclasses.replace(run, findings=[
        *run.findings, Finding("fine", "edge-fixture", "every eager output is NaN"),
        Finding("pooled", "training-mode", "the module was in training mode")])
    text = render(run)
    findings = text[text.index("### Findings"):]
    # A warning about the failing module stays in view, before the fold of the others.
    assert findings.index("**training-mode**") < findings.index("<details>")
    fold = re.search(r"<details><summary>\d+ warnings? on modules that pass.*?</details>",
                     findings, re.DOTALL)
    assert fold is not None and "every eager output is NaN" in fold.group(0)
    assert "every eager output is NaN" not in text.replace(fold.group(0), "")
    # Timings that never settled: the performance table is folded, saying why, and the
    # module table has no time column (no figure stable enough to act on).
    timed = [dataclasses.replace(c, performance=dataclasses.replace(
        c.performance, latency=dataclasses.replace(c.performance.latency, stable=False)))
        if c.performance is not None and c.performance.latency is not None else c
        for c in run.cases]
    noisy = render(dataclasses.replace(run, cases=timed))
    assert "### Performance" not in noisy
    assert re.search(r"<details><summary>Performance: no rule broken; \d+ of \d+ modules' "
                     r"timings did not settle", noisy)
    table = noisy[noisy.index("| module | outcome |"):].split("\n\n", 1)[0]
    assert "onnx/eager time" not in table and "not stable" not in table
    measured = [c.performance.latency for c in run.cases
                if c.performance is not None and c.performance.latency is not None]
    if measured and all(lat.stable for lat in measured):  # settled (a quiet machine): open
        assert "### Performance" in render(run) or "Performance rules broken" in render(run)


@given(st.lists(st.sampled_from(["aten.avg_pool2d.default", "0.004913", "models/pool.py:12",
                                 "owner", "—", "translation;", "x"]), min_size=1, max_size=40),
       st.integers(min_value=12, max_value=200))
def test_a_clipped_cell_never_cuts_a_word(words: list[str], limit: int) -> None:
    text = " ".join(words)
    cut = clip(text, limit)
    assert len(cut) <= limit
    if cut == text:
        return
    assert cut.endswith("…")
    prefix = cut[:-1]
    assert text.startswith(prefix)
    # Cut at a word break (a space, or the punctuation before one), unless no break lies
    # in the last third of the room: then a word longer than that is cut.
    at_break = text[len(prefix)] in " ,;:—-"
    assert at_break or " " not in text[2 * limit // 3:limit - 1], (text, cut)


@pytest.mark.process
def test_every_id_shown_pastes_into_select(planted: tuple[Path, RunResult, str]) -> None:
    """Each case id the summary and the comment show in code, copied from what GitHub
    renders, selects exactly that case (no invisible character rides along)."""
    import html as html_lib

    from parity_gate.manifest.load import load_manifest
    from parity_gate.plan.cases import plan

    ws, run, summary = planted
    body = comment.body(run, "parity.yml", comment.PullRequest("acme/models", 7, "a" * 40), ENV)
    ids = {c.id for c in run.cases}
    modules = {c.key.module for c in run.cases}
    shown: set[str] = set()
    for text in (summary, body):
        rendered = cmarkgfm.github_flavored_markdown_to_html(text)
        for code in re.findall(r"<code>(.*?)</code>", rendered, re.DOTALL):
            copied = html_lib.unescape(re.sub(r"<[^>]+>", "", code))
            if copied.count("/") == 4 and copied.split("/")[0] in modules:
                shown.add(copied)  # a case id of this run (not a known finding's `op/...`)
    assert shown and shown <= ids, shown - ids  # every id shown is a real id, as typed
    manifest = load_manifest(ws / "parity.yml")
    for case_id in shown:
        got = plan(manifest, ws / "parity.yml", ["CPUExecutionProvider"], select=[case_id])
        assert [k.id for j in got.jobs for k in j.cases] == [case_id]


def test_an_id_with_a_mention_sign_stays_pasteable_in_code() -> None:
    from parity_gate.model.text import WORD_JOINER, md_code

    case_id = "textcls/float32/text@seq=8/b1/cpu"
    rendered = cmarkgfm.github_flavored_markdown_to_html(f"| a |\n|---|\n| {md_code(case_id)} |")
    assert f"<code>{case_id}</code>" in rendered and WORD_JOINER not in rendered
