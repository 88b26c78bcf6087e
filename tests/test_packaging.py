"""The package as a user gets it: built from the tracked files (sdist, then the wheel from the
sdist, as `python -m build` does), importable where POSIX-only modules are missing, its example
runnable from any folder, and releases cut by scripts/release.py.

CI's packaging step (.ci/run) also installs the built wheel into a fresh virtual environment
and runs the example from outside the checkout; these tests keep to what runs in seconds.
"""

from __future__ import annotations

import email.parser
import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import parity_gate

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(parity_gate.__file__).resolve().parent
pytestmark = pytest.mark.process


def _tracked(*paths: str) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [p for p in out.split("\0") if p and (REPO / p).is_file()]


def _build(tmp: Path) -> tuple[Path, Path]:
    """sdist from a copy of the tracked files, then the wheel from the unpacked sdist."""
    src = tmp / "src"
    for rel in _tracked():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    dist = tmp / "dist"
    dist.mkdir()
    backend = ("import sys, setuptools.build_meta as b; "
               "print(getattr(b, sys.argv[1])(sys.argv[2]))")
    sdist = subprocess.run([sys.executable, "-c", backend, "build_sdist", str(dist)], cwd=src,
                           check=True, capture_output=True, text=True).stdout.splitlines()[-1]
    with tarfile.open(dist / sdist) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
    (root,) = (tmp / "unpacked").iterdir()
    wheel = subprocess.run([sys.executable, "-c", backend, "build_wheel", str(dist)], cwd=root,
                           check=True, capture_output=True, text=True).stdout.splitlines()[-1]
    return dist / sdist, dist / wheel


def _data_paths_in_code() -> set[str]:
    """Every package file a module names in a module-level Path (what the code opens: the
    schemas, the bundled findings, the example), relative to the repository."""
    found = set()
    for info in pkgutil.walk_packages([str(PACKAGE)], "parity_gate."):
        if info.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(info.name)).values():
            if isinstance(value, Path) and value.is_absolute() and value.is_file() \
                    and value.resolve().is_relative_to(PACKAGE) and value.suffix != ".py":
                found.add(value.resolve().relative_to(PACKAGE.parent).as_posix())
    return found


def test_sdist_and_wheel_hold_every_package_file(tmp_path: Path) -> None:
    sdist, wheel = _build(tmp_path)
    assert wheel.name == f"parity_gate-{parity_gate.__version__}-py3-none-any.whl"
    package_files = set(_tracked("parity_gate"))
    opened = _data_paths_in_code()
    assert {"parity_gate/parity.schema.json", "parity_gate/results.schema.json",
            "parity_gate/ops/known-findings.yml", "parity_gate/ops/accepted-dtypes.json",
            "parity_gate/example/parity.yml"} <= opened
    assert opened <= package_files, f"opened but not tracked: {opened - package_files}"
    example = {p for p in package_files if p.startswith("parity_gate/example/")}
    assert {"parity_gate/example/models/cnn.py", "parity_gate/example/data/mlp_inputs.npz"
            } <= example
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"parity_gate-{parity_gate.__version__}.dist-info"
        meta = email.parser.Parser().parsestr(zf.read(f"{info}/METADATA").decode())
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    assert package_files - names == set(), "tracked package files missing from the wheel"
    assert {n for n in names if not n.startswith(info)} - package_files == set(), \
        "files in the wheel that are not tracked (a build from a dirty tree?)"
    assert meta["Version"] == parity_gate.__version__
    assert any(r.startswith("filelock") for r in meta.get_all("Requires-Dist"))
    assert "parity-gate = parity_gate.cli:main" in entry_points
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert package_files <= in_sdist


BLOCKER = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys, warnings
    BLOCKED = {"fcntl", "resource", "termios"}  # POSIX-only: absent on Windows

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    for name in BLOCKED:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, Block())
    warnings.simplefilter("ignore")  # filelock: "only soft file lock is available"
    import parity_gate
    names, failed = [], []
    for info in pkgutil.walk_packages(parity_gate.__path__, "parity_gate."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
        try:
            importlib.import_module(info.name)
        except Exception as err:
            failed.append(f"{info.name}: {type(err).__name__}: {err}")
    print(json.dumps({"imported": names, "failed": failed}))
""").replace("import importlib,", "import json, importlib,")


def test_every_module_imports_without_posix_only_modules() -> None:
    """What a Windows Python lacks at import time: no module of the gate may need it then
    (a portable lock; POSIX calls inside the functions that run on POSIX only)."""
    proc = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["failed"] == []
    assert {"parity_gate.runner", "parity_gate.cli", "parity_gate.report.journal",
            "parity_gate.engine.pool"} <= set(got["imported"])


def _gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parity_gate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})


def test_the_bundled_example_runs_from_any_folder(tmp_path: Path) -> None:
    """`--example` runs the package's own copy, wherever the gate runs; a folder without a
    parity.yml never falls back to it silently (a workflow that lost its manifest fails)."""
    missing = _gate("run", cwd=tmp_path)
    assert (missing.returncode, missing.stderr.splitlines()) == (2, [
        f"parity.yml: no such file in {tmp_path} (expected a manifest: parity-gate run "
        "path/to/parity.yml, or --example for the bundled one)"])
    both = _gate("run", "x.yml", "--example", cwd=tmp_path)
    assert (both.returncode, both.stderr.splitlines()) == (
        2, ["--example: also given a manifest, x.yml (expected one of them)"])
    example = PACKAGE / "example"
    before = {p for p in example.rglob("*") if "__pycache__" not in p.parts}
    run = _gate("run", "--example", "--select", "mlp/float32/*", "--quiet", "--out", "out",
                "--no-localise", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["verdict"]["result"] == "pass"
    assert results["manifest"]["path"] == str(PACKAGE / "example" / "parity.yml")
    ran = [c for c in results["cases"] if c["outcome"] != "skipped"]
    assert ran and all(c["id"].startswith("mlp/float32/") for c in ran)
    after = {p for p in example.rglob("*") if "__pycache__" not in p.parts}
    assert after == before, "the run wrote into the package"
    check = _gate("check", "--example", cwd=tmp_path)
    assert check.returncode == 0 and check.stdout.startswith(f"{PACKAGE / 'example'}"), check


def test_version_is_single_sourced() -> None:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in text and 'attr = "parity_gate.__version__"' in text
    out = _gate("--version", cwd=REPO)
    assert out.stdout.strip() == f"parity-gate {parity_gate.__version__}"
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog
    assert f"## [{parity_gate.__version__}] - " in changelog  # this version's entry


def _repo(tmp: Path) -> Path:
    """A throwaway git repository holding what the release script reads and edits, as in
    this working tree."""
    clone = tmp / "clone"
    for rel in ["scripts/release.py", "parity_gate/__init__.py", "CHANGELOG.md", "README.md",
                *_tracked("examples/workflows", "docs")]:
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, clone / rel)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "base"]):
        _git(clone, *args)
    return clone


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run([sys.executable, "scripts/release.py", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=60)


def test_release_script_dry_run_then_release(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    current = parity_gate.__version__
    major = current.split(".")[0]
    # This release: the version and its changelog entry are in already, so only tags are due.
    now = _release(repo, current, "--dry-run")
    assert now.returncode == 0, now.stderr
    assert now.stdout.splitlines()[:2] == [
        f"would run: git tag -a v{current} -m parity-gate {current}",
        f"would run: git tag -f -a v{major} -m parity-gate {current} (moving major tag) "
        f"v{current}^{{}}"]
    # The next one: an entry under [Unreleased], then a dry run changes nothing...
    changelog = repo / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace(
        "## [Unreleased]\n", "## [Unreleased]\n\n### Fixed\n\n- Something.\n", 1))
    _git(repo, "commit", "-qam", "entry")
    head = _git(repo, "rev-parse", "HEAD")
    dry = _release(repo, "0.3.0", "--dry-run", "--date", "2027-01-02")
    assert dry.returncode == 0, dry.stderr
    assert "+__version__ = \"0.3.0\"" in dry.stdout and "+## [0.3.0] - 2027-01-02" in dry.stdout
    assert "would run: git commit -am Release v0.3.0" in dry.stdout
    assert _git(repo, "status", "--porcelain") == "" and _git(repo, "tag") == ""
    assert _git(repo, "rev-parse", "HEAD") == head
    # ...and the release commits, tags and moves the major tag.
    real = _release(repo, "0.3.0", "--date", "2027-01-02")
    assert real.returncode == 0, real.stderr
    assert _git(repo, "log", "-1", "--format=%s") == "Release v0.3.0"
    assert 'version__ = "0.3.0"' in (repo / "parity_gate/__init__.py").read_text()
    text = changelog.read_text()
    assert "## [Unreleased]\n\n## [0.3.0] - 2027-01-02\n\n### Fixed\n\n- Something.\n" in text
    assert ("[Unreleased]: https://github.com/parity-gate/parity-gate/compare/v0.3.0...HEAD\n"
            f"[0.3.0]: https://github.com/parity-gate/parity-gate/compare/v{current}...v0.3.0"
            ) in text
    release_commit = _git(repo, "rev-parse", "HEAD")
    assert _git(repo, "rev-parse", "v0.3.0^{commit}") == release_commit
    assert _git(repo, "rev-parse", "v0^{commit}") == release_commit
    # Refused: the tag exists, an empty [Unreleased], a dirty tree, a bad version.
    assert _release(repo, "0.3.0").stderr == (
        "release: v0.3.0: the tag exists already (expected a new version)\n")
    assert _release(repo, "0.4.0").stderr == (
        "release: CHANGELOG.md: [Unreleased] is empty (expected this release's entries under "
        "it)\n")
    (repo / "README.md").write_text("changed\n")
    assert _release(repo, "0.4.0").returncode == 2
    _git(repo, "checkout", "README.md")
    assert _release(repo, "1.0").stderr == "release: 1.0: expected a version X.Y.Z\n"
    # A new major version re-pins the workflows to its tag; v0 stays on the last 0.x.
    changelog.write_text(changelog.read_text().replace(
        "## [Unreleased]\n", "## [Unreleased]\n\n### Changed\n\n- Breaking.\n", 1))
    _git(repo, "commit", "-qam", "entry")
    assert _release(repo, "1.0.0").returncode == 0
    workflows = "".join(p.read_text() for p in (repo / "examples/workflows").glob("*.yml"))
    assert "parity-gate/parity-gate@v1 " in workflows and "@v0" not in workflows
    assert "ref: v1\n" in workflows
    pages = "".join(p.read_text() for p in [repo / "README.md", *(repo / "docs").rglob("*.md")])
    assert "parity-gate/parity-gate@v1" in pages and "parity-gate/parity-gate@v0" not in pages
    assert _git(repo, "rev-parse", "v0^{commit}") == release_commit
    assert _git(repo, "rev-parse", "v1^{commit}") == _git(repo, "rev-parse", "HEAD")
