"""Text as reports can carry it: no terminal escapes or control bytes, one-line table cells.

Stdlib only, so the worker side (engine) and the report side share one copy.
"""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves) that exporter and ORT messages carry.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Control characters XML 1.0 forbids (JUnit), plus DEL; tab, newline and CR stay.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")


def strip_control(text: str) -> str:
    """`text` without ANSI escape sequences and XML-invalid control characters."""
    return _CONTROL.sub("", _ANSI.sub("", text))


def md_cell(text: object, limit: int = 160) -> str:
    """`text` as one markdown table cell: whitespace collapsed, `|` escaped, at most `limit`."""
    cell = " ".join(str(text).split()).replace("|", "\\|")
    return cell if len(cell) <= limit else cell[: limit - 1] + "…"
