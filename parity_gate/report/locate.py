"""Where each module is declared: the manifest file and the line of its `modules:` entry.

JUnit test cases and GitHub annotations point there, so a reporter puts a failure
on the manifest line that declares the module (not on `abort:1` or on junit.xml).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from parity_gate.model.results import RunResult


def module_lines(manifest_text: str) -> dict[str, int]:
    """Line of each module's entry under `modules:` (its mapping's first line, whatever
    the order of its keys); {} when the text does not parse."""
    import yaml

    from parity_gate.errors import UserError
    from parity_gate.manifest.located import load_document, position

    try:
        doc = load_document(manifest_text, "parity.yml")
    except UserError:
        return {}
    modules = doc.node(("modules",))
    lines: dict[str, int] = {}
    for i, entry in enumerate(modules.value if isinstance(modules, yaml.SequenceNode) else []):
        name = doc.node(("modules", i, "name"))
        if isinstance(entry, yaml.MappingNode) and isinstance(name, yaml.ScalarNode):
            lines.setdefault(name.value, position(entry)[0])
    return lines


@dataclass(frozen=True)
class Located:
    """The manifest as reporters name it, and its module lines (empty when unreadable)."""

    file: str | None = None
    lines: dict[str, int] = field(default_factory=dict)

    def line(self, module: str) -> int | None:
        return self.lines.get(module)


def locate(run: RunResult, root: Path | None = None) -> Located:
    """Read the run's manifest (an edge: file I/O) for the reports that point into it.

    The path is given relative to `root` (default: the working directory, where CI
    runs and reporters resolve paths) when it lies under it, else as recorded.
    """
    recorded = run.manifest.get("path")
    if not recorded:
        return Located()
    path = Path(recorded)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Located(path.as_posix())
    base = (root or Path.cwd()).resolve()
    try:
        shown = path.resolve().relative_to(base).as_posix()
    except ValueError:
        shown = path.as_posix() if not path.is_absolute() else os.fspath(path)
    return Located(shown, module_lines(text))
