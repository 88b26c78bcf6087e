"""Case keys, their stable ids, and the one glob rule every tool matches ids with."""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Record


@dataclass(frozen=True, order=True, config=CONFIG)
class CaseKey(Record):
    """One case: what ran, on which inputs, at which batch size, on which provider.

    `inputs` is the fixture set for a module case and the input class (e.g.
    `specials`) for an op case; op cases have no batch size (None).
    """

    module: str
    dtype: str
    inputs: str
    batch_size: int | None
    provider: str

    @property
    def id(self) -> str:
        """Stable id that baselines, merges, `--select` and `--compare-to` key on."""
        return f"{self.module}/{self.junit_name}"

    @property
    def junit_name(self) -> str:
        batch = "" if self.batch_size is None else f"/b{self.batch_size}"
        return f"{self.dtype}/{self.inputs}{batch}/{self.provider}"

    @property
    def sort_key(self) -> tuple[str, str, str, int, str]:
        """Numeric batch order (b2 before b10) whatever the other fields hold."""
        return (self.module, self.dtype, self.inputs, -1 if self.batch_size is None
                else self.batch_size, self.provider)


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    whole = fnmatch.translate(pattern.replace("**", "*"))
    under = fnmatch.translate(pattern.rstrip("/").replace("**", "*") + "/*")
    return re.compile(f"(?:{whole})|(?:{under})")


GLOB_CHARS = "*?["


def is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in GLOB_CHARS)


def matches(case_id: str, pattern: str) -> bool:
    """The one rule: `pattern` matches the whole id as a shell glob (`*` and `**` both
    cross `/`, `?` is one character, `[...]` a set), or names a prefix of whole
    segments (`mlp`, `mlp/float16`) and so selects everything under it."""
    return case_id == pattern or _compiled(pattern).match(case_id) is not None


def matches_any(case_id: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """No patterns select everything."""
    return not patterns or any(matches(case_id, p) for p in patterns)


def _glob_tokens(pattern: str) -> list[str]:
    """`pattern` as glob tokens: `*` (any run, `**` too), `?`, a `[...]` set, a character."""
    tokens: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        end = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("!", "]") else i + 1) \
            if ch == "[" else -1
        if ch == "[" and end > i:
            tokens.append(pattern[i:end + 1])
            i = end + 1
            continue
        if ch != "*" or not tokens or tokens[-1] != "*":
            tokens.append(ch)
        i += 1
    return tokens


def could_match(pattern: str, prefix: str) -> bool:
    """Whether some id that starts with `prefix` matches `pattern` (by `matches`' rule): a
    `shapes: auto` probe's id is known only once its module is exported, its
    `module/dtype/` before."""
    tokens = _glob_tokens(pattern)

    def closure(states: set[int]) -> set[int]:
        more = {s + 1 for s in states if s < len(tokens) and tokens[s] == "*"}
        return states | closure(more - states) if more - states else states

    states = closure({0})
    for ch in prefix:
        step: set[int] = set()
        for s in states:
            if s == len(tokens):
                # past the pattern's end only the segment-prefix rule goes on (`mlp` → `mlp/..`)
                continue
            token = tokens[s]
            if token == "*":
                step.add(s)
            elif token == "?" or fnmatch.fnmatchcase(ch, token):
                step.add(s + 1)
        if not step:
            return prefix.startswith(pattern.rstrip("/") + "/")
        states = closure(step)
    return True
