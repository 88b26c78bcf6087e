"""Text as reports can carry it: no terminal escapes or control bytes, one-line table cells,
markdown and HTML that show user and exporter text literally.

Stdlib only, so the worker side (engine) and the report side share one copy.
"""

from __future__ import annotations

import html
import re

# CSI sequences (colours, cursor moves) that exporter and ORT messages carry.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Control characters XML 1.0 forbids (JUnit), plus DEL; tab, newline and CR stay.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")
# `@name` in a rendered comment or summary notifies that GitHub user; a word joiner breaks it.
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")


def strip_control(text: str) -> str:
    """`text` without ANSI escape sequences and XML-invalid control characters."""
    return _CONTROL.sub("", _ANSI.sub("", text))


def escape_html(text: object) -> str:
    """`text` safe between HTML tags and in attribute values (`<`, `>`, `&`, quotes)."""
    return html.escape(strip_control(str(text)), quote=True)


# Characters that start emphasis, strikethrough, a link or a code span in GitHub markdown:
# an exporter's `torch.Size([16*s99, 16]) ... (16*s99, 16)` would otherwise turn half a cell
# italic.
_MD_PUNCT = re.compile(r"([*_~`\[\]])")
# A code span the text marks itself (the tool's hints: try `attn_implementation="eager"`):
# markdown shows its content literally, so it is kept as it is (entities and backslash
# escapes would show as typed there). One holding `|` is escaped as plain text instead,
# since a pipe cannot be escaped inside a code span outside a table.
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def _md_plain(text: str) -> str:
    out = html.escape(text, quote=True).replace("\\", "&#92;").replace("|", "\\|")
    return _MENTION.sub("@\u2060", _MD_PUNCT.sub(r"\\\1", out))


def md_text(text: object) -> str:
    """`text` shown literally in GitHub markdown: HTML escaped (so `<module>` survives
    GitHub's sanitizer), backslashes kept, `|` escaped for tables, emphasis, strikethrough
    and link brackets escaped, mentions defused; code spans it marks stay code spans."""
    raw = strip_control(str(text))
    out: list[str] = []
    pos = 0
    for span in _CODE_SPAN.finditer(raw):
        if "|" in span.group(2):
            continue
        out += [_md_plain(raw[pos:span.start()]), span.group(0)]
        pos = span.end()
    return "".join([*out, _md_plain(raw[pos:])])


def md_cell(text: object, limit: int = 160) -> str:
    """`text` as one markdown table cell: whitespace collapsed, at most `limit` characters
    (cut before escaping, so no entity is cut in half), shown literally (`md_text`)."""
    cell = " ".join(str(text).split())
    return md_text(cell if len(cell) <= limit else cell[: limit - 1] + "…")


def md_code(text: object, limit: int = 200) -> str:
    """`text` as inline code that a table cell can hold (a `|` or backtick in it included)."""
    return f"<code>{md_cell(text, limit)}</code>"
