"""A good or a bad environment as a package set: from a results.json (the versions the run
recorded), a requirements or lock file (its `==` pins), or `pkg==ver,pkg==ver`."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from parity_gate.errors import UserError

# What bisect moves by default: the exporter stack (the user adds their own with --package).
STACK = ("torch", "onnxscript", "onnx", "onnxruntime", "onnxruntime-gpu")


# pip requirement lines that name no version: a URL (`git+https://...#egg=x`), a local path
# or archive. Valid for pip, silent about which version ran: skipped, with a note.
_UNVERSIONED = ("git+", "hg+", "svn+", "bzr+", "http://", "https://", "file:", ".", "/", "~")


def version_of(value: object, where: str, name: str) -> str:
    """`value` when it is a PEP 440 version (a local one, `2.13.0+cpu`, too); a located
    UserError otherwise: a version is handed to pip, so nothing else may pass."""
    text = str(value).strip()
    try:
        Version(text)
    except InvalidVersion:
        raise UserError(f"{where}: {name}: {text[:80]!r} is not a version (expected a PEP 440 "
                        "version such as 0.7.2)") from None
    return text


def parse_pins(text: str, where: str) -> dict[str, str]:
    """`name==version` items separated by commas or newlines; `#` comments and pip options
    ignored, as are lines naming no version (a URL, a path: said on stderr); anything else
    that is not an exact pin is an error naming the line."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.replace(",", "\n").splitlines(), 1):
        line = raw.split(" #", 1)[0].split("\\", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        if line.startswith(_UNVERSIONED) or "://" in line:
            print(f"parity-gate bisect: {where}:{n}: {line[:80]!r} names no version (a URL "
                  "or a path): skipped", file=sys.stderr)
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            first = str(exc).splitlines()[0] if str(exc) else "invalid"
            raise UserError(f"{where}:{n}: {line[:80]!r} is not a requirement ({first})"
                            ) from None
        spec = list(req.specifier)
        if req.url or len(spec) != 1 or spec[0].operator not in ("==", "==="):
            continue  # a range (or a URL) says nothing about which version ran
        name = canonicalize_name(req.name)
        out[name] = version_of(spec[0].version, f"{where}:{n}", name)
    return out


def _lock(path: Path) -> dict[str, str]:
    """uv.lock / poetry.lock / pylock.toml: `[[package]]` tables with name and version."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        try:
            import tomli as tomllib  # type: ignore[import-not-found]
        except ImportError:
            raise UserError(f"{path}: reading a TOML lock file needs Python >= 3.11 "
                            "or tomli") from None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not a TOML lock file ({exc})") from None
    packages = data.get("package") or data.get("packages") or []
    return {canonicalize_name(str(p["name"])): version_of(p["version"], str(path),
                                                          str(p["name"]))
            for p in packages if isinstance(p, dict) and "name" in p and "version" in p}


def _results(path: Path, data: Any) -> dict[str, str]:
    versions = data.get("versions") if isinstance(data, dict) else None
    if not isinstance(versions, dict):
        raise UserError(f"{path}: no `versions` object (expected a parity-gate results.json)")
    return {canonicalize_name(k): version_of(v, f"{path}: versions", k)
            for k, v in versions.items()
            if isinstance(v, str) and k not in ("python", "platform", "tool")}


def same_release(a: str | None, b: str | None) -> bool:
    """Whether two versions are one release as pip compares them: `2.13.0+cpu` (a local
    build's label) is release 2.13.0, and `1.0` is `1.0.0`."""
    if a is None or b is None:
        return a is b
    try:
        return Version(Version(a).public) == Version(Version(b).public)
    except InvalidVersion:
        return a == b


def load_set(spec: str, flag: str = "") -> tuple[dict[str, str], str]:
    """(pins, what it was read from) for --good/--bad."""
    path = Path(spec)
    if path.is_file() and path.suffix in (".yml", ".yaml"):
        raise UserError(f"{flag + ' ' if flag else ''}{path}: a YAML file (the manifest?), not "
                        "a package set (expected a results.json, a requirements or lock "
                        "file, or pins like onnxscript==0.5.3)")
    if path.is_file():
        if path.suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
            return _results(path, data), f"{path} (recorded versions)"
        if path.suffix in (".lock", ".toml"):
            return _lock(path), f"{path} (lock file)"
        return parse_pins(path.read_text(encoding="utf-8"), str(path)), f"{path} (pins)"
    if "==" not in spec:
        raise UserError(f"{spec}: not a file, and not pins like onnxscript==0.5.3 "
                        "(expected a results.json, a requirements or lock file, or pkg==ver)")
    return parse_pins(spec, "pins"), "pins"


def load_sets(specs: list[str], flag: str) -> tuple[dict[str, str], dict[str, str]]:
    """Several specs as one set (a pull request's requirements.txt and constraints.txt), and
    where each package's pin was read; a package two of them pin at different releases is
    a located error."""
    pins: dict[str, str] = {}
    where: dict[str, str] = {}
    for spec in specs:
        more, said = load_set(spec, flag)
        for name, version in more.items():
            if name in pins and not same_release(pins[name], version):
                raise UserError(f"{flag} {spec}: {name}=={version}, but {where[name]} pins "
                                f"{name}=={pins[name]} (expected one release per package)")
            pins.setdefault(name, version)
            where.setdefault(name, said)
    return pins, where


def differing(good: dict[str, str], bad: dict[str, str],
              packages: tuple[str, ...] | list[str]) -> list[str]:
    """The packages bisected: those asked for that both sets pin and that are not one
    release (`2.13.0+cpu` and `2.13.0` are one)."""
    names = [canonicalize_name(p) for p in packages]
    return [p for p in names if p in good and p in bad and not same_release(good[p], bad[p])]


def set_problem(good: dict[str, str], bad: dict[str, str], names: list[str],
                asked: list[str], good_from: Mapping[str, str],
                bad_from: Mapping[str, str]) -> str:
    """Why the two sets cannot be bisected ("" when they can): a package pinned on one side
    only (bisect would drop it and blame another), a --package neither side pins, or pins
    naming a package bisect does not move (a typo: it would be dropped silently)."""
    for name in (canonicalize_name(n) for n in names):
        if (name in good) != (name in bad):
            side, other = ("--good", "--bad") if name in good else ("--bad", "--good")
            where = good_from.get(name, "") if name in good else bad_from.get(name, "")
            return (f"{side} {where}: {name}=={(good | bad)[name]} has no pin in {other} "
                    f"(expected both sides to pin {name}, or neither)")
    for name in (canonicalize_name(n) for n in asked):
        if name not in good and name not in bad:
            return (f"--package {name}: pinned in neither --good nor --bad (expected a "
                    "package both sets pin)")
    known = {canonicalize_name(n) for n in names}
    for flag, pins, source in (("--good", good, good_from), ("--bad", bad, bad_from)):
        stray = [p for p in pins if p not in known and source.get(p) == "pins"]
        if stray:
            return (f"{flag}: {stray[0]}: not a package bisect moves (expected one of "
                    f"{', '.join(sorted(known))}; --package {stray[0]} adds your own)")
    return ""
