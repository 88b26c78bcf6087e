"""`install: auto`: how the Action installs the team's own project before the gate runs.

A team's repository is a Python package (a `pyproject.toml` with a `[project]` or
`[build-system]` table, a `setup.py`, a `setup.cfg`), a folder of scripts with a
`requirements.txt`, or neither (the manifest's `python_path` finds its modules). Installing
a repository that is not a package with `pip install -e .` fails ("does not appear to be a
Python project"), so `auto` reads what the repository is, and installs into the Python that
runs the gate. Stdlib-only: runs before the gate's own dependencies are imported.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

AUTO = "auto"
NONE = "none"
# A pyproject.toml that only configures tools (ruff, mypy, pytest) is no package.
_PACKAGE_TABLE = re.compile(r"^\s*\[(project|build-system|tool\.poetry)\]\s*(#.*)?$",
                            re.MULTILINE)
REQUIREMENTS = ("requirements.txt", "requirements/base.txt", "requirements-dev.txt")


@dataclass(frozen=True)
class ProjectInstall:
    """What `install: auto` found and the command it runs (empty: nothing to install)."""

    command: list[str]
    why: str


def is_package(workspace: Path) -> bool:
    """Whether pip can install the repository itself."""
    pyproject = workspace / "pyproject.toml"
    if pyproject.is_file() and _PACKAGE_TABLE.search(
            pyproject.read_text(encoding="utf-8", errors="replace")):
        return True
    return (workspace / "setup.py").is_file() or (workspace / "setup.cfg").is_file()


def auto_install(workspace: Path, python: str = sys.executable) -> ProjectInstall:
    """The install a repository needs: its requirements file first (pinned dependencies),
    then the package itself when it is one; nothing for a repository that is neither."""
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    requirements = next((r for r in REQUIREMENTS if (workspace / r).is_file()), None)
    package = is_package(workspace)
    # Editable: the models run from the workspace, so a culprit's `file:line` is a line of
    # the diff (an annotation can point at it), not of a copy in site-packages.
    args = [*(["-r", requirements] if requirements else []), *(["-e", "."] if package else [])]
    if not args:
        return ProjectInstall([], "no pyproject.toml package, setup.py or requirements.txt: "
                                  "nothing to install (the manifest's python_path imports "
                                  "the models)")
    found = " and ".join([*([requirements] if requirements else []),
                          *(["the package (pyproject.toml/setup.py)"] if package else [])])
    return ProjectInstall([*pip, *args], f"installing {found}")


def install_command(value: str, workspace: Path) -> tuple[list[str], str]:
    """The `install` input as a command: `auto` as above, `none` nothing, else the user's
    own bash command."""
    if value == AUTO:
        found = auto_install(workspace)
        return found.command, f"install: auto: {found.why}"
    if value == NONE:
        return [], "install: none"
    return ["bash", "-c", value], f"install: {value}"
