"""The documentation tree: generated reference pages are current, every page is reachable
from README.md and every relative link resolves, and every shell block is either run by a
test or says why it is not run here."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_SHELL = {"bash", "sh", "shell", "console"}
_MARK = re.compile(r"<!--\s*(not-run|run-by):\s*(.*?)\s*-->\s*$")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
# Who runs a block marked `run-by`: CI runs README's Quick start (.ci/run reads it through
# .ci/readme_commands.py); this file runs the others, line by line.
RUNNERS = {".ci/run", "tests/test_docs_tree.py"}


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference",
                                                  ROOT / "scripts" / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shell_blocks(path: Path) -> Iterator[tuple[int, str, str, str]]:
    """(line, mark kind, mark text, body) of every shell block; kind '' when unmarked."""
    text = path.read_text(encoding="utf-8")
    for m in _FENCE.finditer(text):
        if m.group(1) not in _SHELL:
            continue
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        line = text.count("\n", 0, m.start()) + 1
        yield line, mark.group(1) if mark else "", mark.group(2) if mark else "", m.group(2)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+?)\s*$", text, re.M)}


def _links(path: Path) -> Iterator[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    for m in _LINK.finditer(text):
        yield m.group(1) or m.group(2)


def test_reference_pages_are_current() -> None:
    stale = _generator().stale_pages()
    assert not stale, f"stale: {', '.join(stale)}; run: python scripts/gen_reference.py"


def test_every_page_is_reached_from_readme_and_every_link_resolves() -> None:
    seen, todo, broken = {README}, [README], []
    while todo:
        page = todo.pop()
        for target in _links(page):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
                continue
            if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where} (no heading #{anchor} in {dest.relative_to(ROOT)})")
            if dest.suffix == ".md" and dest not in seen:
                seen.add(dest)
                todo.append(dest)
    assert not broken, "broken links:\n" + "\n".join(broken)
    unreached = [str(p.relative_to(ROOT)) for p in PAGES if p not in seen]
    assert not unreached, f"not linked from README.md or a page it reaches: {unreached}"


def test_every_shell_block_is_run_or_says_why_not() -> None:
    bad = []
    for path in [README, *PAGES]:
        for line, kind, text, _ in _shell_blocks(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if not kind:
                bad.append(f"{where}: unmarked (put <!-- not-run: why --> or "
                           "<!-- run-by: WHO --> on the line before the block)")
            elif kind == "not-run" and not text:
                bad.append(f"{where}: not-run needs a reason")
            elif kind == "run-by" and text not in RUNNERS:
                bad.append(f"{where}: run-by {text!r} is none of {sorted(RUNNERS)}")
    assert not bad, "\n".join(bad)


@pytest.mark.process
def test_readme_blocks_ci_runs_are_the_quick_start() -> None:
    ci = [body.strip() for _, kind, who, body in _shell_blocks(README)
          if kind == "run-by" and who == ".ci/run"]
    extracted = [subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_commands.py"), w],
                                capture_output=True, text=True, check=True).stdout.strip()
                 for w in ("example", "test")]
    assert ci == extracted
    marked = [(p, body) for p in PAGES for _, kind, who, body in _shell_blocks(p)
              if kind == "run-by" and who == ".ci/run"]
    assert not marked, f"only README's Quick start is run by .ci/run: {marked}"


@pytest.mark.process
def test_doc_commands_marked_for_this_file_run(tmp_path: Path) -> None:
    """Each line of a block marked `run-by: tests/test_docs_tree.py` runs as pasted, in an
    empty folder, with this interpreter's `parity-gate` first on PATH, and exits 0."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PARITY_GATE_CACHE_DIR": str(tmp_path / "cache")}
    ran = 0
    for path in [README, *PAGES]:
        for line, kind, who, body in _shell_blocks(path):
            if kind != "run-by" or who != "tests/test_docs_tree.py":
                continue
            for command in filter(None, (c.strip() for c in body.splitlines())):
                done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                      capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, (f"{path.relative_to(ROOT)}:{line}: {command}: "
                                              f"exit {done.returncode}: {done.stderr[-500:]}")
                ran += 1
    assert ran, "no documented command is run here"


@pytest.mark.process
def test_readme_minimal_manifest_is_valid(tmp_path: Path) -> None:
    """README's minimal manifest passes `parity-gate check` beside the factory it names."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    manifest = [b for b in blocks if b.startswith("version: 1")]
    assert len(manifest) == 1, "README shows one minimal manifest (a yaml block: version: 1)"
    (tmp_path / "parity.yml").write_text(manifest[0])
    package = tmp_path / "src" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text("import torch\n\n\ndef build_resnet():\n"
                                       "    return torch.nn.Conv2d(3, 8, 3)\n")
    done = subprocess.run([sys.executable, "-m", "parity_gate", "check", "parity.yml"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_exit_code_page_lists_every_exit_code() -> None:
    """docs/reference/exit-codes.md has a row for each code of errors.py and the signals'."""
    import signal

    from parity_gate import errors

    text = (ROOT / "docs" / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    rows = {cell.strip() for line in text.splitlines() if line.startswith("| ")
            for cell in line.split("|")[1].split("/")}
    codes = {getattr(errors, n) for n in dir(errors) if n.startswith("EXIT_")}
    codes |= {128 + signal.SIGINT, 128 + signal.SIGTERM}
    missing = sorted(c for c in codes if str(c) not in rows)
    assert not missing, f"exit codes without a row in docs/reference/exit-codes.md: {missing}"
