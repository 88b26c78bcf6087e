"""Text from outside the tool (exporter and runtime messages, results.json, upstream records)
as reports and GitHub carry it: shown literally, and inert wherever it is posted or drafted.

One family. `inert` breaks what GitHub acts on in plain text (mentions, cross-references,
autolinks); every other function builds on it for one context: HTML (`escape_html`,
`html_line`), markdown (`md_text`, `md_cell`, `md_code`, `code_span`, `code_block`), a log
line or an issue title (`one_line`), and the only links the tool writes (`md_link`).
`log_url` is the exception: a URL from GitHub's answer, logged as it is (still without
control characters).

Stdlib only, so the worker side (engine) and the report side share one copy.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

# CSI sequences (colours, cursor moves) that exporter and ORT messages carry.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Control characters XML 1.0 forbids (JUnit), DEL and the C1 controls; tab, newline and CR
# stay.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
# Bidirectional overrides, isolates and marks: they reorder what a reader sees ("PASS" from
# "SSAP").
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Line and paragraph separators: a line break to a browser, a JSON reader, GitHub and some
# terminals, but not to a line-based filter; written as the newline they are.
_SEPARATORS = re.compile("[\u2028\u2029]")

# A word joiner: invisible, zero width, no line break. Put after the character GitHub keys
# on, it leaves the text reading (and wrapping) as before while nothing matches any more.
WORD_JOINER = "\u2060"
# What GitHub acts on in rendered text (outside code): `@user` and `@org/team` mentions and
# `user@host` email autolinks; `#12`, `owner/repo#12` and `GH-12` references (each links
# and notes the reference in that issue); `scheme://` and `www.` autolinks. GitHub's own
# patterns use ASCII word boundaries, so these do too.
_TRIGGER = re.compile(
    r"(?P<at>@)(?=[\w.-])"
    r"|(?P<ref>(?:[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+)?#)(?=\d)"
    r"|(?P<gh>(?<![A-Za-z0-9_])GH-)(?=\d)"
    r"|(?P<url>:)(?=//)"
    r"|(?P<www>(?<![A-Za-z0-9.])www)(?=\.)",
    re.IGNORECASE)
_ASCII_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def strip_control(text: str) -> str:
    """`text` without ANSI escape sequences, XML-invalid control characters and bidi
    overrides, its line and paragraph separators as newlines: what every report format
    (JUnit, HTML, JSON, markdown, annotations) carries of outside text."""
    return _SEPARATORS.sub("\n", _BIDI.sub("", _CONTROL.sub("", _ANSI.sub("", text))))


def clean_tree(value: Any) -> Any:
    """A JSON-like tree with `strip_control` applied to every string, keys included."""
    if isinstance(value, str):
        return strip_control(value)
    if isinstance(value, dict):
        return {clean_tree(k): clean_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_tree(v) for v in value]
    return value


def _break(m: re.Match[str]) -> str:
    # `repo#12` after a plain word is no reference (GitHub wants `#12` or `owner/repo#12`):
    # the tool's own `onnxscript#2101` stays as written.
    if m.group() == "#" and m.start() and m.string[m.start() - 1] in _ASCII_WORD:
        return m.group()
    return m.group() + WORD_JOINER


def inert(text: object) -> str:
    """`text` that GitHub shows as it is: control bytes and bidi overrides removed, and a
    word joiner after each mention's `@`, each reference's `#` or `GH-`, each autolink's
    `:` (of `://`) or `www`. Idempotent. HTML and markdown still need escaping (below)."""
    return _TRIGGER.sub(_break, strip_control(str(text)))


def log_url(url: object) -> str:
    """A URL GitHub's API answered (a comment's `html_url`) as a log line shows it: control
    characters, bidi overrides and whitespace removed (so it cannot end the line and start
    a workflow command), and no word joiner: a log is no post, and the link must work."""
    return "".join(strip_control(str(url)).split())


def one_line(text: object) -> str:
    """`text` inert, its whitespace collapsed: a log line that cannot start a workflow
    command (`::error::`) on a line of its own, or an issue title."""
    return " ".join(inert(text).split())


def escape_html(text: object) -> str:
    """`text` inert and safe between HTML tags and in attribute values (`<`, `>`, `&`,
    quotes): report.html, and `<pre>` blocks in markdown (which end only at `</pre>`)."""
    return html.escape(inert(text), quote=True)


def html_code_ticks(text: object) -> str:
    """Escaped HTML with each `span` in backticks (how a fix sentence writes code) set as
    <code>: what the markdown reports show, on the page."""
    parts = escape_html(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired tick: leave the text as it is
        return "`".join(parts)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def html_line(text: object) -> str:
    """`escape_html` on one line: for HTML inside markdown such as `<summary>`, whose block
    a blank line would end (what followed would be read as markdown)."""
    return html.escape(one_line(text), quote=True)


# Characters that start emphasis, strikethrough, a link or a code span in GitHub markdown:
# an exporter's `torch.Size([16*s99, 16]) ... (16*s99, 16)` would otherwise turn half a cell
# italic.
_MD_PUNCT = re.compile(r"([*_~`\[\]])")
# A code span the text marks itself (the tool's hints: try `attn_implementation="eager"`):
# shown as a code span of its own content (entities and backslash escapes would show as
# typed there). One holding `|` is escaped as plain text instead, since a pipe cannot be
# escaped inside a code span outside a table.
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
# What starts a block at the start of a line: a heading, a list item, a thematic break.
_BLOCK_START = re.compile(r"^(?:#{1,6}(?= |$)|[+-](?= |$)|-(?=--)|\d{1,9}(?=[.)](?: |$)))")
_BACKTICKS = re.compile(r"`+")


def _md_plain(text: str) -> str:
    out = html.escape(inert(text), quote=False).replace("\\", "&#92;").replace("|", "\\|")
    return _MD_PUNCT.sub(r"\\\1", out)


def md_text(text: object) -> str:
    """`text` on one markdown line, shown literally and inert: HTML escaped (so `<module>`
    survives GitHub's sanitizer and no tag is live), backslashes kept, `|` escaped for
    tables, emphasis, strikethrough and link brackets escaped, a leading block marker
    escaped, mentions, references and autolinks broken; code spans it marks stay code."""
    raw = " ".join(_BIDI.sub("", strip_control(str(text))).split())
    out: list[str] = []
    pos = 0
    for span in _CODE_SPAN.finditer(raw):
        if "|" in span.group(2):
            continue
        out += [_md_plain(raw[pos:span.start()]), code_span(span.group(2))]
        pos = span.end()
    text_md = "".join([*out, _md_plain(raw[pos:])])
    lead = _BLOCK_START.match(text_md)
    if lead:  # `1.` → `1\.`, `#` → `\#`
        at = lead.end() if lead.group()[0].isdigit() else 0
        text_md = f"{text_md[:at]}\\{text_md[at:]}"
    return text_md


def clip(text: object, limit: int) -> str:
    """`text` on one line, at most `limit` characters: cut at the last word break that keeps
    at least two thirds of it (a number or a path is never cut in half), then `…`."""
    line = " ".join(str(text).split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    space = cut.rfind(" ")
    if space >= (2 * limit) // 3:
        cut = cut[:space].rstrip(" ,;:—-")
    return cut + "…"


def md_cell(text: object, limit: int = 160) -> str:
    """`text` as one markdown table cell: whitespace collapsed, at most `limit` characters
    (cut at a word break before escaping, so no entity is cut in half), shown literally."""
    return md_text(clip(text, limit))


def md_code(text: object, limit: int = 200) -> str:
    """`text` as inline code that a table cell can hold: a code span, kept as typed (GitHub
    links no mention, reference or URL inside code, so an id such as `text@seq=8` pastes
    back into `--select` as it reads); text holding a `|` (which a table cell cannot carry
    inside a code span outside GFM's own escape) as escaped HTML code instead."""
    line = clip(text, limit)
    if "|" in line or not line.strip():
        return f"<code>{md_text(line)}</code>"
    return code_span(line, table=True)


def code_span(text: object, table: bool = False) -> str:
    """`text` as a markdown code span: on one line (a blank line would end it), fenced with
    one backtick more than its longest run, padded where it starts or ends with a backtick
    or space. GitHub acts on nothing inside code, so the text is kept as typed; `table`:
    `|` escaped, as a GFM table cell needs even inside code."""
    raw = " ".join(_BIDI.sub("", strip_control(str(text))).split())
    if not raw:
        return ""
    fence = "`" * (max((len(r) for r in _BACKTICKS.findall(raw)), default=0) + 1)
    pad = " " if raw[0] in "` " or raw[-1] in "` " else ""
    body = raw.replace("|", "\\|") if table else raw
    return f"{fence}{pad}{body}{pad}{fence}"


def code_block(text: object, lang: str = "") -> str:
    """`text` as a fenced code block whose fence is longer than any backtick run in it, so
    nothing inside can close it; kept as typed (a repro script must still run)."""
    raw = _BIDI.sub("", strip_control(str(text))).rstrip("\n")
    fence = "`" * max(3, max((len(r) for r in _BACKTICKS.findall(raw)), default=0) + 1)
    return f"{fence}{lang}\n{raw}\n{fence}"


GITHUB = "https://github.com"
# A page the tool links to: an issue, a pull request or an Actions run of owner/repo.
_PAGE = r"/[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9_.-]{1,100}/(?:issues|pull|actions/runs)/\d+"


def github_url(repo: str, kind: str, number: int | str, server: str = GITHUB) -> str | None:
    """`server/repo/kind/number`, or None unless each part is what GitHub would name."""
    url = f"{server.rstrip('/')}/{repo}/{kind}/{number}"
    return url if re.fullmatch(re.escape(server.rstrip("/")) + _PAGE, url) else None


def run_url(env: Mapping[str, str]) -> str | None:
    """The Actions run page this job belongs to (its artifacts are listed there), from the
    variables every job has; None outside Actions."""
    run_id = env.get("GITHUB_RUN_ID", "")
    if not run_id:
        return None
    return github_url(env.get("GITHUB_REPOSITORY", ""), "actions/runs", run_id,
                      env.get("GITHUB_SERVER_URL", "") or GITHUB)


def md_link(label: object, url: str | None, server: str = GITHUB) -> str:
    """A markdown link labelled `label` (inert) when `url` is an issue, pull request or run
    page on `server` (github.com unless the workflow's own server); else the label alone.
    The only way a link gets into what the tool posts."""
    shown = md_text(label)
    if url and re.fullmatch(re.escape(server.rstrip("/")) + _PAGE, url):
        return f"[{shown}]({url})"
    return shown
