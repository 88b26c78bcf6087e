"""A team adopts the gate: `parity-gate init` on its own modules, then the workflow it writes
(the README's) run step by step through the Action's entrypoint, as pasted, against a local
GitHub server, on a repository that is a Python package and on one that is not."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml
from github_server import FakeGitHub

import parity_gate
from parity_gate.github.project import auto_install, is_package
from parity_gate.scaffold import workflow_text

pytestmark = pytest.mark.process

TOKEN = "ghs_REPOtoken0123456789abcdefABCDEFxyz"
REPO = "acme/models"
ROOT = Path(__file__).resolve().parents[1]

NETS = '''\
import torch
import torch.nn.functional as F
from torch import nn


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        h = self.body(x)
        h = F.avg_pool2d(h, 2, divisor_override=DIVISOR)
        return self.head(h.mean((2, 3)))


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.out = nn.Linear(16, 5)

    def forward(self, ids, mask=None):
        return self.out(self.emb(ids))


class Scorer(nn.Module):
    example_input_array = (torch.zeros(1, 7), torch.zeros(1, 3))

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(7, 4)
        self.b = nn.Linear(3, 4)

    def forward(self, feats, extra):
        return {"score": (self.a(feats) + self.b(extra)).sum(-1), "emb": self.a(feats)}


def cnn():
    torch.manual_seed(0)
    return CNN()


def tagger():
    return Tagger()


def scorer():
    return Scorer()


def broken():
    raise RuntimeError("no weights here")
'''


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parity_gate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def team_repo(root: Path, *, package: bool, divisor: str = "None") -> Path:
    """A team's repository: `acme_models/nets.py` in a package (pyproject.toml with a
    [project] table) or `models/nets.py` beside a requirements.txt and a tool-only
    pyproject.toml (no package: `pip install -e .` fails there)."""
    pkg = root / ("acme_models" if package else "models")
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(NETS.replace("DIVISOR", divisor))
    if package:
        (root / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = '
            '"setuptools.build_meta"\n\n[project]\nname = "acme-models"\nversion = "0.1"\n'
            'dependencies = ["numpy"]\n\n[tool.setuptools]\npackages = ["acme_models"]\n')
    else:
        (root / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
        (root / "requirements.txt").write_text("numpy\n")
    return root


def test_init_proposes_inputs_that_check_accepts_and_that_pass(tmp_path: Path) -> None:
    ws = team_repo(tmp_path / "ws", package=False)
    got = cli("init", "--factory", "models.nets:cnn", "--factory", "models.nets:tagger",
              "--factory", "models.nets:scorer", cwd=ws)
    assert got.returncode == 0, got.stderr
    text = (ws / "parity.yml").read_text()
    # Shapes from the first layer (Conv2d(3, …), Embedding(50, …)) and from the module's
    # own example; forward()'s defaulted parameter is named, not passed.
    assert "x: {shape: [batch, 3, 32, 32], distribution: normal}" in text
    assert "ids: {shape: [batch, 16], dtype: int64, high: 50}" in text
    assert "feats: {shape: [batch, 7]" in text and "extra: {shape: [batch, 3]" in text
    assert "# not passed (forward() defaults): mask" in text
    assert (ws / ".github/workflows/parity.yml").read_text() == workflow_text()
    assert cli("check", cwd=ws).returncode == 0
    run = cli("run", "--quiet", cwd=ws)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((ws / "parity-reports/results.json").read_text())
    ran = [c for c in results["cases"] if c["outcome"] != "skipped"]
    assert {c["id"].split("/")[0] for c in ran} == {"cnn", "tagger", "scorer"}
    assert all(c["outcome"] == "pass" for c in ran)
    # Again: refused, the files untouched, unless --force.
    again = cli("init", "--factory", "models.nets:cnn", cwd=ws)
    assert again.returncode == 2 and "exists (expected --force" in again.stderr
    assert (ws / "parity.yml").read_text() == text


@pytest.mark.parametrize(("args", "said"), [
    (["--factory", "models.nets"], "--factory #1 'models.nets': expected package.module:callable"),
    (["--factory", "models.gone:cnn"], "--factory #1 'models.gone:cnn': cannot import "
                                       "'models.gone'"),
    (["--factory", "models.nets:nope"], "--factory #1 'models.nets:nope': models.nets has no "
                                        "'nope'"),
    (["--factory", "models.nets:broken"], "calling broken() raised RuntimeError: no weights"),
    (["--factory", "models.nets:cnn", "--shape", "x=1x3x7"], "forward(x=batchx3x7) raised"),
    (["--factory", "models.nets:cnn", "--shape", "x=1,3"], "--shape 'x=1,3': expected NAME="),
])
def test_init_says_what_is_wrong_in_one_line(tmp_path: Path, args: list[str], said: str) -> None:
    ws = team_repo(tmp_path / "ws", package=False)
    got = cli("init", *args, cwd=ws)
    assert got.returncode == 2, got.stdout + got.stderr
    assert len(got.stderr.strip().splitlines()) == 1 and said in got.stderr, got.stderr
    assert "Traceback" not in got.stderr and not (ws / "parity.yml").exists()


# ---------------------------------------------------------------- the workflow, as pasted


def readme_workflow() -> str:
    """The complete workflow README.md shows (the yaml block with `on:` and the action)."""
    blocks = re.findall(r"```ya?ml\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    found = [b for b in blocks if "parity-gate/parity-gate@" in b and "\non:" in b]
    assert found, "README.md shows no complete workflow (a yaml block with on: and the action)"
    return found[0]


def evaluate(value: Any, ctx: dict[str, str]) -> str:
    """`${{ … }}` as Actions evaluates the few forms a workflow here uses: context names,
    string literals, `==`, `&&`, `||`."""
    def one(m: re.Match[str]) -> str:
        expr = re.sub(r"'[^']*'|[A-Za-z_][\w.-]*",
                      lambda t: t.group(0) if t.group(0).startswith("'")
                      else repr(ctx[t.group(0)]), m.group(1))
        result = eval(expr.replace("&&", " and ").replace("||", " or "), {"__builtins__": {}})
        return str(result)
    return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", one, str(value))


def isolated_python(tmp: Path) -> Path:
    """A throwaway venv that sees this environment's packages (and this checkout's gate)
    but installs into itself, so `install: auto` never touches the test environment."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    gate_root = Path(parity_gate.__file__).resolve().parents[1]
    (Path(site.stdout.strip()) / "parent-env.pth").write_text(
        f"{gate_root}\n{sysconfig.get_paths()['purelib']}\n")
    return py


def run_workflow(text: str, ws: Path, tmp: Path, gh: FakeGitHub, py: Path,
                 event: str) -> tuple[int, dict[str, str], str]:
    """The workflow's parity-gate step through action.yml's `container: none` path (the
    entrypoint, then the post step), with its `with:` evaluated; its upload step's path."""
    wf = yaml.safe_load(text)
    on = wf.get("on", wf.get(True))
    assert "pull_request" in on and wf["permissions"] == {"contents": "read",
                                                          "pull-requests": "write"}
    steps = wf["jobs"]["parity"]["steps"]
    gate = next(s for s in steps if str(s.get("uses", "")).startswith("parity-gate/parity-gate@"))
    ref = gate["uses"].split("@", 1)[1]
    assert re.fullmatch(r"v\d+(\.\d+\.\d+)?|[0-9a-f]{40}", ref), ref  # a real pin
    assert any("actions/cache@" in str(s.get("uses")) and s["with"]["path"] == ".parity-cache"
               for s in steps)
    temp = tmp / f"runner-temp-{ws.name}-{event}"
    temp.mkdir()
    payload = {"pull_request": {"number": 7, "head": {"sha": "b" * 40, "ref": "feat"},
                                "base": {"repo": {"full_name": REPO}}}} \
        if event == "pull_request" else {"ref": "refs/heads/main"}
    (temp / "event.json").write_text(json.dumps(payload))
    ctx = {"github.token": TOKEN, "github.event_name": event, "github.run_id": "42",
           "runner.os": "Linux"}
    inputs = {k: evaluate(v, ctx) for k, v in (gate.get("with") or {}).items()}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "INPUT_", "PYTHON"))}
    env.update(GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(ws), RUNNER_TEMP=str(temp),
               GITHUB_REPOSITORY=REPO, GITHUB_EVENT_NAME=event,
               GITHUB_EVENT_PATH=str(temp / "event.json"), GITHUB_API_URL=gh.url,
               GITHUB_SERVER_URL="https://github.com", GITHUB_RUN_ID="42",
               GITHUB_OUTPUT=str(temp / "output"), GITHUB_STEP_SUMMARY=str(temp / "summary"),
               PARITY_GATE_CACHE_DIR="")
    env.pop("PARITY_GATE_CACHE_DIR")
    env.update({f"INPUT_{k.upper()}": v for k, v in inputs.items()})
    secrets = ("INPUT_GITHUB_TOKEN", "INPUT_UPSTREAM_TOKEN", "GITHUB_TOKEN")
    gate_env = {k: v for k, v in env.items() if k not in secrets}
    main = subprocess.run([str(py), "-m", "parity_gate.github.action"], env=gate_env, cwd=ws,
                          capture_output=True, text=True, timeout=600)
    log = main.stdout + main.stderr
    if inputs.get("comment", "off") != "off" or inputs.get("upstream", "off") != "off":
        post = subprocess.run([str(py), "-I", "-m", "parity_gate.github.action", "post"],
                              env=env, cwd=temp, capture_output=True, text=True, timeout=300)
        assert post.returncode == 0, post.stdout + post.stderr
        log += post.stdout
    found = re.findall(r"^(\w+)<<(\S+)\n(.*?)\n\2$", (temp / "output").read_text(),
                       re.MULTILINE | re.DOTALL)
    outputs = {name: value for name, _, value in found}
    upload = next(s for s in steps if "upload-artifact@" in str(s.get("uses")))
    assert upload.get("if") == "always()"
    path = evaluate(upload["with"]["path"], {"steps.parity.outputs.out_dir":
                                             outputs.get("out_dir", "")})
    assert (Path(path) / "results.json").is_file(), (path, log)  # what the artifact uploads
    return main.returncode, outputs, log


def test_the_readme_shows_exactly_the_workflow_init_writes() -> None:
    assert readme_workflow().strip() == workflow_text().strip()


def test_the_workflow_as_pasted_runs_on_a_package_and_on_a_plain_repository(
        tmp_path: Path) -> None:
    """The workflow init writes, which the README shows word for word (the test above):
    run once, since both are the one text."""
    text = workflow_text()
    py = isolated_python(tmp_path)
    with FakeGitHub(token=TOKEN) as gh:
        # A plain repository (scripts, requirements.txt, a tool-only pyproject.toml): green.
        plain = team_repo(tmp_path / "plain", package=False)
        assert cli("init", "--factory", "models.nets:cnn", "--factory", "models.nets:tagger",
                   cwd=plain).returncode == 0
        rc, out, log = run_workflow(text, plain, tmp_path, gh, py, "pull_request")
        assert rc == 0 and out["result"] == "pass", log
        assert "install: auto: installing requirements.txt" in log
        # A package with a planted defect: red, and the comment leads with the culprit.
        pkg = team_repo(tmp_path / "pkg", package=True, divisor="3")
        assert cli("init", "--factory", "acme_models.nets:cnn", "--no-workflow",
                   cwd=pkg).returncode == 0
        rc, out, log = run_workflow(text, pkg, tmp_path, gh, py, "pull_request")
        assert rc == 1 and out["result"] == "fail", log
        assert "install: auto: installing the package" in log
        bodies = [c["body"] for c in gh.comments.get((REPO, 7), [])]
        assert len(bodies) == 1, "expected one sticky pull-request comment"
        lines = [x for x in bodies[-1].splitlines() if x.strip() and not x.startswith("<!--")]
        assert lines[2] == "### Why it blocks", lines[:4]
        line = 1 + NETS.splitlines().index(
            "        h = F.avg_pool2d(h, 2, divisor_override=DIVISOR)")
        for part in (f"`acme_models/nets.py:{line}`", "`aten.avg_pool2d.default`",
                     "owner: **translation**"):
            assert part in lines[3], lines[3]
        # The culprit annotated on its own line of the diff, the module on the manifest.
        assert f"::error file=acme_models/nets.py,line={line}," in log, log[-3000:]
        # A push to the default branch: the gate runs, no comment is attempted.
        before = len(bodies)
        rc, out, log = run_workflow(text, pkg, tmp_path, gh, py, "push")
        assert rc == 1 and "comment: not posted" not in log
        assert len(gh.comments.get((REPO, 7), [])) == before
        assert gh.errors == [], gh.errors


def test_install_auto_reads_what_the_repository_is(tmp_path: Path) -> None:
    plain = team_repo(tmp_path / "plain", package=False)
    pkg = team_repo(tmp_path / "pkg", package=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not is_package(plain) and is_package(pkg)
    assert auto_install(plain, "py").command[-2:] == ["-r", "requirements.txt"]
    assert auto_install(pkg, "py").command[-2:] == ["-e", "."]
    assert auto_install(empty, "py").command == []
