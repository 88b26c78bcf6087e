"""Which dtypes eager accepts for each variant: found by trying eager, cached per torch version.

A record says which dtypes *may* make sense (`OpVariant.dtypes`, all of them
unless the op's meaning restricts it, e.g. a cast from float); which of those
eager actually accepts is a property of the torch build, so it is measured:
each variant's call runs once per dtype on ordinary inputs in a subprocess
(the parent never imports torch), and a dtype whose call raises is not
planned at all. The answer is cached in one JSON file per torch version:

* `accepted-dtypes.json` next to the catalogue, committed, for the pinned
  torch: every machine of the pinned versions plans the same case ids
  (the baseline's universe) without starting torch for `--list`;
* otherwise `$XDG_CACHE_HOME/parity-gate/` (default `~/.cache/parity-gate/`),
  computed once per torch version and catalogue, reused afterwards.

A cache entry is keyed by the variant's call and args (`signature`), so an
edited record is probed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from parity_gate.errors import UserError
from parity_gate.ops.records import DTYPES, NORMAL, OpVariant

BUNDLED = Path(__file__).with_name("accepted-dtypes.json")


def torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "unknown"


def signature(v: OpVariant) -> str:
    """What eager's acceptance depends on: the call, the args and the candidate dtypes."""
    text = repr((v.call, v.args, v.dtypes))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/parity-gate` (default `~/.cache/parity-gate`), checked before any
    work: a file or a link where a folder belongs is one located error (exit 2), not an
    internal error minutes into a build."""
    from parity_gate.errors import UserError
    from parity_gate.model.files import kind_of

    given = os.environ.get("XDG_CACHE_HOME")
    base = Path(given) if given else Path.home() / ".cache"
    root = base / "parity-gate"
    name = "XDG_CACHE_HOME" if given else "~/.cache"
    if os.path.lexists(base) and not base.is_dir():
        raise UserError(f"{name}: {base} is {kind_of(base)} (expected a folder for caches)")
    if os.path.lexists(root) and (root.is_symlink() or not root.is_dir()):
        raise UserError(f"{name}: {root} is {kind_of(root)} (expected parity-gate's own "
                        "folder of caches, never a link)")
    return root


def cache_path(version: str) -> Path:
    return cache_root() / f"accepted-dtypes-torch-{version}.json"


class Entry(BaseModel):
    """What one probe found: the variant's signature then, and the dtypes eager took."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    signature: str
    dtypes: list[str]

    @field_validator("dtypes")
    @classmethod
    def _known(cls, dtypes: list[str]) -> list[str]:
        unknown = [d for d in dtypes if d not in DTYPES]
        if unknown:
            raise ValueError(f"unknown dtype {unknown[0]!r} (expected some of "
                             f"{', '.join(DTYPES)})")
        return dtypes


class AcceptedFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    torch: str
    variants: dict[str, Entry]


def _read(path: Path, version: str) -> tuple[dict[str, Entry], bool]:
    """The file's entries for this torch, validated as a whole, and whether it was
    malformed: then one warning and no entries (what it held is probed again and the
    cache rewritten)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, False
    except (OSError, ValueError) as err:
        return _malformed(path, str(err))
    try:
        data = json.loads(text)
    except ValueError as err:
        return _malformed(path, f"invalid JSON: {err}")
    if isinstance(data, dict) and data.get("torch") != version:
        return {}, False  # another torch's probes: not wrong, only not these
    try:
        return AcceptedFile.model_validate(data).variants, False
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        return _malformed(path, f"{where}: {first['msg']}")


def _malformed(path: Path, why: str) -> tuple[dict[str, Entry], bool]:
    print(f"parity-gate ops: warning: {path}: malformed accepted-dtypes cache ({why}); "
          "rebuilding it", file=sys.stderr)
    return {}, True


def accepted(variants: dict[str, OpVariant], sources: tuple[str, ...],
             bundled: Path = BUNDLED) -> dict[str, tuple[str, ...]]:
    """variant id → the dtypes eager accepts (in DTYPES order), probing what no cache knows."""
    version = torch_version()
    home, malformed = _read(cache_path(version), version)
    known = {**_read(bundled, version)[0], **home}
    found: dict[str, tuple[str, ...]] = {}
    missing: list[str] = []
    for vid, v in variants.items():
        entry = known.get(vid)
        if entry is not None and entry.signature == signature(v):
            found[vid] = tuple(d for d in DTYPES if d in entry.dtypes)
        else:
            missing.append(vid)
    if missing or malformed:
        probed = run_probe(sources, missing) if missing else {}
        found.update(probed)
        _write(cache_path(version), version, variants, {**known}, probed)
    return found


def _write(path: Path, version: str, variants: dict[str, OpVariant],
           known: dict[str, Entry], probed: dict[str, tuple[str, ...]]) -> None:
    """Best effort: a read-only home only costs the next run another probe."""
    entries: dict[str, Any] = {k: e.model_dump() for k, e in known.items()}
    entries.update({vid: {"signature": signature(variants[vid]), "dtypes": list(d)}
                    for vid, d in probed.items()})
    text = json.dumps({"torch": version, "variants": dict(sorted(entries.items()))}, indent=1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def run_probe(sources: tuple[str, ...], ids: list[str]) -> dict[str, tuple[str, ...]]:
    """Try eager in a fresh interpreter (torch stays out of this process)."""
    cmd = [sys.executable, "-m", "parity_gate.ops.accepted", *sources]
    try:
        done = subprocess.run(cmd, input=json.dumps(ids), capture_output=True, text=True,
                              timeout=600, check=False)
    except subprocess.TimeoutExpired:
        raise UserError("ops: probing which dtypes eager accepts took over 10 minutes "
                        "(expected seconds; is the machine swapping?)") from None
    if done.returncode != 0:
        raise UserError(f"ops: probing which dtypes eager accepts failed (exit "
                        f"{done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return {k: tuple(v) for k, v in json.loads(done.stdout).items()}


def probe(variants: dict[str, OpVariant], ids: list[str]) -> dict[str, list[str]]:
    """In a torch process: each variant's call on ordinary inputs of every candidate dtype."""
    import torch

    from parity_gate.engine.tensors import to_torch
    from parity_gate.ops.inputs import make_inputs
    from parity_gate.ops.worker import compile_call

    torch.set_num_threads(1)
    out: dict[str, list[str]] = {}
    for n, vid in enumerate(ids):
        v = variants[vid]
        fn = compile_call(v, n)
        ok = []
        for dtype in v.dtypes:
            inputs = make_inputs(v, dtype, NORMAL)
            try:
                tensors = [to_torch(inputs[a.name], requires_grad=a.requires_grad)
                           for a in v.args]
                with torch.no_grad() if not any(a.requires_grad for a in v.args) \
                        else torch.enable_grad():
                    fn(*tensors)
            except Exception:
                continue
            ok.append(dtype)
        out[vid] = ok
    return out


def main(argv: list[str]) -> int:
    """`python -m parity_gate.ops.accepted SOURCE...` (ids on stdin, JSON out), or
    `--bundle` to rewrite the committed file for the installed (pinned) torch."""
    import warnings

    from parity_gate.ops.jobs import DEFAULT_SOURCES
    from parity_gate.ops.registry import load_variants

    warnings.simplefilter("ignore")
    if argv[:1] == ["--bundle"]:
        variants = load_variants(DEFAULT_SOURCES)
        probed = probe(variants, sorted(variants))
        _write(BUNDLED, torch_version(), variants, {},
               {k: tuple(v) for k, v in probed.items()})
        print(f"wrote {BUNDLED} ({len(probed)} variants, torch {torch_version()})")
        return 0
    variants = load_variants(tuple(argv))
    ids = json.loads(sys.stdin.read())
    print(json.dumps(probe(variants, ids)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
