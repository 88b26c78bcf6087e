"""Drafts for the bundled op sweep's findings: one per defect signature, each in its
repository's convention, each with a repro that was run and reproduces.

`data/upstream/bundled-findings.json.gz` holds the reported cases of `parity-gate ops` on
the pinned versions (torch 2.13.0, onnxscript 0.7.2, onnxruntime 1.32.0): the findings
`parity_gate/ops/known-findings.yml` was generated from.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from github_server import FakeGitHub, Item
from test_draft_quality import texts
from test_github_upstream import client, make_run, op_case

from parity_gate.github import upstream, upstream_pass
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.upstream import Owner, Signature, Symptom, UpstreamReport
from parity_gate.ops import signatures, upstream_check

FIXTURE = Path(__file__).parent / "data" / "upstream" / "bundled-findings.json.gz"
SIGNATURES = 502  # a dtype gap is one signature per node and dtype
CAUSES = 160  # ops.causes: the function at fault and the minimal trigger (a dtype gap: the dtype)
RAISES = {Symptom.MISSING_KERNEL: "NOT_IMPLEMENTED", Symptom.INVALID_MODEL: "",
          Symptom.RUN_FAILS: "", Symptom.EXPORT_FAILS: "", Symptom.UNSUPPORTED: "",
          Symptom.CRASH: ""}
PREFIX = {Owner.TRANSLATION: "[torchlib] ", Owner.CAPTURE: "[ONNX] ",
          Owner.KERNEL: "CPUExecutionProvider"}
SECTIONS = {Owner.TRANSLATION: ["🐛 Describe the bug", "Repro", "Expected vs actual",
                                "ONNX nodes involved", "Where the lowering lives", "Versions",
                                "How it was found"],
            Owner.KERNEL: ["Describe the issue", "To reproduce", "Urgency", "Platform",
                           "ONNX Runtime Installation", "ONNX Runtime Version or Commit ID",
                           "ONNX Runtime API", "Architecture", "Execution Provider", "Where",
                           "Versions", "How it was found"]}
JARGON = re.compile(r"op/[\w.]+/|\bo\d+:|re-?check|parity-gate|case id|specials/cpu")


@pytest.fixture(scope="module")
def bundled() -> RunResult:
    return RunResult.from_dict(json.loads(gzip.decompress(FIXTURE.read_bytes())))


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server
        assert server.errors == [], server.errors


def test_the_bundled_findings_are_one_signature_per_defect(bundled: RunResult) -> None:
    found = signatures.group(bundled)
    assert len(found) == SIGNATURES
    assert len({s.key for s, _ in found}) == SIGNATURES
    ids = [c.id for _, cases in found for c in cases]
    assert len(ids) == len(set(ids)) == sum(1 for c in bundled.cases if signatures.reported(c))
    for sig, cases in found:  # every case shows this symptom; the lead is the most ordinary
        assert {signatures.symptom_of(c) for c in cases} == {sig.symptom}
        assert cases[0].id == sig.lead == min(cases, key=signatures.lead_order).id
    by_args = {(s.user_op, tuple(s.args)) for s, _ in found if "scatter_reduce" in s.user_op}
    assert ("torch.scatter_reduce", ("include_self", "reduce='mean'")) in by_args
    assert ("torch.scatter_reduce", ("include_self", "reduce='amax'")) in by_args
    leads = [s for s, _ in found if s.symptom is Symptom.NAN_DROPPED and s.op_name == "mean"]
    assert leads and all(s.lead.split("/")[-2] == "empty" for s in leads)  # NaN of nothing


def _pick(found: list[tuple[Signature, list[CaseResult]]], op: str, symptom: Symptom
          ) -> list[CaseResult]:
    return next(cs for s, cs in found if s.op_name == op and s.symptom is symptom)


def _blocks(draft: str) -> list[str]:
    return re.findall(r"^(`{3,})python\n(.*?)\n\1$", draft, re.MULTILINE | re.DOTALL)


def _check_draft(sig: Signature, text: str) -> str:
    """The draft reads as upstream writes: title, sections, no tool jargon; its repro."""
    head, _, body = text.partition("\n# ")[2].partition("\n")
    assert head.replace("\\", "").startswith(PREFIX[sig.owner])
    # optional: where a search found candidates, where the cause has other members
    sections = [s for s in re.findall(r"^### (.+)$", body, re.MULTILINE)
                if s not in ("Possibly related", "Also seen (same cause)")]
    assert sections[:len(SECTIONS.get(sig.owner, []))] == SECTIONS.get(sig.owner, []) or \
        sig.owner is Owner.CAPTURE
    visible = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    assert not JARGON.search(visible), JARGON.findall(visible)
    assert re.search(r"<!-- parity-gate-finding-[0-9a-f]{12} -->\n$", text)
    if sig.owner is Owner.TRANSLATION and sig.lowering:  # the registry's function, located
        assert re.search(r"`\w+` in `onnxscript/function_libs/torch_lib/ops/\w+\.py:\d+`",
                         body), body
    elif sig.owner is Owner.TRANSLATION:  # decomposed, or no translation at all
        assert "no torchlib function is registered under that name" in body
    ((_, repro),) = [(f, b) for f, b in _blocks(text)]
    planted = 2 if "with torch.no_grad():" in repro else 0  # the one special value, placed
    # "about 25": four inputs and an import reach 26, a planted special value 2 more
    assert repro.count("\n") + 1 <= 26 + planted
    imports = set(re.findall(r"^import ([\w.]+)", repro, re.MULTILINE))
    assert imports <= {"torch", "onnxruntime", "torch.nn.functional", "math", "onnx"}
    return repro


@pytest.mark.process
def test_drafts_follow_each_repository_and_their_repros_reproduce(
        gh: FakeGitHub, tmp_path: Path, bundled: RunResult) -> None:
    """A translation defect (onnxscript), a kernel gap (onnxruntime) and an invalid model:
    drafted once each, and each embedded repro, run as a script of its own, fails with
    the defect (an assertion on the values, ONNX Runtime's own error)."""
    found = signatures.group(bundled)
    cases = [*_pick(found, "atan2", Symptom.NAN_DROPPED),
             *next(cs for s, cs in found if s.kernel == "Atan(7)"),
             *_pick(found, "softmax", Symptom.INVALID_MODEL)]
    got, warnings = upstream_pass.attach(make_run(*cases), client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "drafts", check_cache=tmp_path / "checks.json"))
    assert warnings == [] and len(got.upstream) == 3
    assert sorted(r.signature.owner.value for r in got.upstream if r.signature) == [
        "kernel", "translation", "translation"]
    expect = {Symptom.NAN_DROPPED: "AssertionError: Tensor-likes are not close",
              Symptom.MISSING_KERNEL: "NOT_IMPLEMENTED : Could not find an implementation "
                                      "for Atan(7)",
              Symptom.INVALID_MODEL: "INVALID_GRAPH"}
    for report in got.upstream:
        sig = report.signature
        assert sig is not None and report.draft is not None, report.describe()
        repro = _check_draft(sig, Path(report.draft).read_text(encoding="utf-8"))
        script = tmp_path / f"{sig.symptom.value}.py"
        script.write_text(repro, encoding="utf-8")
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
        assert run.returncode != 0 and expect[sig.symptom] in run.stderr, run.stderr[-2000:]
        if sig.symptom is Symptom.NAN_DROPPED:  # eager, ONNX Runtime and float64 printed
            assert re.search(r"eager: tensor\(nan\) \| onnxruntime: tensor\(0\.\) \| "
                             r"float64: nan", run.stdout), run.stdout


@pytest.mark.process
def test_a_repro_that_does_not_reproduce_is_never_drafted(gh: FakeGitHub,
                                                          tmp_path: Path) -> None:
    """acos(-0.0) is +pi/2 on both sides: a recorded "sign of zero lost" that its repro does
    not show gets no draft, and the report says why."""
    got, _ = upstream_pass.attach(make_run(op_case("acos", "aten.acos.default")), client(gh),
                             upstream.UpstreamOptions(mode="draft", drafts=tmp_path / "d"))
    (report,) = got.upstream
    assert report.draft is None and not (tmp_path / "d").exists()
    assert report.describe() == ("no known report; not drafted: no repro candidate "
                                 "reproduced it on its own (the finding depends on the "
                                 "sweep's batch, or is flaky)")


@pytest.mark.slow
@pytest.mark.process
def test_every_bundled_signature_is_drafted_and_its_repro_reproduces(
        gh: FakeGitHub, tmp_path: Path, bundled: RunResult) -> None:
    """The whole bundled sweep: one draft per root cause, and every embedded repro, taken
    from the draft's text and run again, fails with its defect (minutes)."""
    got, _ = upstream_pass.attach(bundled, client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "drafts"))
    assert len(got.upstream) == SIGNATURES
    missing = [r for r in got.upstream if r.draft is None]
    # index_fill on an empty input failed to export only inside the sweep's batch: alone,
    # it exports, so it is not drafted, and says why
    assert {(r.signature.op_name if r.signature else "", r.not_drafted) for r in missing} == {
        ("index_fill", "no repro candidate reproduced it on its own (the finding depends on "
                       "the sweep's batch, or is flaky)")}
    drafted: dict[str, UpstreamReport] = {}
    for r in got.upstream:  # per draft, its lead's report (the lead gained the lowering)
        if r.draft is not None and (r.draft not in drafted or (
                r.signature is not None and r.signature.lowering)):
            drafted[r.draft] = r
    assert len(list((tmp_path / "drafts").iterdir())) == len(drafted) == CAUSES - 1
    repros = []
    for report in drafted.values():
        assert report.signature is not None and report.draft is not None
        text = Path(report.draft).read_text(encoding="utf-8")
        repros.append({"key": report.signature.key, "stages": {},
                       "script": _check_draft(report.signature, text)})
    checked = upstream_check.check_all(repros, [])
    for report in drafted.values():
        sig = report.signature
        assert sig is not None
        answer = checked.answers[sig.key]
        assert answer["stage"] != "ok" and "NameError" not in answer["error"], (sig.key, answer)
        want = RAISES.get(sig.symptom, "AssertionError")
        assert want in answer["error"] or sig.symptom is Symptom.CRASH, (sig.key, answer)


@pytest.mark.process
def test_where_torch_cannot_run_nothing_is_drafted_and_it_says_why(
        gh: FakeGitHub, tmp_path: Path, bundled: RunResult,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A job without the exporter (a trusted job that only posts) drafts nothing, says why
    once per defect, and caches no answer that would pass for a run."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no torch in this job')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    found = signatures.group(bundled)
    run = make_run(*_pick(found, "atan2", Symptom.NAN_DROPPED))
    got, _ = upstream_pass.attach(run, client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "d", check_cache=tmp_path / "checks.json"))
    (report,) = got.upstream
    assert report.draft is None and not (tmp_path / "d").exists()
    assert report.not_drafted == ("the repro could not be run here (ImportError: no torch in "
                                  "this job)")
    assert not (tmp_path / "checks.json").exists()


@pytest.mark.process
def test_a_dtype_gap_is_one_draft_per_dtype_listing_its_nodes(
        gh: FakeGitHub, tmp_path: Path, bundled: RunResult) -> None:
    """ONNX Runtime without float64 kernels for Acos, Atan, Tan and Selu, and torchlib
    emitting ONNX nodes whose type constraints exclude bfloat16 (acos, sin): one draft per
    (provider, dtype) and one per dtype, titled with the dtype and the count, each node
    listed, one search per cause, the repro (the first op) run and failing with the defect.
    The real-shaped report of Atan's double kernel claims Atan only: the draft is still
    written for the rest, and cites it."""
    found = signatures.group(bundled)

    def gap(op: str, symptom: Symptom, dtype: str) -> list[CaseResult]:
        return next(cs for s, cs in found if s.op_name == op and s.symptom is symptom
                    and s.dtypes == [dtype])
    kernel, invalid = Symptom.MISSING_KERNEL, Symptom.INVALID_MODEL
    cases = [*gap("acos", kernel, "float64"), *gap("atan", kernel, "float64"),
             *gap("tan", kernel, "float64"), *gap("selu", kernel, "float64"),
             *gap("acos", invalid, "bfloat16"), *gap("sin", invalid, "bfloat16")]
    atan = next(t for t in texts() if t["number"] == 27001)
    gh.items.append(Item(**{k: v for k, v in atan.items() if k != "claims"}))  # type: ignore[arg-type]
    got, warnings = upstream_pass.attach(make_run(*cases), client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "d", check_cache=tmp_path / "checks.json"))
    assert warnings == [] and len(gh.calls("search")) == 2
    claimed = {r.signature.kernel: r.match.ref for r in got.upstream
               if r.signature is not None and r.match is not None}
    assert claimed == {"Atan(7)": "onnxruntime#27001"}
    drafts_: dict[str, Signature] = {}
    for r in got.upstream:  # the lead's signature (it gained the lowering) per draft
        if r.draft is not None and r.signature is not None:
            text = Path(r.draft).read_text(encoding="utf-8")
            if text not in drafts_ or r.signature.lowering:
                drafts_[text] = r.signature
    assert len(drafts_) == 2 and len(list((tmp_path / "d").iterdir())) == 2
    heads = {text.splitlines()[1][2:]: (text, sig) for text, sig in drafts_.items()}
    assert set(heads) == {
        "CPUExecutionProvider has no float64 kernel for 4 ops: Acos(7), Atan(7), Selu(6), "
        "Tan(7)",
        "[torchlib] 2 ops emit ONNX nodes whose type constraints exclude bfloat16: acos, sin"}
    expect = {kernel: "NOT_IMPLEMENTED : Could not find an implementation for Acos(7)",
              invalid: "tensor(bfloat16)"}
    for text, sig in heads.values():
        if sig.symptom is kernel:
            assert "- `Tan(7)`: `torch.tan` (`torch.tan(x)`)" in text
            assert "[Atan not implemented for double on CPU]" in text.split(
                "### Possibly related")[1]
        else:
            assert "- `Sin`: `torch.sin` (`torch.sin(x)`)" in text
        repro = _check_draft(sig, text)
        script = tmp_path / f"{sig.symptom.value}.py"
        script.write_text(repro, encoding="utf-8")
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
        assert run.returncode != 0 and expect[sig.symptom] in run.stderr, run.stderr[-2000:]


@pytest.mark.process
def test_a_title_says_a_keyword_is_ignored_only_where_that_was_measured(
        gh: FakeGitHub, tmp_path: Path, bundled: RunResult) -> None:
    """avg_pool2d(divisor_override=3): ONNX Runtime returns what eager returns without the
    argument (measured by a probe on the repro's inputs), so the title says it ignores it,
    the values stay in the body. div(rounding_mode=...) differs from eager both with and
    without it: its title keeps the values, and claims nothing."""
    found = signatures.group(bundled)
    cases = [*_pick(found, "avg_pool2d", Symptom.WRONG_VALUES),
             *_pick(found, "div", Symptom.WRONG_VALUES)]
    got, warnings = upstream_pass.attach(make_run(*cases), client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "d", check_cache=tmp_path / "checks.json"))
    assert warnings == []
    heads = {Path(r.draft).read_text(encoding="utf-8").splitlines()[1][2:]
             for r in got.upstream if r.draft is not None}
    assert "[torchlib] avg_pool2d ignores divisor_override" in heads
    (div,) = [h for h in heads if " div " in h]
    assert "ignores" not in div and "where eager returns" in div, div
    text = next(Path(r.draft).read_text(encoding="utf-8") for r in got.upstream
                if r.draft is not None and r.signature is not None
                and r.signature.op_name == "avg_pool2d")
    assert re.search(r"eager: .*\| onnxruntime: .*\| float64:", text)  # the values, kept


@pytest.mark.process
def test_a_dtype_gap_draft_points_at_the_lowering_of_the_op_its_repro_shows(
        gh: FakeGitHub, tmp_path: Path, bundled: RunResult) -> None:
    """A dtype gap found first on atan2 (its node, Atan, is not its own name) and then on
    tan: the draft leads with tan, whose node is Tan, and "Where the lowering lives" names
    `aten_tan`, the function the repro exercises, not the first member's."""
    found = signatures.group(bundled)
    invalid = Symptom.INVALID_MODEL
    cases = [c for op in ("atan2", "tan") for s, cs in found if s.op_name == op
             and s.symptom is invalid and s.dtypes == ["bfloat16"] for c in cs[:1]]
    assert len(cases) == 2
    upstream_pass.attach(make_run(*cases), client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "d", check_cache=tmp_path / "checks.json"))
    (draft,) = list((tmp_path / "d").iterdir())
    text = draft.read_text(encoding="utf-8")
    assert "return torch.tan(x)" in text
    where = text.split("### Where the lowering lives")[1].split("###")[0]
    assert "`aten_tan`" in where and "atan2" not in where, where
