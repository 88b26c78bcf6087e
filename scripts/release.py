#!/usr/bin/env python3
"""Cut a parity-gate release: `python scripts/release.py X.Y.Z [--dry-run]`
(docs/maintainers/releasing.md).

Steps, each skipped when already done (so a release whose version bump and changelog were
merged beforehand is only tagged):
  1. parity_gate/__init__.py's __version__ becomes X.Y.Z (pyproject.toml reads it from there);
  2. CHANGELOG.md's [Unreleased] entries become `## [X.Y.Z] - DATE`, under a fresh empty
     [Unreleased], and the compare links at the bottom follow;
  3. a new major version rewrites the Action pins `parity-gate/parity-gate@vN` in README.md,
     docs/ and examples/workflows/ to the new major tag;
  4. one commit, `Release vX.Y.Z`;
  5. the annotated tag vX.Y.Z, and the major tag vX moved onto it (what `uses: ...@vX` follows).
Nothing is pushed: the script prints the push commands. --dry-run prints the edits as diffs and
the git commands, and changes nothing. Stdlib and `packaging` only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import re
import subprocess
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
VERSION_FILE = "parity_gate/__init__.py"
CHANGELOG = "CHANGELOG.md"
PINNED = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in [
    *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples" / "workflows").glob("*.yml")])]
REPO_URL = "https://github.com/parity-gate/parity-gate"
_VERSION_RE = re.compile(r'^__version__ = "([^"]+)"$', re.M)
_PIN_RE = re.compile(r"(parity-gate/parity-gate@|\bref: )v\d+\b")


class ReleaseError(Exception):
    """A precondition the release needs, said in one line."""


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def current_version(root: Path) -> str:
    m = _VERSION_RE.search((root / VERSION_FILE).read_text(encoding="utf-8"))
    if not m:
        raise ReleaseError(f"{VERSION_FILE}: no `__version__ = \"X.Y.Z\"` line")
    return m.group(1)


def bump_version(text: str, version: str) -> str:
    return _VERSION_RE.sub(f'__version__ = "{version}"', text, count=1)


def move_unreleased(text: str, version: str, date: str, previous: str) -> str:
    """The [Unreleased] entries become the release's section; the links follow."""
    if re.search(rf"^## \[{re.escape(version)}\]", text, re.M):
        return text  # already moved (a release prepared in a pull request)
    m = re.search(r"^## \[Unreleased\][^\n]*\n(.*?)(?=^## \[|^\[Unreleased\]:|\Z)", text,
                  re.M | re.S)
    if not m:
        raise ReleaseError(f"{CHANGELOG}: no `## [Unreleased]` section")
    entries = m.group(1).strip()
    if not entries:
        raise ReleaseError(f"{CHANGELOG}: [Unreleased] is empty (expected this release's "
                           "entries under it)")
    section = f"## [Unreleased]\n\n## [{version}] - {date}\n\n{entries}\n\n"
    text = text[:m.start()] + section + text[m.end():]
    text = re.sub(r"^\[Unreleased\]: .*$", f"[Unreleased]: {REPO_URL}/compare/v{version}...HEAD",
                  text, count=1, flags=re.M)
    link = f"[{version}]: {REPO_URL}/compare/v{previous}...v{version}"
    return re.sub(r"^(\[Unreleased\]: .*)$", rf"\1\n{link}", text, count=1, flags=re.M)


def repin(text: str, major: int) -> str:
    return _PIN_RE.sub(lambda m: f"{m.group(1)}v{major}", text)


def plan_edits(root: Path, version: str, date: str) -> dict[str, tuple[str, str]]:
    """path → (old text, new text) of every file the release changes."""
    old = current_version(root)
    new_v, old_v = Version(version), Version(old)
    if new_v < old_v:
        raise ReleaseError(f"{version}: older than the current version {old}")
    edits: dict[str, tuple[str, str]] = {}

    def edit(path: str, new: str) -> None:
        before = (root / path).read_text(encoding="utf-8")
        if new != before:
            edits[path] = (before, new)

    edit(VERSION_FILE, bump_version((root / VERSION_FILE).read_text(encoding="utf-8"), version))
    edit(CHANGELOG, move_unreleased((root / CHANGELOG).read_text(encoding="utf-8"), version, date,
                                    old))
    if new_v.major != old_v.major:
        for path in PINNED:
            if (root / path).is_file():
                edit(path, repin((root / path).read_text(encoding="utf-8"), new_v.major))
    return edits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the release's version, X.Y.Z")
    parser.add_argument("--date", default=dt.datetime.now(dt.timezone.utc).date().isoformat(),
                        help="the release date in CHANGELOG.md (default: today, UTC)")
    parser.add_argument("--dry-run", action="store_true", help="print the edits and the git "
                        "commands; change nothing")
    args = parser.parse_args(argv)
    try:
        version = str(Version(args.version))
        if version != args.version or len(Version(version).release) != 3:
            raise InvalidVersion
    except InvalidVersion:
        print(f"release: {args.version}: expected a version X.Y.Z", file=sys.stderr)
        return 2
    tag, major = f"v{version}", f"v{Version(version).major}"
    try:
        if git("status", "--porcelain", "--untracked-files=no"):
            raise ReleaseError("the working tree has uncommitted changes (expected a clean "
                               "checkout of the commit to release)")
        if git("tag", "--list", tag):
            raise ReleaseError(f"{tag}: the tag exists already (expected a new version)")
        edits = plan_edits(ROOT, version, args.date)
    except (ReleaseError, subprocess.CalledProcessError) as err:
        print(f"release: {err}", file=sys.stderr)
        return 2
    commands = ([["git", "commit", "-am", f"Release {tag}"]] if edits else []) + [
        ["git", "tag", "-a", tag, "-m", f"parity-gate {version}"],
        ["git", "tag", "-f", "-a", major, "-m", f"parity-gate {version} (moving major tag)",
         f"{tag}^{{}}"]]
    for path, (before, after) in edits.items():
        sys.stdout.writelines(difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            f"a/{path}", f"b/{path}"))
    for command in commands:
        print(("would run: " if args.dry_run else "+ ") + " ".join(command))
        if not args.dry_run:
            if command[1] == "commit":
                for path, (_, after) in edits.items():
                    (ROOT / path).write_text(after, encoding="utf-8")
            git(*command[1:])
    push = f"git push origin HEAD {tag} && git push --force origin {major}"
    print(f"release: {'dry run, nothing changed' if args.dry_run else tag + ' tagged'}; "
          f"publish with: {push}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
