"""Workflow commands (annotations, step outputs), escaped the way the runner reads them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from parity_gate.model.text import strip_control

ANNOTATION_LIMIT = 10  # GitHub keeps at most 10 error and 10 warning annotations per step
MESSAGE_LIMIT = 2000  # longer annotation messages are unreadable in the checks UI


def escape_data(text: str) -> str:
    """A workflow command's data: outside text neutralised (no bidi override, no control or
    separator character) and its line breaks escaped, so it stays one command."""
    return strip_control(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


@dataclass(frozen=True)
class Annotation:
    level: str  # "error" | "warning" | "notice"
    title: str
    message: str
    file: str | None = None
    line: int | None = None

    def render(self) -> str:
        props = [f"file={escape_property(self.file)}"] if self.file else []
        if self.file and self.line:
            props.append(f"line={self.line}")
        props.append(f"title={escape_property(self.title)}")
        return f"::{self.level} {','.join(props)}::{escape_data(self.message)}"


def write_outputs(path: str | None, values: Mapping[str, str]) -> None:
    """Append `name<<DELIM` blocks: safe for any value, newlines included."""
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        for name, value in values.items():
            delim = f"ghadelimiter_{uuid.uuid4()}"
            while delim in value:  # pragma: no cover - a collision with a fresh uuid
                delim = f"ghadelimiter_{uuid.uuid4()}"
            fh.write(f"{name}<<{delim}\n{value}\n{delim}\n")
