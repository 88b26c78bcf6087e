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
