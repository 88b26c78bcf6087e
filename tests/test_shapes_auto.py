"""`shapes: auto` (issue 41): probe cases at sizes chosen from the export's assumptions,
run by the real gate (real torch.export, ONNX Runtime, worker processes), and the pure
derivation of probe sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from parity_gate.manifest.load import load_manifest
from parity_gate.manifest.models import InputSpec, RandomFixture
from parity_gate.model.keys import could_match
from parity_gate.plan.cases import plan
from parity_gate.plan.probes import (
    Assumption,
    Probe,
    ProbeSettings,
    Range,
    derive,
    probe_label,
    resize,
)

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "data" / "shapes" / "parity.yml"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parity_gate", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("shapes")
    proc = _cli("run", str(MANIFEST), "--out", str(out), "--no-cache", "--no-localise",
                "--select", "pool/**", "--select", "view16/**", "--select", "square/**",
                "--select", "even/**")
    doc = json.loads((out / "results.json").read_text())
    return proc.returncode, doc, {c["id"]: c for c in doc["cases"]}


@pytest.mark.process
def test_a_probe_finds_the_size_the_declared_cases_miss(probed: Any) -> None:
    """AdaptiveAvgPool2d(4) exported at 20x20: the declared 20x20 passes; the probe that
    breaks `h // 4 == 5` gets another shape from the ONNX model, with its line named."""
    code, _doc, cases = probed
    assert code == 1
    assert cases["pool/float32/img20/b2/cpu"]["outcome"] == "pass"
    probe = cases["pool/float32/img20@h=19/b2/cpu"]
    assert probe["outcome"] == "shape_mismatch"
    lines = (MANIFEST.parent / "models.py").read_text().splitlines()
    line = lines.index("        return self.pool(self.conv(x)).flatten(1)") + 1
    assert f"h // 4 == 5, assumed by self.pool (nn.AdaptiveAvgPool2d) at models.py:{line}" \
        in probe["probe"]
    assert cases["pool/float32/img20@h=21/b2/cpu"]["outcome"] == "mismatch"


@pytest.mark.process
def test_sizes_eager_rejects_are_not_failures(probed: Any) -> None:
    """view(-1, 16) at n=33 and h != w for `x + x.transpose(2, 3)`: eager and ONNX Runtime
    both refuse; skipped, said, never a mismatch. The kept relations pass."""
    _code, _doc, cases = probed
    view = cases["view16/float32/flat@n=33/b2/cpu"]
    assert view["outcome"] == "skipped"
    assert "eager rejects it" in view["reason"] and "so does ONNX Runtime" in view["reason"]
    assert "(batch*n) % 16 == 0" in view["probe"]
    square = cases["square/float32/square@h=9/b2/cpu"]
    assert square["outcome"] == "skipped" and "breaks w == h" in square["probe"]
    assert cases["square/float32/square@h=9@w=9/b2/cpu"]["outcome"] == "pass"
    failed = {i for i, c in cases.items() if c["outcome"] not in ("pass", "skipped")}
    assert all(i.startswith("pool/") for i in failed), failed


@pytest.mark.process
def test_an_onnx_answer_where_eager_refuses_is_a_hazard(probed: Any) -> None:
    """torch._check(t % 2 == 0) is dropped from the graph: eager refuses t=9, the ONNX
    model answers; a hazard finding, the case skipped (not a mismatch)."""
    _code, doc, cases = probed
    odd = cases["even/float32/seq@t=9/b2/cpu"]
    assert odd["outcome"] == "skipped" and "returns a result silently" in odd["reason"]
    found = [f for f in doc["findings"] if f.get("hazard", {}).get("rule")
             == "unchecked-size-assumption" and "even/float32/seq@t=9" in f["message"]]
    assert found


@pytest.mark.process
def test_a_probe_that_kills_the_worker_is_reported(tmp_path: Path) -> None:
    """Probes are not planned, so the pool cannot list them as pending: the one the
    worker was running when it died is reported from its last step, as a crash."""
    proc = _cli("run", str(MANIFEST), "--out", str(tmp_path), "--no-cache", "--no-localise",
                "--select", "crash/**")
    cases = {c["id"]: c for c in json.loads((tmp_path / "results.json").read_text())["cases"]}
    assert proc.returncode == 1
    assert cases["crash/float32/seq/b2/cpu"]["outcome"] == "pass"
    crashed = cases["crash/float32/seq@t=9/b2/cpu"]
    assert crashed["outcome"] == "crash" and "t one above its export size 8" in crashed["probe"]


@pytest.mark.process
def test_check_explain_lists_the_probes_before_any_run() -> None:
    proc = _cli("check", str(MANIFEST), "--explain")
    assert proc.returncode == 0, proc.stderr
    assert "probe pool/float32/img20@h=19/b2: breaks h // 4 == 5" in proc.stdout
    assert "probe square/float32/square@h=9/b2: breaks w == h" in proc.stdout


def _line(text: str) -> int:
    return (MANIFEST.parent / "models.py").read_text().splitlines().index(text) + 1


@pytest.mark.process
def test_each_assumption_names_the_op_and_line_that_made_it() -> None:
    """The op is the call the model's line makes, read from what made the guard (the live
    stack while torch.export traces, the decomposed node's metadata after), never the op
    the check was filed beside: AdaptiveAvgPool2d's decomposition, not the conv before
    it; the `+` that needs two sizes to agree, not the interpolate or the conv."""
    proc = _cli("check", str(MANIFEST.parent / "provenance.yml"), "--explain")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    pool = _line("        return self.pool(self.conv(x)).flatten(1)")
    strided_conv, strided_add = _line("        y = self.down(x)"), _line("        return y + half")
    back = _line('        return F.interpolate(y, scale_factor=2.0, mode="nearest") + x')
    expected = [
        f"h % 4 == 0, assumed by self.pool (nn.AdaptiveAvgPool2d) at models.py:{pool}",
        f"1 < 3*h*w, assumed by self.conv (nn.Conv2d) at models.py:{pool}",
        "(batch*n) % 16 == 0, assumed by x.view at models.py:"
        f"{_line('        return x.view(-1, 16).sum(-1)')}",
        f"1 < 3*h*w, assumed by self.down (nn.Conv2d) at models.py:{strided_conv}",
        f"1 + (((-1) + h) // 2) == math.trunc(0.50000000000000000*torch.sym_float(h)), "
        f"assumed by operator + at models.py:{strided_add}",
        "1 < 3*h*w, assumed by F.conv2d at models.py:"
        f"{_line('        return F.conv2d(x, self.weight, stride=2, padding=1)')}",
        "w // 2 != 1, assumed by F.pixel_unshuffle at models.py:"
        f"{_line('        return F.pixel_unshuffle(x, 2)')}",
        f"2*math.trunc(0.50000000000000000*torch.sym_float(h)) == h, assumed by operator + "
        f"at models.py:{back}",
    ]
    for line in expected:
        assert f"  assumes {line}\n" in out, line
    assert "near " not in out and "_conv_forward" not in out


@pytest.mark.process
def test_a_probe_id_from_check_explain_selects_that_probe_alone(tmp_path: Path) -> None:
    """Probes exist only once the module is exported: `--select` with an id `check
    --explain` prints runs the export's own cases as helpers (kept out of the reports)
    and that probe alone; a glob over probe ids works the same way."""
    explain = _cli("check", str(MANIFEST), "--explain").stdout
    printed = next(line.split()[1].rstrip(":") for line in explain.splitlines()
                   if line.startswith("  probe pool/") and "breaks h // 4 == 5" in line)
    assert printed == "pool/float32/img20@h=19/b2"
    proc = _cli("run", str(MANIFEST), "--out", str(tmp_path / "one"), "--no-cache",
                "--no-localise", "--select", printed, "--select", "view16/*@n=33*")
    cases = json.loads((tmp_path / "one" / "results.json").read_text())["cases"]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert {c["id"]: c["outcome"] for c in cases} == {
        "pool/float32/img20@h=19/b2/cpu": "shape_mismatch",
        "view16/float32/flat@n=33/b2/cpu": "skipped"}


@pytest.mark.process
def test_selecting_a_planned_case_runs_no_probe(tmp_path: Path) -> None:
    """A planned case's id selects that case, not the probes of its module."""
    proc = _cli("run", str(MANIFEST), "--out", str(tmp_path), "--no-cache", "--no-localise",
                "--select", "view16/float32/flat/b2/cpu")
    cases = json.loads((tmp_path / "results.json").read_text())["cases"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [c["id"] for c in cases] == ["view16/float32/flat/b2/cpu"]


@pytest.mark.process
def test_a_probe_pattern_that_names_no_probe_is_a_usage_error(tmp_path: Path) -> None:
    proc = _cli("run", str(MANIFEST), "--out", str(tmp_path), "--no-cache", "--no-localise",
                "--select", "view16/float32/flat@n=77/b2")
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("--select view16/float32/flat@n=77/b2: matches no case and names "
                           "no probe"), proc.stderr[-2000:]


def test_probes_keep_and_break_each_relation() -> None:
    same = Assumption("w == h", ("h", "w"))
    probes = derive([same], {"batch": 2, "h": 8, "w": 8}, {},
                    ProbeSettings(("h", "w"), cap=3))
    assert [(p.changed, bool(p.breaks)) for p in probes[:2]] == [
        ({"h": 9}, True), ({"h": 9, "w": 9}, False)]
    assert len(probes) == 3  # the cap


def test_probes_stay_in_range_and_skip_declared_sizes() -> None:
    div = Assumption("t % 4 == 0", ("t",))
    probes = derive([div], {"t": 8}, {"t": Range(6, 10)}, ProbeSettings(("t",), cap=9),
                    declared={("t", 9)})
    sizes = [p.changed["t"] for p in probes]
    assert 9 not in sizes and all(6 <= s <= 10 for s in sizes) and 7 in sizes


def test_a_specialised_dim_is_probed_off_its_size() -> None:
    """A range of one point: torch.export fixed the dim; the sizes beside it are probed."""
    probes = derive([], {"t": 8}, {"t": Range(8, 8)}, ProbeSettings(("t",), cap=4))
    assert [p.changed["t"] for p in probes[:2]] == [9, 7]
    assert all("t == 8 (specialised during tracing)" in p.breaks for p in probes[:2])


def test_a_probe_id_replaces_the_size_its_set_names() -> None:
    probe = Probe((("batch", 3), ("seq", 9)), "")
    assert probe_label("text@seq=8", probe, "batch") == "text@seq=9"
    assert probe_label("text@seq=8", Probe((("h", 9),), ""), "batch") == "text@seq=8@h=9"


def test_resize_splits_a_set_dim_shared_by_two_symbols() -> None:
    fixture = RandomFixture(kind="random", dims={"s": 8},
                            inputs={"x": {"shape": ["batch", 3, "s", "s"]}})
    got = resize(fixture, [InputSpec(name="x", dynamic={0: "batch", 2: "h", 3: "w"})],
                 {"h": 9, "batch": 3})
    assert not isinstance(got, str)
    resized, batch = got
    assert resized.inputs["x"].shape == ["batch", 3, 9, "s"] and batch == 3


def test_could_match_tells_which_modules_a_probe_pattern_may_name() -> None:
    assert could_match("pool/*@h=22*", "pool/float32/")
    assert not could_match("pool/*@h=22*", "view16/float32/")
    assert could_match("*@h=19*", "view16/float32/")
    assert not could_match("pool/float16/**", "pool/float32/")
    assert could_match("pool/float[13]2/x", "pool/float32/")
    assert not could_match("pool/float[!3]2/x", "pool/float32/")
    assert could_match("pool", "pool/float32/")  # a prefix of whole segments


def test_a_probe_pattern_plans_the_export_cases_as_helpers() -> None:
    """Planning only (no run): a probe id plans its module's export cases as helpers, not
    counted; a planned case's id plans no helper; a pattern no `auto` module could hold is
    no probe pattern."""
    manifest = load_manifest(MANIFEST)
    probe = plan(manifest, MANIFEST, ["CPUExecutionProvider"],
                 ["pool/float32/img20@h=19/b2", "typo/*"])
    assert [(j.name, [k.id for k in j.cases]) for j in probe.jobs] == [
        ("pool", ["pool/float32/img20/b2/cpu"])]
    assert probe.jobs[0].helpers == {"pool/float32/img20/b2/cpu"} and probe.total == 0
    assert probe.probe_patterns == ["pool/float32/img20@h=19/b2"]
    case = plan(manifest, MANIFEST, ["CPUExecutionProvider"], ["pool/float32/img20/b2/cpu"])
    assert not case.jobs[0].helpers and case.total == 1 and not case.probe_patterns
