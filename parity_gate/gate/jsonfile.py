"""One strict JSON reader for every JSON file the gate reads (shards, --compare-to,
--timings, the journal): each malformed kind is a located one-line UserError.

`json.loads` alone accepts duplicate keys (a merge conflict leaves those; the last
one silently wins), NaN and Infinity, and reports binary junk or bad UTF-8 as a
traceback-looking decode error; here each names the file, line and column.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

from parity_gate.errors import UserError
from parity_gate.manifest.located import read_text

__all__ = ["loads", "read_json", "read_text"]

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def loads(text: str, where: str, what: str, first_line: int = 1) -> Any:
    """Parse strictly: no control characters, duplicate keys or NaN/Infinity constants.
    `where` is the file; `first_line` the line `text` starts on (journal lines)."""
    bad = _CONTROL.search(text)
    if bad:
        line, col = _text_position(text, bad.start())
        raise UserError(f"{where}:{line + first_line - 1}:{col}: control character "
                        f"U+{ord(bad.group()):04X} (expected {what})")
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates,
                          parse_constant=_no_constants)
    except RecursionError:
        raise UserError(f"{where}:{first_line}:1: nesting too deep to read (expected {what})"
                        ) from None
    except json.JSONDecodeError as err:
        raise UserError(f"{where}:{err.lineno + first_line - 1}:{err.colno}: invalid JSON: "
                        f"{err.msg} (expected {what})") from None
    except _Duplicate as dup:
        line = _second_key_line(text, dup.key)
        raise UserError(f"{where}:{line + first_line - 1}: duplicate key {dup.key!r} (a "
                        f"merge conflict? expected each key once in {what})") from None
    except _Constant as c:
        raise UserError(f"{where}: {c.name} is not JSON (expected {what}; non-finite "
                        "numbers are written as the strings \"nan\", \"inf\", \"-inf\")") from None


def read_json(path: Path, what: str) -> Any:
    return loads(read_text(path, what), str(path), what)


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


class _Constant(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise _Constant(name)


def _text_position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _second_key_line(text: str, key: str) -> int:
    """The line where `key` occurs a second time in one object (1 if not found)."""
    stack: list[set[str] | None] = []  # per open container: an object's keys so far
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            value, end = scanstring(text, i + 1)
            j = end
            while j < n and text[j] in " \t\r\n":
                j += 1
            keys = stack[-1] if stack else None
            if j < n and text[j] == ":" and keys is not None:
                if value == key and value in keys:
                    return _text_position(text, i)[0]
                keys.add(value)
            i = end
            continue
        if ch == "{":
            stack.append(set())
        elif ch == "[":
            stack.append(None)
        elif ch in "}]" and stack:
            stack.pop()
        i += 1
    return 1
