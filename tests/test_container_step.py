"""action.yml's docker build/pull: build_args, secrets, and a clear error when Docker fails.

action.yml's own script runs as the runner runs it, with a stub `docker` that logs
its arguments and plays a given engine (its version, buildx or not, a build or a
pull that fails); the real engine is .ci/container-smoke.
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from test_action import parse_annotations, parse_outputs, runner_env

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.process,
              pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")]

STUB = r'''#!/usr/bin/env bash
(IFS=$'\x1f'; echo "docker${IFS}DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-}${IFS}$*") >> "{log}"
case "$1 $2 $3" in
  "version --format {{.Server.Version}}") {engine} ;;
  "version --format {{.Client.Version}}") echo "{client}" ;;
esac
case "$1 $2" in
  "buildx version") exit {buildx} ;;
  "image inspect") exit 1 ;;
esac
case "$1" in
  build) echo "#9 [cpu 2/3] RUN python /ctx/docker/lock.py install cpu"
         [[ {build} == 0 ]] || echo "ERROR: failed to solve: process did not complete: exit code: 1"
         exit {build} ;;
  pull) [[ {pull} == 0 ]] || echo "Error response from daemon: manifest unknown"; exit {pull} ;;
esac
exit 0
'''


def step(tmp: Path, *, engine: bool = True, client: str = "20.10.24", buildx: bool = False,
         build: int = 0, pull: int = 0, extra_env: dict[str, str] | None = None,
         **inputs: str) -> SimpleNamespace:
    bin_dir, log = tmp / "bin", tmp / "calls.log"
    bin_dir.mkdir(parents=True, exist_ok=True)
    stub = bin_dir / "docker"
    stub.write_text(STUB.replace("{log}", str(log)).replace(
        "{engine}", "echo 20.10.24" if engine else
        'echo "Cannot connect to the Docker daemon at unix:///x.sock" >&2; exit 1').replace(
        "{client}", client).replace("{buildx}", "0" if buildx else "1").replace(
        "{build}", str(build)).replace("{pull}", str(pull)), encoding="utf-8")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    workspace = tmp / "ws"
    workspace.mkdir(exist_ok=True)
    spec = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    defaults = {name: str(i.get("default", "")) for name, i in spec["inputs"].items()}
    env = runner_env(tmp, workspace, **{**defaults, "gpu": "false", **inputs})
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", GITHUB_ACTION_PATH=str(REPO), **(extra_env or {}))
    script = tmp / "step.sh"
    script.write_text(spec["runs"]["steps"][0]["run"], encoding="utf-8")
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          env=env, capture_output=True, text=True, timeout=60)
    calls = [c.split("\x1f") for c in log.read_text().splitlines()] if log.exists() else []
    return SimpleNamespace(proc=proc, env=env, calls=calls, notes=parse_annotations(proc.stdout),
                           summary=Path(env["GITHUB_STEP_SUMMARY"]).read_text(),
                           outputs=parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text()))


def calls_of(s: SimpleNamespace, command: str) -> list[list[str]]:
    return [c[2:] for c in s.calls if c[2] == command]


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def assert_docker_error(s: SimpleNamespace, title: str, needle: str) -> None:
    assert s.proc.returncode == 3, s.proc.stderr
    assert s.outputs == {"result": "error"}
    (note,) = [n for n in s.notes if n["level"] == "error"]
    assert note["title"] == f"parity-gate: {title}" and needle in note["message"], note
    assert f"## ⚠️ parity-gate: {title}" in s.summary and needle in s.summary
    lines = s.proc.stdout.splitlines()
    assert sum(x.startswith("::group::") for x in lines) == lines.count("::endgroup::")
    assert not calls_of(s, "run")


def test_build_args_reach_the_build_and_the_content_tag(tmp_path: Path) -> None:
    netrc, conf = tmp_path / "netrc", tmp_path / "pip.conf"
    netrc.write_text("machine mirror.example login u password s3cret\n")
    conf.write_text("[global]\nindex-url = https://u:s3cret@mirror.example/simple\n")
    args = ("PIP_INDEX_URL=https://mirror.example/simple\n  TORCH_INDEX=\n\n"
            "PIP_EXTRA_INDEX_URL=a b\n")
    s = step(tmp_path / "a", build_args=args,
             extra_env={"NETRC": str(netrc), "PIP_CONFIG_FILE": str(conf)})
    assert s.proc.returncode == 0, s.proc.stdout + s.proc.stderr
    (build,) = calls_of(s, "build")
    assert flag_values(build, "--build-arg") == [
        "PIP_INDEX_URL=https://mirror.example/simple", "TORCH_INDEX=", "PIP_EXTRA_INDEX_URL=a b"]
    assert flag_values(build, "--network") == ["host"]
    assert flag_values(build, "--secret") == [f"id=pip_conf,src={conf}", f"id=netrc,src={netrc}"]
    assert not any("s3cret" in a for c in s.calls for a in c)
    assert build[-1] == str(REPO)
    assert next(c for c in s.calls if c[2] == "build")[1] == "DOCKER_BUILDKIT=1"
    tag = flag_values(build, "--tag")[0]
    plain = step(tmp_path / "b")
    (other,) = calls_of(plain, "build")
    assert "--build-arg" not in other and "--secret" not in other
    assert re.fullmatch(r"parity-gate-action:cpu-[0-9a-f]{16}", tag)
    assert flag_values(other, "--tag")[0] != tag
    assert calls_of(s, "run")[0][-1] == tag


def test_a_bad_build_args_line_is_an_input_error(tmp_path: Path) -> None:
    s = step(tmp_path, build_args="PIP_INDEX_URL=https://x.example\n--network=none")
    assert s.proc.returncode == 2 and s.outputs == {"result": "error"}
    assert s.proc.stdout.strip() == ("::error title=parity-gate%3A invalid input::build_args: "
                                     "expected one NAME=value a line, got '--network'")
    assert not s.calls


def test_a_failed_build_is_annotated_summarised_and_its_group_closed(tmp_path: Path) -> None:
    s = step(tmp_path, build=1)
    assert_docker_error(s, "docker build failed", "ERROR: failed to solve")
    assert "RUN python /ctx/docker/lock.py install cpu" in s.summary  # the log's tail


def test_a_failed_pull_is_annotated(tmp_path: Path) -> None:
    s = step(tmp_path, pull=1, image="ghcr.io/acme/gate:{target}", build_args="X=1")
    assert_docker_error(s, "docker pull failed", "ghcr.io/acme/gate:cpu")
    assert "manifest unknown" in s.summary
    assert any(n["title"] == "parity-gate: build_args ignored" for n in s.notes)


def test_an_unreachable_engine_is_annotated(tmp_path: Path) -> None:
    s = step(tmp_path, engine=False)
    assert_docker_error(s, "Docker engine unreachable", "Cannot connect to the Docker daemon")
    assert not calls_of(s, "build")


@pytest.mark.parametrize(("client", "buildx", "builds"), [
    ("28.2.2", False, False),   # Docker 23+: BuildKit only through buildx
    ("28.2.2", True, True),
    ("20.10.24+dfsg1", False, True),  # before 23: BuildKit built into `docker build`
])
def test_buildx_is_needed_from_docker_23(tmp_path: Path, client: str, buildx: bool,
                                         builds: bool) -> None:
    s = step(tmp_path, client=client, buildx=buildx)
    if builds:
        assert s.proc.returncode == 0 and len(calls_of(s, "build")) == 1, s.proc.stdout
    else:
        assert_docker_error(s, "docker buildx missing", "buildx plugin")
        assert not calls_of(s, "build")
