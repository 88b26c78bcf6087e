"""No secret reaches code the gate runs, and every input is refused cleanly (issue 47).

Code the gate did not write (a repro script, a factory, a cached variant) runs with no
credential in its environment, only from the run's own out folder, never in a job that
runs none of the pull request's code; `bisect`, `init`, `check` and `ops` refuse bad input
in one located line (exit 2) and never write through a link; every report neutralises bidi
and line-separator characters; a non-finite expected value is compared exactly.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from parity_gate.cli import main

SECRETS = {"GITHUB_TOKEN": "ghp_" + "a" * 36, "PARITY_GATE_UPSTREAM_TOKEN": "b" * 40,
           "INPUT_GITHUB_TOKEN": "c" * 40, "INPUT_UPSTREAM_TOKEN": "d" * 40,
           "ACTIONS_RUNTIME_TOKEN": "e" * 40, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "f" * 40,
           "AWS_SECRET_ACCESS_KEY": "g" * 40, "AZURE_CLIENT_SECRET": "h" * 40,
           "HF_TOKEN": "i" * 40, "MY_SERVICE_API_KEY": "j" * 40}

# A repro script as an attacker would plant it: it records the environment it got and
# reproduces (exit 1), so a gate that ran it would take its word.
SPY = textwrap.dedent('''
    import json, os, sys
    from pathlib import Path
    Path(sys.argv[0]).with_name("seen.json").write_text(json.dumps(sorted(os.environ)))
    print("x: 1/1 out of tolerance; worst at (0,): eager np.float32(0.0) onnxruntime "
          "np.float32(1.0)")
    sys.exit(1)
''')


def _lead(node_repro: str) -> Any:
    return SimpleNamespace(localisation=SimpleNamespace(node_repro=node_repro))


@pytest.mark.process
def test_a_repro_runs_sandboxed_with_no_credential_and_only_from_the_out_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from parity_gate.github.run_drafts import _checked

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "ci" / "parity-reports"
    folder = out / "artifacts" / "mlp__float32" / "node_repro"
    folder.mkdir(parents=True)
    (folder / "repro.py").write_text(SPY)
    # recorded relative to where the run started; found below the out folder from anywhere
    monkeypatch.chdir(tmp_path)
    got, printed, why = _checked(_lead("parity-reports/artifacts/mlp__float32/node_repro"),
                                 True, out)
    assert got == folder and why == "" and "worst at (0,)" in printed
    seen = set(json.loads((folder / "seen.json").read_text()))
    assert not seen & set(SECRETS), seen & set(SECRETS)
    assert "PATH" in seen  # an ordinary environment otherwise

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "repro.py").write_text(SPY)
    for recorded in (str(outside), "../../elsewhere"):
        assert _checked(_lead(recorded), True, out)[0] is None
    assert not (outside / "seen.json").exists()
    link = out / "artifacts" / "linked"
    link.symlink_to(outside)  # a link in the artifact that points out of it
    assert _checked(_lead(str(link)), True, out)[0] is None
    assert not (outside / "seen.json").exists()


def test_the_trusted_job_of_a_workflow_run_pair_runs_no_repro(tmp_path: Path) -> None:
    """`results:` names an earlier job's (a fork's) artifact: drafts are written from it
    but nothing of it runs; a run's own post step verifies, in its own out folder."""
    from parity_gate.github.post import upstream_options

    inputs = {"upstream": "draft", "results": "artifact/results.json"}
    foreign = upstream_options(inputs, tmp_path / "out", tmp_path / "artifact/results.json",
                               None)
    assert foreign.verify is False and foreign.results_dir == tmp_path / "artifact"
    own = upstream_options({**inputs, "results": ""}, tmp_path / "out",
                           tmp_path / "out/results.json", None)
    assert own.verify is True and own.results_dir == tmp_path / "out"


def test_no_credential_of_any_kind_reaches_install_run_or_a_worker() -> None:
    from parity_gate.model.secrets import without_credentials

    env = {**SECRETS, "PATH": "/usr/bin", "HOME": "/root", "PYTHONPATH": "src",
           "CUDA_VISIBLE_DEVICES": "0", "PARITY_GATE_MASK_ENV": "DB_URL", "DB_URL": "x" * 20}
    assert set(without_credentials(env)) == {"PATH", "HOME", "PYTHONPATH",
                                             "CUDA_VISIBLE_DEVICES", "PARITY_GATE_MASK_ENV"}


# ------------------------------------------------------------------------------- bisect


@pytest.fixture
def bad_results(tmp_path: Path) -> Path:
    from parity_gate.model.keys import CaseKey
    from parity_gate.model.outcomes import Outcome
    from parity_gate.model.results import CaseResult, RunResult

    case = CaseResult(CaseKey("mlp", "float32", "rows", 1, "cpu"), Outcome.MISMATCH, "x")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RunResult(cases=[case], versions={"onnxscript": "0.6.1"})
                               .to_dict()))
    return path


@pytest.mark.parametrize(("argv", "message"), [
    (["--good", "onnxscript===abc"], "pins:1: onnxscript: 'abc' is not a version"),
    (["--good", "{evil}"], "versions: onnxscript: '0.7.2 --index-url http://x' is not a "
                           "version"),
    (["--good", "{lock}"], "uv.lock: onnxscript: '0.7.0; rm -rf /' is not a version"),
    (["--good", "onnxscript==0.6.0", "--cache-dir", "{file}"], "bisect: --cache-dir "),
    (["--good", "onnxscript==0.6.0", "--max-probes", "-3"], "bisect: --max-probes -3: "
                                                             "expected a positive"),
    (["--good", "onnxscript==0.6.0", "--probe-timeout", "-5"], "bisect: --probe-timeout -5.0"),
    (["--good", "onnxscript==0.6.0", "--max-minutes", "nan"], "bisect: --max-minutes nan"),
])
def test_bisect_refuses_bad_input_in_one_line(tmp_path: Path, bad_results: Path,
                                               argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    evil = tmp_path / "good.json"
    evil.write_text(json.dumps({"versions": {"onnxscript": "0.7.2 --index-url http://x"}}))
    lock = tmp_path / "uv.lock"
    lock.write_text('[[package]]\nname = "onnxscript"\nversion = "0.7.0; rm -rf /"\n')
    file = tmp_path / "a-file"
    file.write_text("")
    fill = {"{evil}": str(evil), "{lock}": str(lock), "{file}": str(file)}
    code = main(["bisect", "m.yml", "--bad", str(bad_results), "--out", str(tmp_path / "o"),
                 *[fill.get(a, a) for a in argv]])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err and "internal" not in err, err


def test_a_requirement_line_without_a_version_is_skipped_with_a_note(
        capsys: pytest.CaptureFixture[str]) -> None:
    from parity_gate.bisect.sets import parse_pins

    text = "git+https://github.com/microsoft/onnxscript#egg=onnxscript\n./vendor/pkg\n" \
           "onnx==1.17.0\n"
    assert parse_pins(text, "requirements.txt") == {"onnx": "1.17.0"}
    err = capsys.readouterr().err
    assert "requirements.txt:1:" in err and "requirements.txt:2:" in err and "^" not in err


def test_bisect_writes_no_file_through_a_link(tmp_path: Path, bad_results: Path) -> None:
    from parity_gate.bisect.command import write

    victim = tmp_path / "victim.md"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "bisect.md").symlink_to(victim)
    with pytest.raises(Exception, match="link"):
        write([], out, None)
    assert victim.read_text() == "precious"
    linked = tmp_path / "linked-results.json"  # --bad given as a link to a results.json
    linked.symlink_to(bad_results)
    before = bad_results.read_bytes()
    (tmp_path / "out2").mkdir()
    write([], tmp_path / "out2", linked)
    assert bad_results.read_bytes() == before and linked.is_symlink()


# -------------------------------------------------------------------------------- init


MODELS = textwrap.dedent('''
    import sys
    import torch


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)


    def yes():
        return Net()


    def null():
        return Net()


    def leaves():
        sys.exit(0)


    class Odd(BaseException):
        pass


    def odd():
        raise Odd("not an Exception")


    def interrupted():
        raise KeyboardInterrupt
''')


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    (root / "models").mkdir(parents=True)
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "initnets.py").write_text(MODELS)
    monkeypatch.chdir(root)
    sys.modules.pop("models.initnets", None)
    sys.modules.pop("models", None)
    return root


def _init(root: Path, *args: str) -> int:
    return main(["init", "--dir", str(root), *args])


@pytest.mark.parametrize(("factory", "said"), [
    ("models.initnets:leaves", "calling leaves() exited with status 0"),
    ("models.initnets:odd", "calling odd() raised Odd: not an Exception"),
    ("models.initnets:interrupted", "calling interrupted() was interrupted"),
])
def test_init_reports_a_factory_that_exits_or_raises_anything(
        repo: Path, factory: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = _init(repo, "--factory", factory, "--shape", "x=1x4")
    err = capsys.readouterr().err.strip()
    assert code == 2 and said in err and "\n" not in err and "Traceback" not in err, err
    assert not (repo / "parity.yml").exists()


@pytest.mark.parametrize("shape", ["x=1x1000000x1000000", "x=1x99999999999999999999999",
                                   "x=0x4"])
def test_init_refuses_an_impossible_shape_in_one_line(
        repo: Path, shape: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = _init(repo, "--factory", "models.initnets:yes", "--shape", shape)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--shape" in err and "internal" not in err and "\n" not in err, err


def test_init_quotes_names_yaml_would_misread(repo: Path) -> None:
    assert _init(repo, "--factory", "models.initnets:yes", "--factory",
                 "models.initnets:null", "--shape", "x=1x4", "--no-workflow") == 0
    from parity_gate.manifest.load import load_manifest

    names = [m.name for m in load_manifest(repo / "parity.yml").modules]
    assert names == ["yes", "null"]


def test_init_never_writes_through_a_link(repo: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    args = ["--factory", "models.initnets:yes", "--shape", "x=1x4"]
    # a dangling link at parity.yml: refused (it exists), nothing made outside
    (repo / "parity.yml").symlink_to(outside / "made.yml")
    assert _init(repo, *args, "--no-workflow") == 2
    assert not (outside / "made.yml").exists()
    # --force: the link itself is replaced, its target untouched, and it says so
    victim = outside / "victim.yml"
    victim.write_text("precious")
    (repo / "parity.yml").unlink()
    (repo / "parity.yml").symlink_to(victim)
    assert _init(repo, *args, "--no-workflow", "--force") == 0
    assert victim.read_text() == "precious" and not (repo / "parity.yml").is_symlink()
    assert "was a symbolic link" in capsys.readouterr().err
    # .github/workflows as a link out of the repository: refused
    (repo / ".github").mkdir()
    (repo / ".github" / "workflows").symlink_to(outside)
    assert _init(repo, *args, "--force") == 2
    assert not (outside / "parity.yml").exists()


# ------------------------------------------------------------------------------- check


@pytest.mark.process  # check imports the factories in a process of their own
def test_check_reports_a_factory_that_exits(repo: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "parity.yml").write_text(textwrap.dedent('''
        version: 1
        python_path: [.]
        fixtures:
          rows:
            kind: random
            inputs:
              x: {shape: [batch, 4]}
        modules:
          - name: leaves
            factory: models.initnets:leaves
            inputs: [{name: x, dynamic: {0: batch}}]
            fixtures: [rows]
            shapes: auto
    '''))
    code = main(["check", str(repo / "parity.yml"), "--explain"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "exited with status 0" in err and "\n" not in err, err


# --------------------------------------------------------------------------------- ops


def test_ops_caches_refuse_a_file_where_their_folder_belongs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from parity_gate.errors import UserError
    from parity_gate.ops import opinfo

    file = tmp_path / "cache-file"
    file.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(file))
    with pytest.raises(UserError, match=r"XDG_CACHE_HOME: .* is a file"):
        opinfo.cache_path("2.13.0")


def test_a_cached_variant_holding_code_is_refused(tmp_path: Path) -> None:
    import base64
    import gzip

    from parity_gate.ops import opinfo

    arg = {"name": "t0", "shape": [1], "dtype": "float32", "stored": "float32",
           "sample": base64.b64encode(np.zeros(1, np.float32).tobytes()).decode()}
    good = {"id": f"{opinfo.PREFIX}abs.0", "family": "abs", "call": "torch.abs(t0)",
            "dtypes": ["float32"], "classes": ["normal"], "ranged": False, "shape_only": [],
            "args": [arg]}
    for call, ok in (("torch.abs(t0)", True), ("t0.sum(dim=(0,), keepdim=True)", True),
                     ("__import__('os').system('touch pwned')", False),
                     ("torch.load('x.pt')", False), ("t0.__class__", False),
                     ("torch.abs(t0).numpy().tofile('x')", False)):
        path = tmp_path / "variants.json.gz"
        doc = {"torch": "v", "format": opinfo.FORMAT, "ops": None, "dropped": {},
               "variants": [{**good, "call": call}]}
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
        data, why = opinfo.read(path, "v")
        assert (data is not None) is ok, (call, why)
        if not ok:
            assert "data only" in why


# ------------------------------------------------------------------------------ reports


BIDI = "out\u202eput\u2028next\u2066x\u2069"


def test_every_report_format_neutralises_bidi_and_line_separators(tmp_path: Path) -> None:
    from parity_gate.github.commands import Annotation
    from parity_gate.model.keys import CaseKey
    from parity_gate.model.outcomes import Outcome
    from parity_gate.model.results import CaseResult, RunResult
    from parity_gate.report import html, junit
    from parity_gate.report.write import run_json

    case = CaseResult(CaseKey("mlp", "float32", "rows", 1, "cpu"), Outcome.MISMATCH,
                      f"output {BIDI} differs", f"detail {BIDI}")
    run = RunResult(cases=[case], versions={"torch": "2.13.0"})
    for text in (junit.to_xml(run).decode(), html.render(run), run_json(run).decode(),
                 Annotation("error", f"t {BIDI}", f"m {BIDI}").render()):
        decoded = json.loads(text) if text.startswith("{") else text
        flat = json.dumps(decoded, ensure_ascii=False) if isinstance(decoded, dict) else text
        assert not any(c in flat for c in "\u202e\u2028\u2029\u2066\u2069"), flat[:200]


# ----------------------------------------------------------------- non-finite expected


@pytest.mark.process
def test_an_infinite_expected_value_is_never_within_tolerance(tmp_path: Path) -> None:
    """inf against FLT_MAX: the bound atol + rtol·|inf| is infinite, so a plain
    `diff <= bound` passes it. The gate's rule, localisation's and the scripts' do not."""
    import subprocess

    from parity_gate.compare.tolerance import CLOSE_RULE, close
    from parity_gate.localise import repro

    big = np.finfo(np.float32).max
    e = np.array([np.inf, -np.inf, np.nan, 1.0, np.inf], np.float32)
    o = np.array([big, -big, np.nan, 1.0 + 1e-7, np.inf], np.float32)
    assert close(e, o, 1e-5, 1e-3).tolist() == [False, False, True, True, True]
    assert CLOSE_RULE in repro.NODE_SCRIPT.format(
        case_id="c", aten="a", scope="s", provider="p", atol=1e-5, rtol=1e-3, version="v",
        withheld="", eager="    return 0", recorded="", CLOSE_RULE=CLOSE_RULE)
    script = tmp_path / "rule.py"
    script.write_text("import numpy as np, sys\n"
                      f"e = np.array([np.inf]); o = np.array([{float(big)!r}])\n"
                      "atol, rtol = 1e-5, 1e-3\n"
                      f"sys.exit(0 if ({CLOSE_RULE}).all() else 1)\n")
    assert subprocess.run([sys.executable, str(script)], check=False).returncode == 1
    assert os.path.exists(script)
