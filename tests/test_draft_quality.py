"""Drafts a maintainer can file as they are: one per root cause, titled as users write
them, routed by the ONNX specification, with small repros, and suppressed only by a
report of the same defect (issue 37).

The bundled findings (`data/upstream/bundled-findings.json.gz`, torch 2.13.0, onnxscript
0.7.2, onnxruntime 1.32.0) and upstream texts modelled on real threads
(`data/upstream/upstream-texts.yml`) run through the real pass against the local GitHub
server (real HTTP); the repros and the sweep run real torch export and ONNX Runtime.
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
import yaml
from github_server import FakeGitHub, Item
from test_github_upstream import client, make_run

from parity_gate.github import drafts, upstream, upstream_pass
from parity_gate.model.findings import Example
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.upstream import Owner, Signature, Symptom
from parity_gate.ops import causes, signatures

DATA = Path(__file__).parent / "data" / "upstream"
ROOT = Path(__file__).resolve().parents[1]
# An ATen overload or a torchlib function in a title: a node of a decomposition, not the op
# the user called (`aten::sub.Tensor`, `fill.Scalar`, `aten_sub`).
ATEN_NODE = re.compile(r"aten::|aten_|\.(Tensor|Scalar|default)\b")


@pytest.fixture(scope="module")
def bundled() -> RunResult:
    return RunResult.from_dict(json.loads(gzip.decompress(
        (DATA / "bundled-findings.json.gz").read_bytes())))


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server
        assert server.errors == [], server.errors


def texts() -> list[dict[str, object]]:
    return list(yaml.safe_load((DATA / "upstream-texts.yml").read_text())["items"])


def seed(gh: FakeGitHub) -> None:
    for t in texts():
        gh.items.append(Item(**{k: v for k, v in t.items()
                                if k not in ("claims", "listed_for")}))  # type: ignore[arg-type]


def defect(report_sig: Signature) -> str:
    return f"{report_sig.op_name}:{report_sig.symptom.value}"


def _cause(found: list[tuple[Signature, list[CaseResult]]], op: str, symptom: Symptom
           ) -> causes.Cause:
    return next(c for c in causes.group(found)
                if any(s.op_name == op and s.symptom is symptom for s, _ in c.members))


def test_a_loss_on_an_empty_batch_is_the_mean_s_defect(bundled: RunResult) -> None:
    """Losses with a mean reduction return 0 on an empty input because the mean does, not
    because of `aten::sub.Tensor` (their first node): one cause with torch.mean, whose
    plain call leads; clamp(min=) and clamp(max=) are one cause; different input classes,
    failure stages and behaviours of a direct call stay apart."""
    found = signatures.group(bundled)
    mean = _cause(found, "l1_loss", Symptom.NAN_DROPPED)
    assert (mean.function, mean.culprit, mean.trigger) == ("aten_mean", "aten.mean.default",
                                                           "empty")
    assert mean.lead.user_op == "torch.mean" and mean.lead.args == []
    ops = {s.op_name for s in mean.also}
    assert {"l1_loss", "huber_loss", "smooth_l1_loss", "binary_cross_entropy_with_logits",
            "kl_div", "margin_ranking_loss"} <= ops
    clamp = _cause(found, "clamp", Symptom.INF_LOST)
    assert sorted(tuple(s.args) for s, _ in clamp.members) == [("max",), ("min",)]
    # a direct call that fails two ways on one trigger is two fixes: the bool mask's mean
    # of V and the float mask's NaN (onnxscript fixed them in two pull requests), the
    # scatter_reduce identity that loses ±inf and its dropped NaN
    sdpa = _cause(found, "scaled_dot_product_attention", Symptom.WRONG_VALUES)
    assert {s.symptom for s, _ in sdpa.members} == {Symptom.WRONG_VALUES}
    assert _cause(found, "scaled_dot_product_attention", Symptom.NAN_INTRODUCED) is not sdpa
    scatter = _cause(found, "scatter_reduce", Symptom.INF_LOST)
    assert {s.symptom for s, _ in scatter.members} == {Symptom.INF_LOST}
    assert _cause(found, "scatter_reduce", Symptom.NAN_DROPPED) is not scatter
    # ...while a call decomposed through it keeps the op's cause whatever it shows
    isposinf = _cause(found, "nan_to_num", Symptom.OVERFLOW_TO_INF)
    assert isposinf.function == "aten_isposinf"
    assert _cause(found, "scaled_dot_product_attention", Symptom.NAN_DROPPED) is not sdpa
    assert _cause(found, "mean", Symptom.INVALID_MODEL) is not mean
    # F.logsigmoid is aten.log_sigmoid: the loss that overflows through it is its defect
    bce = _cause(found, "binary_cross_entropy_with_logits", Symptom.OVERFLOW_TO_INF)
    assert (bce.function, bce.lead.op_name) == ("aten_log_sigmoid", "logsigmoid")
    grouped = causes.group(found)
    # MaxPool, logsigmoid; a node per integer gap; sdpa, scatter_reduce and remainder each
    # fail two ways (two fixes each)
    assert len(found) == 502 and len(grouped) == 163
    assert sorted(s.key for c in grouped for s, _ in c.members) == sorted(s.key for s, _ in found)


def test_a_dtype_gap_is_one_cause_per_dtype_whatever_the_node(bundled: RunResult) -> None:
    """A missing kernel is one cause per (execution provider, dtype), and an ONNX node whose
    type constraints exclude the call's dtype one per dtype (torchlib's), each listing its
    nodes: Gemm lacks three dtypes, so it is in three. A node that rejects float32 too is
    given the wrong tensor on every dtype (cross_entropy's float labels): not a gap."""
    found = signatures.group(bundled)
    gaps = {c.key: c for c in causes.group(found) if c.listing}
    f64 = gaps["kernel|CPUExecutionProvider|missing_kernel|float64"]
    assert (f64.function, f64.trigger, f64.lead.kernel, f64.args) == (
        "CPUExecutionProvider", "float64", "Acos(7)", [])
    assert len(f64.members) == 20 and {"Atan(7)", "Tan(7)", "Resize(19)"} <= {
        s.kernel for s, _ in f64.members}
    assert {c.trigger for c in gaps.values() if any(s.kernel == "Gemm(13)"
                                                   for s, _ in c.members)} == {
        "bfloat16", "int64", "int32"}
    bf16 = gaps["translation|ONNX type constraints|invalid_model|bfloat16"]
    assert bf16.lead.kernel == "Acos" and {"Cos", "Elu", "Atan"} <= {
        s.kernel for s, _ in bf16.members}
    assert sorted(c.trigger for c in gaps.values()) == sorted([
        "float64", "bfloat16", "int64", "int32", "int8", "uint8", "bool",  # kernels
        "bfloat16"])  # type constraints: a float dtype ONNX lacks, one cast for every op
    # a node torchlib emits for integer or bool dtypes it excludes is one cause, whatever
    # the dtype: isnan on every integer dtype (and nansum, which emits IsNaN) is one fix
    isnan = {c.key: c for c in causes.group(found)}["translation|IsNaN|type_constraints"]
    assert not isnan.listing and isnan.trigger == "int64,int32,int8,uint8,bool"
    assert {s.op_name for s, _ in isnan.members} == {"isnan", "nansum"}
    assert drafts.title(isnan.lead, isnan) == \
        "[torchlib] isnan produces an invalid model on integer and bool inputs"
    ce = _cause(found, "cross_entropy", Symptom.INVALID_MODEL)
    assert not ce.listing and ce.function == "aten_cross_entropy_loss"


@pytest.mark.process
def test_one_draft_per_cause_with_a_raw_title_naming_trigger_and_symptom(
        gh: FakeGitHub, tmp_path: Path, bundled: RunResult) -> None:
    """The whole bundled sweep, drafted (wording only, repros not run here): one file per
    root cause, its title pasteable (no markdown escaping), never a decomposition node;
    every signature of a cause points at the same draft; one search per cause."""
    got, warnings = upstream_pass.attach(bundled, client(gh, token=None), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "d", verify=False))
    assert warnings == []
    files = sorted((tmp_path / "d").iterdir())
    grouped = causes.group(signatures.group(bundled))
    assert len(files) == len(grouped) == 163  # MaxPool, logsigmoid; a node per integer gap
    assert len(gh.calls("search")) <= len(grouped)  # one per cause at most (some share one)
    titles = {f.read_text().splitlines()[1][2:]: f.read_text() for f in files}
    for head in titles:
        assert "\\" not in head and "&#" not in head and not ATEN_NODE.search(head), head
    leads = {c.lead.op_name for c in grouped}
    assert all(h.split("] ", 1)[-1].split()[0] in leads or "CPUExecutionProvider" in h
               or " ONNX nodes whose type constraints exclude " in h for h in titles)
    assert "[torchlib] mean returns 0 instead of NaN on an empty input" in titles
    assert ("CPUExecutionProvider has no float64 kernel for 20 ops: Acos(7), Acosh(9), "
            "Asin(7), Asinh(9), Atan(7), Atanh(9), Cosh(9), Elu(6), Erf(13), HardSigmoid(6), "
            "LeakyRelu(16), Det(11), PRelu(16), Selu(6), Sinh(9), Tan(7) and 4 more") in titles
    assert max(map(len, titles)) <= drafts.TITLE_LIMIT
    assert "[torchlib] clamp returns -3.403e+38 instead of -inf for a -inf input" in titles
    # an export that fails only on an empty input says so, whatever the symptom
    assert "[torchlib] scaled_dot_product_attention fails to export on an empty input" in titles
    assert ("[torchlib] avg_pool2d returns 1.679 where eager returns 2.239 with "
            "divisor_override=3") in titles  # a number: with the value every call passes
    text = titles["[torchlib] mean returns 0 instead of NaN on an empty input"]
    also = text.split("### Also seen (same cause)")[1].split("###")[0]
    assert ("- `torch.nn.functional.l1_loss`: returns a number where eager returns NaN "
            "(`F.l1_loss(x, y, reduction='mean')`)") in also
    assert "- `torch.mean`: returns a number where eager returns NaN (`torch.mean(x, dim=-1)` "\
        "and 2 more call(s))" in also
    by_draft: dict[str, set[str]] = {}
    for r in got.upstream:
        assert r.signature is not None and r.draft is not None
        by_draft.setdefault(r.draft, set()).add(r.signature.key)
    assert len(by_draft) == 163 and max(len(v) for v in by_draft.values()) == 40


def test_create_opens_one_issue_per_cause(gh: FakeGitHub, tmp_path: Path,
                                          bundled: RunResult) -> None:
    """clamp(min=) and clamp(max=) lose ±inf the same way: one issue, linked from both."""
    found = signatures.group(bundled)
    cases = [c for _, cs in _cause(found, "clamp", Symptom.INF_LOST).members for c in cs]
    got, _ = upstream_pass.attach(make_run(*cases), client(gh, token=None),
                                  upstream.UpstreamOptions(mode="create", verify=False,
                                                           ledger=tmp_path / "l.json"))
    assert len(gh.calls("issues", "POST")) == 1
    assert len({r.created for r in got.upstream}) == 1 and got.upstream[0].created


def test_duplicates_are_read_for_meaning_in_real_upstream_texts(
        gh: FakeGitHub, bundled: RunResult) -> None:
    """Ten duplicates, each claimed by the defect it reports (the op in code or in plain
    words, title or body); a NaN the exported model introduces never claims a NaN it
    drops; another op, an eager feature request, an export error and a dtype report never
    claim; the pull requests that introduced or fixed the op are listed."""
    seed(gh)
    got, _ = upstream_pass.attach(bundled, client(gh, token=None),
                                  upstream.UpstreamOptions(mode="search"))
    cause_of = causes.of(causes.group(signatures.group(bundled)))
    causes_of = {defect(r.signature): cause_of[r.signature.key].key for r in got.upstream
                 if r.signature is not None}
    confident = {(m.repo, m.number, defect(r.signature)) for r in got.upstream
                 if r.signature is not None for m in [r.match, *r.related]
                 if m is not None and m.confident}
    listed = {(m.repo, m.number, defect(r.signature)) for r in got.upstream
              if r.signature is not None for m in r.related}
    by_defect = {defect(r.signature): r for r in got.upstream if r.signature is not None}
    for t in texts():
        where = (str(t["repo"]), int(str(t["number"])))
        said = {d for repo, number, d in confident if (repo, number) == where}
        assert said == ({str(t["claims"])} if "claims" in t else set()) or (
            "claims" in t and str(t["claims"]) in said and all(  # and its cause's other ops
                by_defect[d].signature is not None and causes_of[d] == causes_of[
                    str(t["claims"])] for d in said)), (t["title"], said)
        if "claims" in t:  # the defect is reported: matched, its draft suppressed
            assert by_defect[str(t["claims"])].match is not None, t["title"]
        if "listed_for" in t:
            assert (*where, t["listed_for"]) in listed, t["title"]
    sdpa_nan = by_defect["scaled_dot_product_attention:nan_dropped"]
    assert sdpa_nan.match is None
    why = {m.number: m.why for m in sdpa_nan.related}
    assert any("another symptom" in w for w in why[2479]), why


@pytest.mark.process
def test_clip_s_specification_routes_one_sided_clamp_to_torchlib(tmp_path: Path) -> None:
    """Clip's bounds default to the type's limits, so Clip(+inf) with no max is FLT_MAX by
    the specification: ONNX Runtime is right and torchlib's aten_clamp, which leaves the
    bound out where eager means none, owns it (ONNX's reference evaluator keeps inf and
    routed it to onnxruntime)."""
    from parity_gate.gate.merge import read_results

    proc = subprocess.run([sys.executable, "-m", "parity_gate", "ops", "--out", str(tmp_path),
                           "--no-baseline", "--jobs", "1", "--quiet", "--select",
                           "op/clamp.min/float32/specials/*"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (case,) = read_results(tmp_path / "results.json")[1].cases
    definition = case.recheck.definition if case.recheck is not None else None
    assert definition is not None and definition.oracle == "the definition of Clip"
    assert definition.owner is Owner.TRANSLATION
    assert signatures.signature_of(case).owner is Owner.TRANSLATION
    # what the sweep measured, and only that: the re-run without optimizations still differs
    assert drafts.measured(case) == ("the difference persists with graph optimizations off "
                                     "(`ORT_DISABLE_ALL`), so it is not a fusion")


def test_a_kernel_draft_says_only_what_was_measured(bundled: RunResult) -> None:
    """A value difference owned by the kernel because ONNX's definition sides with eager:
    the draft says so, and says the difference persists with optimizations off when the
    re-run measured that, never that it vanishes."""
    from parity_gate.model.findings import ByDefinition, Recheck, RecheckVerdict, Rerun
    from parity_gate.model.outcomes import Outcome

    found = signatures.group(bundled)
    case = _cause(found, "atan2", Symptom.NAN_DROPPED).members[0][1][0]
    rc = Recheck(RecheckVerdict.CONFIRMED, "eager",
                 unoptimized=Rerun("disabled", Outcome.MISMATCH),
                 definition=ByDefinition("ONNX's reference evaluator", True, False, Owner.KERNEL))
    kernel = CaseResult.from_dict({**case.to_dict(), "recheck": rc.to_dict()})
    sig = signatures.signature_of(kernel)
    assert sig.owner is Owner.KERNEL
    where = drafts._where(sig, None, kernel)
    assert "persists with graph optimizations off" in where and "vanishes" not in where
    assert "the graph computes eager's answer by ONNX" in where
    # the kernel is the op of the verified repro's graph, never an unnamed "ONNX" kernel
    nodes = ["[n0] tmp = Div <> (y, x)", "[n1] t2 = Atan (tmp)", "[n2] out = Where (c, t2, k)"]
    assert drafts.node_ops(nodes) == ["Div", "Atan", "Where"]
    named = drafts._where(sig, None, kernel, nodes[1:2])
    assert named.startswith("The `Atan` kernel of ONNX Runtime's CPU execution provider (")


def test_an_export_failure_is_described_as_one() -> None:
    """No model ever reaches ONNX Runtime when the export fails: the draft says so, and a
    dtype or precision defect never claims a float64 value is printed."""
    from parity_gate.model.upstream import Signature

    missing = Signature("torch.fmin", "aten.fmin.default", Symptom.UNSUPPORTED,
                        Owner.TRANSLATION, calls=["torch.fmin(x, y)"], dtypes=["float32"],
                        input_classes=["normal"])
    what = drafts._what(missing)
    assert what.startswith("`torch.onnx.export(..., dynamo=True)` of `torch.fmin(x, y)` "
                           "fails: the op has no translation.") and "ONNX Runtime" not in what
    for symptom in (Symptom.WRONG_DTYPE, Symptom.LOW_PRECISION):
        said = drafts._expected(Signature("torch.prod", "aten.prod.default", symptom,
                                          Owner.TRANSLATION))
        assert "float64 value is printed" not in said and said.startswith("Expected: ")


def _literals(script: str) -> int:
    return len(re.findall(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?|float\(", script))


@pytest.mark.process
def test_repros_are_small_in_content_and_still_show_the_defect(
        gh: FakeGitHub, tmp_path: Path, bundled: RunResult) -> None:
    """max_pool2d dropping a NaN: the sweep's 129 literal values become ordinary seeded
    data with one NaN planted; gcd's missing translation: its 342 integer literals become
    seeded integers in the sweep's range; std overflowing to inf: one element, the huge finite input
    an ordinary ±100 only if that still overflows (else the sweep's value). Each repro,
    run again from the draft's text, fails with the defect."""
    found = signatures.group(bundled)
    leads = [_cause(found, "max_pool2d", Symptom.NAN_DROPPED).members[0][1][0],
             _cause(found, "atan2", Symptom.NAN_DROPPED).members[0][1][0],
             _cause(found, "gcd", Symptom.UNSUPPORTED).members[0][1][0]]
    got, _ = upstream_pass.attach(make_run(*leads), client(gh), upstream.UpstreamOptions(
        mode="draft", drafts=tmp_path / "d", check_cache=tmp_path / "c.json"))
    for report in got.upstream:
        assert report.draft is not None, report.describe()
        text = Path(report.draft).read_text(encoding="utf-8")
        (repro,) = re.findall(r"```python\n(.*?)\n```", text, re.DOTALL)
        assert _literals(repro) <= 24, repro
        assert "e+38" not in repro and "e38" not in repro
        script = tmp_path / "repro.py"
        script.write_text(repro, encoding="utf-8")
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode != 0, run.stderr[-1500:]
        assert ("AssertionError" in run.stderr) != ("gcd" in repro), run.stderr[-1500:]
    gcd = next(Path(r.draft).read_text() for r in got.upstream if r.draft and "gcd" in r.draft)
    assert "torch.randint(" in gcd  # 342 integer literals before: an export error needs none
    # a kernel's defect is one cause per ONNX op (MaxPool: max_pool1d/2d/3d), led by one
    pool = next(text for r in got.upstream if r.draft
                for text in [Path(r.draft).read_text()] if "max_pool" in text)
    assert re.search(r'inputs\[0\]\[0(, 0)+\] = float\("nan"\)', pool), pool
    assert "torch.randn(" in pool


def test_a_title_quotes_the_values_the_repro_prints() -> None:
    """A shrunk repro prints other values than the sweep saw: the title follows the repro
    (what a reader's run shows), one element each side; anything else keeps the sweep's."""
    sweep = Example("o0", [0, 3], "0.2467", "1.44", {})
    printed = {"output": "eager: tensor(0.3441) | onnxruntime: tensor(0.4397) | float64: 0.34"}
    got = drafts.as_printed(sweep, printed)
    assert got is not None and (got.eager, got.onnx) == ("0.3441", "0.4397")
    flags = drafts.as_printed(sweep, {"output": "eager: tensor(False) | onnxruntime: "
                                                "tensor(True) | float64: False"})
    assert flags is not None and (flags.eager, flags.onnx) == ("False", "True")
    big = drafts.as_printed(Example("o0", [0], "1.797e+308", "inf", {}), {
        "output": "eager: tensor(1.7977e+308, dtype=torch.float64) | onnxruntime: "
                  "tensor(inf, dtype=torch.float64)"})  # 1.7977e+308 reads back as inf
    assert big is not None and (big.eager, big.onnx) == ("1.797e+308", "inf")
    typed = drafts.as_printed(sweep, {"output": "eager: torch.float16 | onnxruntime: "
                                                "torch.float32"})
    assert typed is not None and (typed.eager, typed.onnx) == ("float16", "float32")
    for kept in ({"output": "eager: tensor([1., 2.]) | onnxruntime: tensor([1., 3.])"}, None):
        assert drafts.as_printed(sweep, kept) == sweep


def test_a_shrunk_integer_element_is_written_as_an_integer() -> None:
    """pow(0, -2**63) on int64 shrinks to pow(0, -100): the repro writes -100, never the
    float -100.0 inside an int64 tensor."""
    import numpy as np

    from parity_gate.ops import upstream_repro

    int64 = np.dtype("int64")
    assert upstream_repro._element(upstream_repro._shrink("-9223372036854775808"), int64,
                                   False) == "torch.tensor([-100], dtype=torch.int64)"
    assert upstream_repro._element("9223372036854775807", int64, False) == \
        "torch.tensor([9223372036854775807], dtype=torch.int64)"
    assert upstream_repro._element("0", np.dtype("bool"), False) == \
        "torch.tensor([False], dtype=torch.bool)"
