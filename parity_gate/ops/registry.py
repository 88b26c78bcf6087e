"""Resolve `module:ATTR` catalogue sources into variants keyed by id (parent and worker)."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from parity_gate.ops.records import OpVariant

_CACHE: dict[tuple[str, ...], dict[str, OpVariant]] = {}


def load_variants(sources: Iterable[str]) -> dict[str, OpVariant]:
    key = tuple(sources)
    if key not in _CACHE:
        out: dict[str, OpVariant] = {}
        for source in key:
            module_name, _, attr = source.partition(":")
            variants = getattr(importlib.import_module(module_name), attr or "VARIANTS")
            for v in variants:
                if v.id in out:
                    raise ValueError(f"duplicate op variant id {v.id!r} (in {source})")
                out[v.id] = v
        _CACHE[key] = out
    return _CACHE[key]
