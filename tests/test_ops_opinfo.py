"""OpInfo-derived variants, given sample values, coverage, and `ops --shard`.

The pure tests build records by hand; the process tests build a few OpInfos
of the installed torch into a temporary cache and sweep them on real workers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from parity_gate.model.findings import OpCase
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.ops.coverage import coverage, op_name, overload_name
from parity_gate.ops.inputs import make_inputs
from parity_gate.ops.planner import Selection, plan, shard_of, units_of
from parity_gate.ops.records import Arg, OpVariant
from parity_gate.plan.sharding import Shard

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SUBSET_SOURCE = ("ops_opinfo_subset:VARIANTS",)


def _sample(values: np.ndarray, dtype: str | None = None) -> Arg:
    stored = dtype or "float32"
    data = values.astype(np.dtype(stored).newbyteorder("<") if stored != "bool" else bool)
    return Arg("t0" if dtype is None else "t1", values.shape, kind="sample", dtype=dtype,
               stored=stored, sample=data.tobytes())


GIVEN = np.array([[0.5, -2.25, 3.0], [7.5, -0.125, 1.0]], dtype=np.float32)
INDEX = np.array([[2, 0, 1], [1, 1, 0]], dtype=np.int64)
VARIANT = OpVariant("oi.gather.0", "oi.tensor", "torch.gather(t0, 1, t1)",
                    (_sample(GIVEN), _sample(INDEX, "int64")),
                    ("float32", "float16", "int8", "uint8", "bool"))


def test_a_sample_arg_is_the_normal_class_and_indices_keep_their_values() -> None:
    normal = make_inputs(VARIANT, "float32", "normal")
    assert normal["t0"].dtype == np.float32 and np.array_equal(normal["t0"], GIVEN)
    assert normal["t1"].dtype == np.int64 and np.array_equal(normal["t1"], INDEX)
    assert np.array_equal(make_inputs(VARIANT, "float16", "normal")["t0"],
                          GIVEN.astype(np.float16))
    # integers: toward zero, clipped; unsigned take magnitudes; bool: the positive values
    assert make_inputs(VARIANT, "int8", "normal")["t0"].tolist() == [[0, -2, 3], [7, 0, 1]]
    assert make_inputs(VARIANT, "uint8", "normal")["t0"].tolist() == [[0, 2, 3], [7, 0, 1]]
    assert make_inputs(VARIANT, "bool", "normal")["t0"].tolist() == [[True, False, True],
                                                                    [True, False, True]]


def test_a_sample_arg_takes_the_other_input_classes_like_data() -> None:
    specials = make_inputs(VARIANT, "float32", "specials")
    assert np.isnan(specials["t0"]).any() and np.isinf(specials["t0"]).any()
    assert np.array_equal(specials["t1"], INDEX)  # indices are never special values
    empty = make_inputs(VARIANT, "float32", "empty")
    assert empty["t0"].shape == (2, 0) and np.array_equal(empty["t1"], INDEX)
    ranged = OpVariant("oi.sin.0", "oi.unary", "torch.sin(t0)", (_sample(GIVEN),),
                       ("float32",), ranged=True)
    assert ranged.classes_for("float32") == ("normal", "specials", "empty", "range")
    assert VARIANT.classes_for("float32") == ("normal", "specials", "empty")
    values = make_inputs(ranged, "float32", "range")["t0"]
    assert not np.array_equal(values, GIVEN) and np.isfinite(values).all()


def test_a_zero_dim_sample_takes_every_dtype_and_class() -> None:
    """numpy turns 0-d results into scalars; a 0-d sample must stay an array."""
    scalar = OpVariant("oi.abs.0", "oi.unary", "torch.abs(t0)",
                       (_sample(np.array(-2.5, dtype=np.float32)),), ("int8", "bool"))
    for dtype in ("int8", "bool", "float32"):
        for cls in ("normal", "specials", "empty"):
            value = make_inputs(scalar, dtype, cls)["t0"]
            assert isinstance(value, np.ndarray) and value.shape == ()
    assert make_inputs(scalar, "int8", "normal")["t0"].item() == -2
    assert make_inputs(scalar, "int8", "specials")["t0"].item() == -128  # the first extreme


def _case(variant: str, outcome: Outcome, ops: list[str]) -> CaseResult:
    return CaseResult(CaseKey(f"op/{variant}", "float32", "normal", None, "cpu"), outcome,
                      op=OpCase(variant=variant, family="f", call="", op=ops[0],
                                aten_ops=ops))


def test_coverage_counts_only_ops_of_exported_graphs() -> None:
    assert overload_name("aten.abs.default") == "aten::abs"
    assert overload_name("aten.add.Tensor") == "aten::add.Tensor"
    assert op_name("aten.add.Tensor") == "aten::add"
    run = RunResult(cases=[
        _case("a", Outcome.PASS, ["aten.convolution.default", "aten.add.Tensor"]),
        _case("b", Outcome.MISMATCH, ["aten.cat.default"]),
        # eager's dispatch of a case that never exported: not the exporter's coverage
        _case("c", Outcome.UNSUPPORTED_OP, ["aten.stft.default"]),
        _case("d", Outcome.SKIPPED, ["aten.gather.default"]),
    ])
    registered = ["aten::convolution", "aten::add.Tensor", "aten::add.Scalar", "aten::cat",
                  "aten::stft", "aten::gather", "prims::add"]
    cov = coverage([run], registered)
    assert cov.registered_ops == {"aten::convolution", "aten::add", "aten::cat", "aten::stft",
                                  "aten::gather"}
    assert cov.reached_ops == {"aten::convolution", "aten::add", "aten::cat"}
    assert cov.unreached_ops == ["aten::gather", "aten::stft"]
    assert cov.unreached_overloads == ["aten::add.Scalar", "aten::gather", "aten::stft"]
    assert cov.percent() == pytest.approx(60.0)
    assert cov.lines()[0] == "ATen ops: 3 of 5 registered in torchlib reached (60.0%)"


def _variants(n: int) -> list[OpVariant]:
    x = (Arg("x", (2, 3)),)
    return [OpVariant(f"v{i}", "f", "torch.sin(x)", x, ("float32", "float16")[: 1 + i % 2])
            for i in range(n)]


def test_shards_split_whole_variants_and_cover_the_plan_once() -> None:
    units, skipped = units_of(_variants(11), Selection())
    parts = [shard_of(units, skipped, Shard(k, 3)) for k in (1, 2, 3)]
    seen = [u for part, _ in parts for u in part]
    assert sorted(seen) == sorted(units)  # every unit once
    owners = {u.variant: k for k, (part, _) in enumerate(parts) for u in part}
    assert all(owners[u.variant] == k for k, (part, _) in enumerate(parts) for u in part)
    sizes = sorted(len(part) for part, _ in parts)
    assert sizes[-1] - sizes[0] <= 6  # balanced within one variant (6 cases at most)
    assert shard_of(units, skipped, Shard(2, 3)) == parts[1]  # the same split every time
    variants = {v.id: v for v in _variants(11)}
    whole = plan(variants, Selection()).unit_count
    assert sum(plan(variants, Selection(), shard=Shard(k, 3)).unit_count
               for k in (1, 2, 3)) == whole


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parity_gate", "ops", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)


def test_shards_of_one_sweep_share_its_fingerprint_and_a_foreign_shard_is_refused(
        tmp_path: Path) -> None:
    """Shards planned from different OpInfo builds split the sweep differently: the merge
    must say so, not report a case 'also in' another shard or a missing one."""
    import json
    from dataclasses import replace

    from parity_gate.errors import UserError
    from parity_gate.gate.merge import merge_files

    other = replace(VARIANT, id="oi.gather.1")
    variants = {v.id: v for v in (VARIANT, other)}
    whole = plan(variants, Selection())
    parts = [plan(variants, Selection(), shard=Shard(k, 2)) for k in (1, 2)]
    assert len(whole.fingerprint) == 64
    assert {p.fingerprint for p in parts} == {whole.fingerprint}
    assert sum(p.total for p in parts) == whole.total
    values = GIVEN.copy()
    values[0, 0] = 0.75  # one value of one sample differs
    rebuilt = {**variants, VARIANT.id: replace(VARIANT, args=(_sample(values),
                                                             VARIANT.args[1]))}
    assert plan(rebuilt, Selection()).fingerprint != whole.fingerprint
    assert plan(variants, Selection(), seed=1).fingerprint != whole.fingerprint

    files = []
    for k, digest in ((1, whole.fingerprint), (2, plan(rebuilt, Selection()).fingerprint)):
        run = RunResult(cases=[], manifest={"command": "ops", "sha256": digest},
                        shard=f"{k}/2", planned=0)
        files.append(tmp_path / f"s{k}.json")
        files[-1].write_text(json.dumps(run.to_dict()))
    with pytest.raises(UserError) as refused:
        merge_files(files)
    assert f"{files[1]}: op plan sha256 " in str(refused.value)
    assert "planned from the same variants" in str(refused.value)


@pytest.mark.process
def test_ops_shard_and_source_on_the_command_line() -> None:
    bad = _cli("--source", "opinfo,zoo", "--list")
    assert bad.returncode == 2 and "--source: unknown source 'zoo'" in bad.stderr
    assert "Traceback" not in bad.stderr
    bad = _cli("--shard", "3/2", "--list")
    assert bad.returncode == 2 and "--shard" in bad.stderr
    listed = [_cli("--family", "binary", "--shard", f"{k}/2", "--list") for k in (1, 2)]
    whole = _cli("--family", "binary", "--list")
    assert all(r.returncode == 0 for r in (*listed, whole))
    parts = [set(r.stdout.splitlines()) for r in listed]
    assert parts[0] and parts[1] and not parts[0] & parts[1]
    assert parts[0] | parts[1] == set(whole.stdout.splitlines())


def test_update_baseline_keeps_the_entries_of_a_source_it_did_not_sweep(
        tmp_path: Path) -> None:
    """A catalogue-only update cannot tell whether an OpInfo finding still fails: its entry
    stays, where it was, while the catalogue's entries are judged by the run."""
    from parity_gate.ops import gating
    from parity_gate.ops.jobs import SOURCES

    known = tmp_path / "known.yml"
    known.write_text("version: 1\nknown_failures:\n"
                     "- id: op/gone/*\n  reason: stale\n  outcome: mismatch\n"
                     "- id: op/oi.atan2.0/*\n  reason: kept\n  outcome: mismatch\n"
                     "- id: op/sin/*\n  reason: fixed\n  outcome: mismatch\n")
    ok = CaseResult(CaseKey("op/sin", "float32", "normal", None, "cpu"), Outcome.PASS, "")
    run = RunResult(cases=[ok])
    text, changes = gating.updated_baseline(known, run, {}, (SOURCES["catalogue"],))
    after = gating.bl.parse(text, "known")
    assert [e.id for e in after.entries] == ["op/oi.atan2.0/*"]
    assert after.entries[0].reason == "kept"
    assert {(c.action, c.id) for c in changes} == {("removed", "op/gone/*"),
                                                   ("removed", "op/sin/*")}
    # every source swept (the default): the OpInfo entry matches no case, so it is stale
    text, _ = gating.updated_baseline(known, run, {})
    assert gating.bl.parse(text, "known").entries == ()


# --------------------------------------------------------------------------
# real OpInfo samples


@pytest.fixture(scope="module")
def opinfo_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private cache (workers inherit the variable), built once for this module."""
    root = tmp_path_factory.mktemp("xdg")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(root)
    sys.path.insert(0, str(TESTS))
    yield root
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.mark.process
def test_opinfo_samples_become_variants_with_every_tensor_a_graph_input(
        opinfo_cache: Path) -> None:
    pytest.importorskip("expecttest")
    from ops_opinfo_subset import SUBSET

    from parity_gate.ops.opinfo import variants

    found = variants(SUBSET)
    ops = {v.id.rsplit(".", 1)[0] for v in found}
    assert ops == {f"oi.{name}" for name in SUBSET}
    for v in found:
        names = set(re.findall(r"\bt\d+\b", v.call))
        assert names == {a.name for a in v.args}, v.call  # no tensor built in forward
        assert all(a.kind == "sample" for a in v.args)
        assert v.dtypes and set(v.dtypes) <= {"float32", "float64", "float16", "bfloat16",
                                              "int8", "int32", "int64", "uint8", "bool"}
    conv = next(v for v in found if v.id == "oi.nn.functional.conv2d.0")
    assert conv.call.startswith("torch.nn.functional.conv2d(t0, t1")
    assert conv.input_classes == ("normal", "specials", "empty")
    expand = next(v for v in found if v.id == "oi.expand.0")  # a lambda in OpInfo
    assert expand.call.startswith("t0.expand(")
    bitwise = next(v for v in found if v.id == "oi.bitwise_and.0")  # no float32 in OpInfo
    assert all(a.follows and a.stored == "int64" for a in bitwise.args)
    assert "int64" in bitwise.dtypes and "float32" not in bitwise.dtypes
    late = [v for v in found if int(v.id.rsplit(".", 1)[1]) >= 2]
    assert late and all(v.input_classes == ("normal",) for v in late)
    # the same ids and values on a second read of the cache (what workers do)
    assert [v.id for v in variants(SUBSET)] == [v.id for v in found]


def test_the_keep_checks_allow_rounding_noise_but_not_a_different_answer() -> None:
    """Two evaluations of one call differ by a few ulps with the memory they are handed
    (measured: linalg.lstsq, 2.4e-6 on values up to 12.3): same; anything else is not."""
    import torch

    from parity_gate.ops.opinfo import NOISE_ULPS, _same

    x = torch.tensor([12.255927, -3.5, 0.25, float("nan"), float("inf")])
    noisy = x.clone()
    noisy[1] += 2.4e-6
    assert _same((x, torch.tensor([1, 2])), (noisy, torch.tensor([1, 2])))
    off = x.clone()
    off[2] += 2 * NOISE_ULPS * torch.finfo(torch.float32).eps * 12.3  # over the noise
    assert not _same(x, off)
    assert not _same(x, torch.where(x.isinf(), -x, x))  # +inf against -inf
    assert not _same(x, torch.nan_to_num(x, nan=0.5))  # NaN against a number
    assert not _same(torch.tensor([1, 2]), torch.tensor([1, 3]))  # integers exactly
    assert not _same(x, x.double()) and not _same(x, x[:4])
    assert _same(torch.empty(0, 3), torch.empty(0, 3))


@pytest.mark.process
def test_two_builds_plan_the_same_variants_whatever_the_hash_seed(tmp_path: Path) -> None:
    """meshgrid's samples come from a set of strings, linalg.lstsq's keep check from LAPACK
    rounding: both once gave different ids on two builds of one torch."""
    pytest.importorskip("expecttest")
    import gzip

    ops = "linalg.lstsq,meshgrid"
    built = []
    for seed in ("1", "4"):  # their set orders differ: list({"xy", "ij"})
        path = tmp_path / f"b{seed}.json.gz"
        done = subprocess.run([sys.executable, "-m", "parity_gate.ops.opinfo", "--write",
                               str(path), "--ops", ops], capture_output=True, text=True,
                              cwd=ROOT, timeout=600, check=False,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        built.append(gzip.decompress(path.read_bytes()))
    assert built[0] == built[1]
    assert b"oi.meshgrid.variadic_tensors.0" in built[0]


@pytest.mark.process
def test_opinfo_cases_run_through_the_sweep(opinfo_cache: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("expecttest")
    from parity_gate.ops.registry import load_variants
    from parity_gate.ops.sweep import sweep

    variants = load_variants(SUBSET_SOURCE)
    selection = Selection(select=["oi.nn.functional.conv2d.0", "oi.cat.0", "oi.gather.0",
                                  "oi.atan2.0"], dtypes=["float32"])
    op_plan = plan(variants, selection, sources=SUBSET_SOURCE,
                   accepted={k: v.dtypes for k, v in variants.items()})
    results = list(sweep(op_plan, selection, workers=1))
    assert len(results) == op_plan.total == 12  # 4 samples x normal, specials, empty
    by_id = {r.id: r for r in results}
    conv = by_id["op/oi.nn.functional.conv2d.0/float32/normal/cpu"]
    assert conv.outcome is Outcome.PASS and conv.op is not None
    assert "aten.conv2d.default" in conv.op.aten_ops  # the exporter keeps conv2d whole
    assert conv.op.user_op == "torch.nn.functional.conv2d"
    cat = by_id["op/oi.cat.0/float32/specials/cpu"]
    assert cat.outcome is Outcome.PASS and "aten.cat.default" in (cat.op.aten_ops if cat.op
                                                                  else [])
    for r in results:  # eager rejecting an input class is never a finding
        if r.outcome is Outcome.SKIPPED:
            assert r.reason.startswith("not applicable") and r.op is not None
            assert r.op.finding_class is None
    cov = coverage([RunResult(cases=results)], ["aten::conv2d", "aten::cat",
                                                "aten::gather", "aten::atan2", "aten::stft"])
    assert {"aten::conv2d", "aten::cat", "aten::gather", "aten::atan2"} <= cov.reached_ops
    assert cov.unreached_ops == ["aten::stft"]

    # An OpInfo finding is drafted upstream like a catalogue one: its repro is built from the
    # OpInfo sample (the subset stands in for the whole OpInfo source here) and reproduces.
    from github_server import FakeGitHub
    from test_github_upstream import client, make_run

    from parity_gate.github import upstream, upstream_pass
    from parity_gate.ops import jobs, signatures

    monkeypatch.setitem(jobs.SOURCES, "opinfo", SUBSET_SOURCE[0])
    nan_lost = by_id["op/oi.atan2.0/float32/specials/cpu"]
    assert nan_lost.outcome is Outcome.MISMATCH and signatures.reported(nan_lost)
    with FakeGitHub() as gh:
        got, warnings = upstream_pass.attach(make_run(nan_lost), client(gh),
                                             upstream.UpstreamOptions(
                                                 mode="draft", drafts=tmp_path / "drafts",
                                                 check_cache=tmp_path / "checks.json"))
        assert gh.errors == []
    (report,) = got.upstream
    assert warnings == [] and report.draft is not None, report.describe()
    draft = Path(report.draft).read_text(encoding="utf-8")
    assert "torch.atan2" in draft and "oi.atan2" not in draft  # the user's op, no sweep ids



def test_lambdas_are_spelled_as_attributes_or_with_swapped_arguments_and_complex_as_pairs(
) -> None:
    """A lambda OpInfo may name a Tensor property (`x.mT`) or reorder its first two
    arguments (`F.embedding(idx, weight)`); one complex output is compared as real pairs."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from parity_gate.ops.opinfo import ATTRIBUTE, FUNCTION, SWAPPED, real_view, render

    weight, idx = torch.ones(4, 3), torch.tensor([1, 0])
    sample = SimpleNamespace(input=weight, args=(idx,), kwargs={"max_norm": 1.0})
    call, tensors = render(("torch.nn.functional.embedding", SWAPPED), sample)
    assert call == "torch.nn.functional.embedding(t1, t0, max_norm=1.0)"
    assert tensors[0] is weight and tensors[1] is idx  # graph inputs keep their order
    plain, _ = render(("torch.nn.functional.embedding", FUNCTION), sample)
    assert plain == "torch.nn.functional.embedding(t0, t1, max_norm=1.0)"
    mt, _ = render(("mT", ATTRIBUTE), SimpleNamespace(input=weight, args=(), kwargs={}))
    assert mt == "t0.mT"
    assert real_view("torch.fft.rfft(t0)") == "torch.view_as_real(torch.fft.rfft(t0))"


# --------------------------------------------------------------------------
# caches the sweep reads: validated as a whole, a malformed one rebuilt with one warning

# `ops --source opinfo --list`, the OpInfo source standing in for by the test subset (the
# whole database takes minutes to build); everything else is the real command.
_SUBSET_CLI = """
import sys
from parity_gate.ops import jobs
jobs.SOURCES["opinfo"] = "ops_opinfo_subset:VARIANTS"
jobs.MEASURED_SOURCES = frozenset({jobs.SOURCES["opinfo"]})
from parity_gate import cli
sys.exit(cli.main(["ops", "--source", "opinfo", "--list"]))
"""


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "warning" in line or "error" in line]


@pytest.mark.process
def test_a_malformed_opinfo_cache_is_rebuilt_with_one_warning(opinfo_cache: Path) -> None:
    """Right torch and format, wrong contents (a variant without `args`): rebuilt, not
    `internal error: KeyError: 'args'` on every run."""
    pytest.importorskip("expecttest")
    import gzip
    import json

    from ops_opinfo_subset import SUBSET

    from parity_gate.ops.opinfo import FORMAT, cache_path, read, torch_version, variants

    good = variants(SUBSET)
    path = cache_path(torch_version(), tuple(sorted(SUBSET)))
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert doc["format"] == FORMAT
    del doc["variants"][0]["args"]
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    runs = [subprocess.run([sys.executable, "-c", _SUBSET_CLI], capture_output=True,
                           text=True, cwd=ROOT, env=env, timeout=600) for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr[-2000:]
    assert _warnings(runs[0].stderr) == [
        f"parity-gate ops: warning: {path}: malformed OpInfo variant cache (variants.0.args: "
        "Field required; expected the file `python -m parity_gate.ops.opinfo` writes); "
        "rebuilding it"]
    assert runs[1].returncode == 0 and _warnings(runs[1].stderr) == []  # rebuilt once
    assert runs[0].stdout == runs[1].stdout and "oi.atan2.0" in runs[0].stdout
    rebuilt, why = read(path, torch_version())
    assert rebuilt is not None and why == ""
    assert [v.id for v in variants(SUBSET)] == [v.id for v in good]
    # a sample whose bytes do not fill its shape is as malformed as a missing key
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["variants"][0]["args"][0]["shape"] = [7, 7]
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert "variants.0.args.0: Value error, sample:" in read(path, torch_version())[1]


@pytest.mark.process
def test_a_malformed_accepted_dtypes_cache_is_rebuilt_with_one_warning(tmp_path: Path
                                                                       ) -> None:
    """An entry whose signature matches but whose dtypes are not a list was
    `internal error: TypeError` on every `ops` run."""
    import json

    from parity_gate.ops.accepted import signature, torch_version
    from parity_gate.ops.jobs import DEFAULT_SOURCES
    from parity_gate.ops.registry import load_variants

    sin = load_variants(DEFAULT_SOURCES)["sin"]
    path = tmp_path / "parity-gate" / f"accepted-dtypes-torch-{torch_version()}.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"torch": torch_version(),
                                "variants": {"sin": {"signature": signature(sin),
                                                     "dtypes": 5}}}))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-m", "parity_gate", "ops", "--list", "--select",
                            "sin"], capture_output=True, text=True, cwd=ROOT, env=env,
                           timeout=300) for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr[-2000:]
    assert _warnings(runs[0].stderr) == [
        f"parity-gate ops: warning: {path}: malformed accepted-dtypes cache "
        "(variants.sin.dtypes: Input should be a valid list); rebuilding it"]
    assert runs[1].returncode == 0 and _warnings(runs[1].stderr) == []
    assert runs[0].stdout == runs[1].stdout and "sin" in runs[0].stdout
    assert json.loads(path.read_text())["variants"]["sin"]["dtypes"][0] == "float32"


def test_a_malformed_repro_check_cache_is_dropped_with_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from parity_gate.ops.upstream_check import check_all

    cache = tmp_path / "checks.json"
    cache.write_text('{"abc": {"stage": "ok", "error": "", "output": "", "nodes": 3}}')
    done = check_all([], [], cache)
    assert done.answers == {} and done.ran == 0
    assert capsys.readouterr().err.splitlines() == [
        f"parity-gate: warning: {cache}: malformed repro-check cache (abc.nodes: Input "
        "should be a valid list); checking every repro again"]
    assert cache.read_text() == "{}"
