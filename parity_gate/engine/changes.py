"""Why an export missed the cache: what changed since the last export of the same module.

A translation's key is one digest of everything it depends on (engine.cached), so a miss
alone cannot say which of them changed. Next to the entries the cache keeps, per (module,
dtype), a record of the key's parts as short digests or values: the program's graph (each
node's op, arguments, metadata and source lines), each weight, buffer and constant by
name, its signature, ranges and call trees (engine.programs), each entry of the export
call, the exporter stack's versions and parity-gate's export code. A miss compares this
export's record with the last one. The records only explain: no key reads them, so a
stale or damaged record costs a wrong sentence, never a wrong translation.

Pure functions of data (no torch, no files).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

SHOWN = 3       # differences named per miss
NAMES = 3       # names listed per difference (weights, call entries)
_VALUE = 40     # a call entry's value is shown up to this many characters


def record(key: str, program: str, call: Mapping[str, Any], versions: Mapping[str, str],
           own_version: str, own_call: str) -> dict[str, Any]:
    """One export's record: its translation key, its parts and its program's nodes. The
    program's parts come with its digest (`programs.ProgramDigest`); a plain digest string
    records the program as one part."""
    parts: dict[str, str] = {f"program:{k}": v
                             for k, v in getattr(program, "parts", {"graph": program}).items()}
    parts.update({f"call:{k}": _value(v) for k, v in call.items()})
    parts.update({f"version:{k}": str(v) for k, v in versions.items()})
    parts["version:parity-gate"] = own_version
    parts["code:exporting"] = own_call[:16]
    return {"key": key, "parts": parts, "nodes": list(getattr(program, "nodes", []))}


def _value(value: Any) -> str:
    """A call entry as shown (`18`, `['y']`); a long one cut, with a digest of the whole so
    that two values alike in their first characters still differ."""
    text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
    if len(text) <= _VALUE:
        return text
    return f"{text[:_VALUE - 12]}… #{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def explain(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """The sentence a miss is reported with: what changed between the two records."""
    found = what_changed(before, after)
    if not found:
        return ("translation not reused: nothing it depends on changed since the export "
                "recorded last; its entry is gone (pruned, or damaged and removed)")
    more = len(found) - SHOWN
    return ("translation not reused: " + "; ".join(found[:SHOWN])
            + (f"; and {more} more change{'s' * (more > 1)}" if more > 0 else ""))


def what_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Each difference between two records, most telling first: the exporter stack, the
    export code and call, the weights, buffers and constants, then the graph and the rest
    of the program."""
    old: Mapping[str, str] = before.get("parts") or {}
    new: Mapping[str, str] = after.get("parts") or {}
    changed = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
    out: list[str] = []
    versions = [f"{k.split(':', 1)[1]} {old.get(k, 'absent')} → {new.get(k, 'absent')}"
                for k in changed if k.startswith("version:")]
    if versions:
        out.append(", ".join(versions))
    if "code:exporting" in changed:
        out.append("parity-gate's export code changed (engine/exporting.py)")
    calls = [f"{k.split(':', 1)[1]} {old.get(k, 'absent')} → {new.get(k, 'absent')}"
             for k in changed if k.startswith("call:")]
    if calls:
        out.append(f"the export call changed ({_some(calls)})")
    for kind, words in (("weight", "the weights"), ("buffer", "the buffers"),
                        ("constant", "the constants")):
        names = [_named(k, old, new) for k in changed if k.startswith(f"program:{kind}:")]
        if names:
            out.append(f"{words} changed ({_some(names)})")
    if "program:graph" in changed:
        out.append(_graph(before.get("nodes") or [], after.get("nodes") or []))
    for part, words in (("signature", "the program's signature changed (which inputs are "
                                      "weights, buffers, constants or user inputs)"),
                        ("ranges", "the dynamic dims' ranges changed"),
                        ("calls", "the structure of the inputs or outputs changed")):
        if f"program:{part}" in changed:
            out.append(words)
    return out


def _named(key: str, old: Mapping[str, str], new: Mapping[str, str]) -> str:
    name = key.split(":", 2)[2]
    return f"{name} (new)" if key not in old else f"{name} (gone)" if key not in new else name


def _some(items: Sequence[str]) -> str:
    more = len(items) - NAMES
    return ", ".join(items[:NAMES]) + (f" and {more} more" if more > 0 else "")


def _graph(old: Sequence[Sequence[str]], new: Sequence[Sequence[str]]) -> str:
    """The first node that differs: its op, else what about it (arguments, values' shapes
    and dtypes, the source lines and module it was traced from)."""
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if list(a) == list(b):
            continue
        where = f"node {i} ({b[0]})"
        ops_old, ops_new = [n[1] for n in old], [n[1] for n in new]
        if len(new) > len(old) and ops_new[i + 1:] == ops_old[i:]:
            return f"the graph changed ({where} added: {_op(b[1])})"
        if len(old) > len(new) and ops_old[i + 1:] == ops_new[i:]:
            return f"the graph changed (node {i} ({a[0]}) removed: {_op(a[1])})"
        if a[1] != b[1]:
            return f"the graph changed ({where}: {_op(a[1])} → {_op(b[1])})"
        if a[2] != b[2]:
            return f"the graph changed ({where}: {_op(b[1])}'s arguments)"
        if a[3] != b[3]:
            return f"the graph changed ({where}: the shapes, dtypes or symbols of its values)"
        return (f"the code the graph was traced from changed ({where}, {_op(b[1])}: its "
                "source lines or module path; code above it moved, say)")
    if not old or not new:
        return "the captured program changed"  # nodes not recorded
    if len(old) != len(new):
        i = min(len(old), len(new))
        extra = new[i] if len(new) > len(old) else old[i]
        return (f"the graph changed ({len(old)} → {len(new)} nodes, from node {i}: "
                f"{_op(extra[1])} {'added' if len(new) > len(old) else 'removed'})")
    return "the graph changed (a tensor a subgraph holds)"


def _op(target: str) -> str:
    """`aten.relu.default` as `aten.relu`; an overload other than the default is kept."""
    return target.removesuffix(".default")
