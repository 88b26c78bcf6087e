"""No link is followed to write or remove (issue 34, item 2), on real files and processes.

A pull request can commit `.parity-cache` (or the reports' folder) as a symbolic link:
the Action's entrypoint, run as the workflow runs it, refuses it before anything is
made, installed or run (exit 2, one located line), and the link's target is untouched.
The command line refuses a linked `--out` and cache folder the same way. Prune removes
only what it can prove is its own entry, never a folder it did not write.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from github_server import FakeGitHub
from test_github_action import REPO, TOKEN, UP_TOKEN, _setup

from parity_gate import cli
from parity_gate.engine import cache as export_cache

HOUR = 3600.0
NO_LINKS = "parity-gate never follows links in its own folders"
MANIFEST = """version: 1
python_path: [.]
defaults: {batch_sizes: [2]}
fixtures:
  vec: {kind: random, inputs: {input: {shape: [batch, 4]}}}
modules:
  - {name: lin, factory: "lin:make", inputs: [{name: input}], fixtures: [vec]}
"""
MODEL = "import torch\n\ndef make():\n    return torch.nn.Linear(4, 3)\n"


def aged(path: Path, seconds: float) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)
    return path


def victim(root: Path) -> Path:
    """A folder a link may point at: an unrelated, three-hour-old folder in its `tmp`
    (what the Action's prune used to remove) and another where entries would go."""
    for sub in ("tmp/old-unrelated", "exports/ab/project"):
        (root / sub).mkdir(parents=True)
        (root / sub / "work.txt").write_text("mine\n")
        aged(root / sub, 3 * HOUR)
    return root


def tree(root: Path) -> dict[str, tuple[int, float]]:
    """Every path below `root` with its size and mtime: what must not change."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime)
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def servers() -> Iterator[tuple[FakeGitHub, FakeGitHub]]:
    with FakeGitHub(token=TOKEN) as repo, FakeGitHub(token=UP_TOKEN) as up:
        yield repo, up
        assert repo.errors == [] and up.errors == [], (repo.errors, up.errors)


def _action(tmp: Path, servers: tuple[FakeGitHub, FakeGitHub], *args: str,
            **inputs: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """The Action's entrypoint on a workspace holding a real manifest, as the runner starts
    it (the worktree's parity_gate on the path, not the -I of an installed Action)."""
    env = _setup(tmp, *servers, "pull_request", manifest="parity.yml", upstream="off",
                 comment="off", **inputs)
    ws = Path(env["GITHUB_WORKSPACE"])
    (ws / "parity.yml").write_text(MANIFEST)
    (ws / "lin.py").write_text(MODEL)
    proc = subprocess.run([sys.executable, "-m", "parity_gate.github.action", *args],
                          env=env, cwd=env["RUNNER_TEMP"], capture_output=True, text=True,
                          timeout=600)
    return proc, env


@pytest.mark.process
def test_the_action_refuses_a_committed_parity_cache_link(
        tmp_path: Path, servers: tuple[FakeGitHub, FakeGitHub]) -> None:
    target = victim(tmp_path / "home")
    before = tree(target)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".parity-cache").symlink_to(target)  # what the pull request commits
    proc, env = _action(tmp_path, servers)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert errors == [
        "::error title=parity-gate%3A invalid input::export_cache (.parity-cache in the "
        f"workspace): "
        f"{ws / '.parity-cache'} is a symbolic link (expected a folder, or a path that does "
        f"not exist yet; {NO_LINKS})"]
    assert tree(target) == before  # nothing written, nothing pruned
    assert "result<<" in (tmp_path / "runner-temp" / "output").read_text()
    # the post step writes nothing through it either, and changes no exit code
    post = subprocess.run([sys.executable, "-m", "parity_gate.github.action", "post"],
                          env=env, cwd=env["RUNNER_TEMP"], capture_output=True, text=True,
                          timeout=120)
    assert post.returncode == 0 and tree(target) == before
    assert servers[0].comments.get((REPO, 7)) is None


@pytest.mark.process
@pytest.mark.parametrize("link", ["out", "out/deeper"])
def test_the_action_refuses_an_out_dir_that_is_or_passes_a_link(
        tmp_path: Path, servers: tuple[FakeGitHub, FakeGitHub], link: str) -> None:
    target = victim(tmp_path / "home")
    before = tree(target)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "reports").symlink_to(target)
    proc, _ = _action(tmp_path, servers, out_dir=link.replace("out", "reports"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (error,) = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert f"out_dir ({link.replace('out', 'reports')}): {ws / 'reports'} is a symbolic link" \
        in error
    assert tree(target) == before


@pytest.mark.process
def test_the_action_refuses_an_out_dir_outside_the_workspace(
        tmp_path: Path, servers: tuple[FakeGitHub, FakeGitHub]) -> None:
    proc, _ = _action(tmp_path, servers, out_dir="../elsewhere")
    assert proc.returncode == 2
    assert f"out_dir (../elsewhere): {tmp_path / 'ws' / '..' / 'elsewhere'} is outside the " \
        f"workspace {tmp_path / 'ws'}" in proc.stdout
    assert not (tmp_path / "elsewhere").exists()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("flag", ["--out", "--cache-dir"])
def test_run_refuses_a_linked_out_or_cache_folder_in_the_working_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        flag: str) -> None:
    target = victim(tmp_path / "home")
    before = tree(target)
    work = tmp_path / "project"
    work.mkdir()
    (work / "parity.yml").write_text(MANIFEST)
    (work / "lin.py").write_text(MODEL)
    (work / "linked").symlink_to(target)
    monkeypatch.chdir(work)
    for given in ("linked", "linked/sub"):
        code, err = _cli(capsys, "run", "parity.yml", flag, given)
        assert code == 2 and len(err) == 1, err
        assert err[0].startswith(f"{flag}: {work / 'linked'} is a symbolic link")
    assert tree(target) == before


def test_run_refuses_the_default_cache_when_it_is_a_link(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    target = victim(tmp_path / "home")
    before = tree(target)
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / ".parity-cache").symlink_to(target)
    monkeypatch.chdir(tmp_path / "project")
    monkeypatch.delenv("PARITY_GATE_CACHE_DIR", raising=False)
    for argv in (["cache", "prune", "--older-than", "1s"], ["cache", "info"]):
        code, err = _cli(capsys, *argv)
        assert code == 2 and err == [
            f"--cache-dir (default): {tmp_path / 'project' / '.parity-cache'} is a symbolic "
            f"link (expected a folder, or a path that does not exist yet; {NO_LINKS})"]
    assert tree(target) == before


def test_an_explicit_folder_outside_the_working_folder_is_the_users_choice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Above or outside the working folder links are the machine's layout: an absolute
    cache folder reached through one is used; only the folder itself may not be a link."""
    (tmp_path / "data" / "cache").mkdir(parents=True)
    (tmp_path / "mnt").symlink_to(tmp_path / "data")
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    code, err = _cli(capsys, "cache", "info", "--cache-dir", str(tmp_path / "mnt" / "cache"))
    assert code == 0, err
    (tmp_path / "data" / "alias").symlink_to(tmp_path / "data" / "cache")
    code, err = _cli(capsys, "cache", "info", "--cache-dir", str(tmp_path / "data" / "alias"))
    assert code == 2 and "is a symbolic link" in err[0]


def test_prune_leaves_what_it_did_not_write(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Only entries it can prove its own go: a key-shaped folder with the entry.json the
    cache writes (naming that key and kind), its staging folders, its removal leftovers."""
    cache = tmp_path / "cache"
    store = export_cache.ExportCache(cache)
    mine = store.put("export", "ab" + "0" * 62, {"model.onnx": b"onnx"})
    assert mine is not None
    aged(mine.file("entry.json"), 30 * 86400)
    staging = cache / "tmp" / "ab0000000000-k2x_9abc"  # a kill left it
    staging.mkdir()
    (staging / "model.onnx").write_bytes(b"half")
    aged(staging, 3 * HOUR)
    gone = cache / "export" / "ab" / f".{'ab' + '1' * 62}.{'f' * 32}.gone"
    gone.mkdir()
    foreign = {
        "tmp/old-unrelated": None,  # not a staging folder's name
        "export/ab/project": {"format": 1, "key": "project", "kind": "export", "files": {}},
        f"export/ab/{'ab' + '2' * 62}": {"note": "someone else's entry.json"},
        f"export/cd/{'ab' + '3' * 62}": {"format": 1, "key": "ab" + "3" * 62,
                                         "kind": "export", "files": {}},  # wrong prefix
        "export/.old.gone": None,
        ".x.gone": None,
    }
    for name, meta in foreign.items():
        (cache / name).mkdir(parents=True)
        (cache / name / "work.txt").write_text("mine\n")
        if meta is not None:
            (cache / name / "entry.json").write_text(json.dumps(meta))
        aged(cache / name, 3 * HOUR)
    code, err = _cli(capsys, "cache", "prune", "--cache-dir", str(cache), "--older-than", "1d",
                     "--max-size", "0")
    assert code == 0 and err[0].startswith("parity-gate cache: removed 1 entries"), err
    assert not mine.folder.exists() and not staging.exists() and not gone.exists()
    for name in foreign:
        assert (cache / name / "work.txt").read_text() == "mine\n", name
