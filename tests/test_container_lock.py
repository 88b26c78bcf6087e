"""The images' locks agree with their pins, and the Dockerfile installs nothing but them.

docker/NAME.in holds each environment's direct pins, docker/NAME.lock what
`docker/lock.py lock` resolved from them (every package, with hashes). These
tests fail when the two drift apart (an .in edited without relocking), when a
lock stops satisfying pyproject.toml's requirements or the Dockerfile's base
images, or when the Dockerfile installs a package from anywhere but a lock. The
real build is .ci/container-smoke.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")


def _load_lock_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docker_lock", REPO / "docker" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docker_lock"] = module
    spec.loader.exec_module(module)
    return module


lock = _load_lock_tool()
# Each image's base and the CPython / glibc that base has (what its lock is resolved for).
BASES = {"python:3.11-slim-bookworm": ("3.11", "2.36"),
         "nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04": ("3.12", "2.39")}


def stages() -> dict[str, str]:
    """The Dockerfile's stages by name, each with its text."""
    parts = re.split(r"^FROM (\S+) AS ([\w-]+)$", DOCKERFILE, flags=re.M)
    return {parts[i + 1]: f"FROM {parts[i]}\n{parts[i + 2]}" for i in range(1, len(parts), 3)}


def arg_default(name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S*)$", DOCKERFILE, re.M)
    assert m, name
    return m.group(1)


@pytest.mark.parametrize("name", lock.NAMES)
def test_lock_is_generated_from_its_in_file(name: str) -> None:
    spec = lock.read_spec(name)
    header, entries = lock.read_lock(name)
    text = (REPO / "docker" / f"{name}.in").read_text(encoding="utf-8")
    assert spec.digest == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert header == lock.HEADER.format(name=name, digest=spec.digest), (
        f"docker/{name}.in changed since docker/{name}.lock was generated: "
        "run python3 docker/lock.py lock")
    locked = {e.name: e for e in entries}
    assert len(locked) == len(entries), "a package is locked twice"
    body = [line for line in (REPO / "docker" / f"{name}.lock").read_text().splitlines()
            if re.match(r"[A-Za-z0-9]", line)]
    assert len(body) == len(entries), "a lock line is not `name==version \\` + one hash"
    for pinned, version in spec.pins.items():
        assert pinned in locked and locked[pinned].version == version, (name, pinned)
        assert locked[pinned].via == ()
    for e in entries:
        if e.name not in spec.pins:  # pulled in: by locked packages only
            assert e.via and set(e.via) <= set(locked), (name, e)


def test_locks_satisfy_pyproject_and_the_bases() -> None:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    for name, ort in (("cpu", "onnxruntime"), ("gpu", "onnxruntime-gpu")):
        locked = {e.name: Version(e.version) for e in lock.read_lock(name)[1]}
        for text in doc["project"]["dependencies"]:
            req = Requirement(text)
            got = locked[ort if req.name == "onnxruntime" else lock.canonical(req.name)]
            assert req.specifier.contains(got, prereleases=True), (name, text, got)
    build = {e.name: Version(e.version) for e in lock.read_lock("build")[1]}
    for text in doc["build-system"]["requires"]:
        req = Requirement(text)
        assert req.specifier.contains(build[lock.canonical(req.name)]), text
    # The lock of each stage is for its base image's Python and glibc.
    for names, base in ((("build", "cpu"), arg_default("PYTHON_IMAGE")),
                        (("gpu",), arg_default("CUDA_IMAGE"))):
        for name in names:
            spec = lock.read_spec(name)
            assert (spec.python, spec.glibc) == BASES[base.split("@")[0]], (name, base)


def test_cpu_lock_is_cpu_torch_and_gpu_lock_has_no_cpu_onnxruntime() -> None:
    cpu = {e.name: e.version for e in lock.read_lock("cpu")[1]}
    gpu = {e.name: e.version for e in lock.read_lock("gpu")[1]}
    assert cpu["torch"].endswith("+cpu") and "onnxruntime-gpu" not in cpu
    assert "onnxruntime" not in gpu and "onnxruntime-gpu" in gpu
    assert any(n.startswith("nvidia-") for n in gpu) and not any(n.startswith("nvidia-")
                                                                  for n in cpu)
    assert "pip" in cpu and "pip" in gpu  # the venv's own pip is locked too


def test_dockerfile_installs_only_from_the_locks() -> None:
    assert not re.search(r"^#\s*syntax\s*=", DOCKERFILE, re.M | re.I)
    by_stage = stages()
    assert {"wheelhouse", "wheel", "cpu", "gpu-python", "gpu"} <= set(by_stage)
    for stage, env in (("wheel", "build"), ("cpu", "cpu"), ("gpu", "gpu")):
        text = by_stage[stage]
        assert f"python /ctx/docker/lock.py install {env}" in text, stage
        for arg in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "WHEELHOUSE"):
            assert re.search(rf"^ARG {arg}=$", text, re.M), (stage, arg)
        assert "--mount=type=secret,id=pip_conf" in text
        assert "--mount=type=secret,id=netrc,target=/root/.netrc" in text
    for target in ("cpu", "gpu"):
        text = by_stage[target]
        assert re.search(r"^ARG TORCH_INDEX=", text, re.M)
        assert f"lock.py verify {target} --also parity-gate" in text
    assert "assert 'CUDAExecutionProvider' in o.get_available_providers()" in by_stage["gpu"]
    # Any other pip install is the gate's own wheel, with no dependencies and no index.
    code = "\n".join(line for line in DOCKERFILE.splitlines() if not line.startswith("#"))
    for m in re.finditer(r"pip install ([^\n&]*)", code):
        assert "--no-deps --no-index /wheels/parity_gate-*.whl" in m.group(1), m.group(0)
    assert "--no-build-isolation --no-index" in by_stage["wheel"]
    # No build arg that looks like a credential: those go in as secrets.
    assert not re.search(r"^ARG \w*(TOKEN|PASSWORD|SECRET|NETRC)", DOCKERFILE, re.M)


def test_install_env_offline_mirror_and_secret(tmp_path: Path) -> None:
    secret = tmp_path / "pip_conf"
    base = {"PATH": "/usr/bin", "PIP_INDEX_URL": "", "PIP_EXTRA_INDEX_URL": "",
            "PIP_TRUSTED_HOST": "", "WHEELHOUSE": "", "TORCH_INDEX": "https://torch.example/cpu"}
    flags, env = lock.install_env(dict(base), tmp_path / "wh", secret)
    # Declared-but-empty build args are dropped, not read by pip as "no index".
    assert flags == [] and "PIP_INDEX_URL" not in env and "PIP_TRUSTED_HOST" not in env
    assert env["PIP_EXTRA_INDEX_URL"] == "https://torch.example/cpu"
    assert "PIP_CONFIG_FILE" not in env
    secret.write_text("[global]\nindex-url = https://u:p@mirror.example/simple\n")
    mirror = {**base, "PIP_INDEX_URL": "https://mirror.example/simple", "TORCH_INDEX": "",
              "PIP_EXTRA_INDEX_URL": "https://a.example/simple", "PIP_TRUSTED_HOST": "a.example"}
    flags, env = lock.install_env(mirror, tmp_path / "wh", secret)
    assert flags == [] and env["PIP_INDEX_URL"] == "https://mirror.example/simple"
    assert env["PIP_EXTRA_INDEX_URL"] == "https://a.example/simple"
    assert env["PIP_TRUSTED_HOST"] == "a.example" and env["PIP_CONFIG_FILE"] == str(secret)
    flags, env = lock.install_env({**mirror, "WHEELHOUSE": "wheelhouse/cpu"}, tmp_path / "wh",
                                  secret)
    assert flags == ["--no-index", "--find-links", str(tmp_path / "wh")]


def test_platform_args_cover_the_base_glibc() -> None:
    args = lock.read_spec("gpu").platform_args
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert "manylinux_2_39_x86_64" in platforms and "manylinux_2_40_x86_64" not in platforms
    assert "manylinux2014_x86_64" in platforms and args[args.index("--abi") + 1] == "cp312"


def test_content_tag_covers_what_the_build_context_admits() -> None:
    """action.yml hashes the files the image is made of: everything .dockerignore admits
    except the wheelhouse (whose wheels the locks' hashes pin)."""
    admitted = {line[1:] for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.startswith("!")}
    step = (REPO / "action.yml").read_text(encoding="utf-8")
    m = re.search(r"find (Dockerfile [^-]*?) -type f", step)
    assert m, "the content tag's find"
    assert set(m.group(1).split()) == (admitted - {"wheelhouse"}) | {"Dockerfile",
                                                                     ".dockerignore"}
