"""Load `parity.yml` and report every problem at once as `file:line:col: key.path: ...`.

The shared YAML-with-positions loader (`located`) keeps the position of every
key and value, so a pydantic error location is pointed back at the line the
user has to edit. Cross-references the schema cannot express (fixture names,
input coverage, files on disk) are checked here too, with the same locations.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from parity_gate.errors import UserError
from parity_gate.manifest.located import (
    Loc,
    Phrasing,
    Problems,
    load_document,
    parse_yaml,
    validate,
)
from parity_gate.manifest.located import did_you_mean as _did_you_mean
from parity_gate.manifest.models import Manifest, ModuleSpec

__all__ = ["load_manifest", "parse_yaml"]

# What the schema's patterns and tagged unions mean, in the words of the error lines.
def _pattern(model: type[BaseModel], name: str) -> str:
    return next(m.pattern for m in model.model_fields[name].metadata
                if isinstance(getattr(m, "pattern", None), str))


PHRASING = Phrasing(
    patterns={
        _pattern(ModuleSpec, "factory"): "`package.module:callable`",
        _pattern(ModuleSpec, "name"): "a name of letters, digits, `_`, `.` or `-`",
    },
    tags={"kind": "fixture kind"},
)


def load_manifest(path: str | Path) -> Manifest:
    """Parse and fully validate a manifest, or raise UserError listing every problem."""
    p = Path(path)
    display = str(path)
    if not p.is_file():
        raise UserError(f"{display}: manifest not found (expected a parity.yml file)")
    doc = load_document(p.read_text(encoding="utf-8"), display)
    problems = Problems(doc)
    if not isinstance(doc.data, dict):
        problems.add((), "expected a mapping with `fixtures` and `modules` keys")
        problems.raise_if_any()
    problems.add_duplicate_keys()
    manifest = validate(problems, Manifest, PHRASING)
    _check_references(doc.data, p.resolve().parent, problems)
    problems.raise_if_any()
    assert manifest is not None  # no problems means the schema accepted it
    return manifest


def _check_references(data: dict[str, Any], base: Path, problems: Problems) -> None:
    """What the schema alone cannot check: names, coverage, files, importability.

    Works on the raw YAML data (skipping parts the schema already rejected) so
    these problems are reported in the same pass as schema errors.
    """
    fixtures: dict[Any, Any] = data["fixtures"] if isinstance(data.get("fixtures"), dict) else {}
    providers = data.get("providers")
    declared = list(providers) if isinstance(providers, dict) else ["cpu"]
    python_path = [p for p in _as_list(data.get("python_path")) if isinstance(p, str)]
    seen: dict[str, int] = {}
    for i, module in enumerate(_as_list(data.get("modules"))):
        if not isinstance(module, dict):
            continue
        mloc: Loc = ("modules", i)
        name = module.get("name")
        if isinstance(name, str):
            if name in seen:
                problems.add((*mloc, "name"), f"duplicate module name {name!r} (expected "
                             f"unique names; first at modules[{seen[name]}])")
            seen.setdefault(name, i)
        input_names = _unique_names(module.get("inputs"), (*mloc, "inputs"), "input", problems)
        _unique_names(module.get("outputs"), (*mloc, "outputs"), "output", problems)
        for j, fname in enumerate(_as_list(module.get("fixtures"))):
            if not isinstance(fname, str):
                continue
            floc = (*mloc, "fixtures", j)
            if fname not in fixtures:
                hint = _did_you_mean(fname, list(fixtures))
                problems.add(floc, f"unknown fixture set {fname!r}{hint} "
                             f"(expected one of: {', '.join(fixtures) or 'none defined'})")
            else:
                _check_coverage(fname, fixtures[fname], input_names, floc, problems)
        for k, prov in enumerate(_as_list(module.get("providers"))):
            if isinstance(prov, str) and prov in ("cpu", "cuda", "tensorrt") \
                    and prov not in declared:
                problems.add((*mloc, "providers", k),
                             f"provider {prov!r} is not declared in the top-level `providers` "
                             f"(expected one of: {', '.join(declared)})")
        factory = module.get("factory")
        if isinstance(factory, str) and ":" in factory:
            _check_factory(factory, python_path, base, (*mloc, "factory"), problems)
    for name, fixture in fixtures.items():
        if isinstance(fixture, dict):
            _check_fixture(str(name), fixture, base, problems)
    for i, entry in enumerate(python_path):
        if not (base / entry).is_dir():
            problems.add(("python_path", i), f"folder {entry!r} not found (expected a folder "
                         "relative to the manifest)")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _unique_names(entries: Any, loc: Loc, what: str, problems: Problems) -> list[str]:
    names: list[str] = []
    for j, entry in enumerate(_as_list(entries)):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            continue
        if name in names:
            problems.add((*loc, j, "name"),
                         f"duplicate {what} {name!r} (expected unique {what} names)")
        names.append(name)
    return names


def _check_fixture(name: str, fixture: dict[str, Any], base: Path,
                   problems: Problems) -> None:
    floc: Loc = ("fixtures", name)
    if fixture.get("kind") == "file":
        path = fixture.get("path")
        if not isinstance(path, str):
            return
        target = base / path
        if target.suffix not in (".npy", ".npz", ".pt", ".pth"):
            problems.add((*floc, "path"), f"unsupported file type {target.suffix or path!r} "
                         "(expected .npy, .npz or .pt)")
        elif not target.is_file():
            problems.add((*floc, "path"), f"file {path!r} not found next to the manifest "
                         "(expected an existing .npy, .npz or .pt file)")
        return
    inputs = fixture.get("inputs")
    dims: dict[Any, Any] = fixture["dims"] if isinstance(fixture.get("dims"), dict) else {}
    if not isinstance(inputs, dict):
        return
    for iname, spec in inputs.items():
        shape = spec.get("shape") if isinstance(spec, dict) else None
        for k, dim in enumerate(_as_list(shape)):
            if isinstance(dim, str) and dim != "batch" and dim not in dims:
                hint = _did_you_mean(dim, ["batch", *dims])
                problems.add((*floc, "inputs", iname, "shape", k),
                             f"unknown dim symbol {dim!r}{hint} (expected an integer, `batch` "
                             "or a key of this fixture set's `dims`)")
            elif isinstance(dim, int) and not isinstance(dim, bool) and dim < 0:
                problems.add((*floc, "inputs", iname, "shape", k),
                             f"got {dim} (expected a size >= 0)")


def _check_coverage(fname: str, fixture: Any, input_names: list[str], loc: Loc,
                    problems: Problems) -> None:
    if not isinstance(fixture, dict) or not isinstance(fixture.get("inputs"), dict):
        return  # file sets: keys are checked when the file is read, in the worker
    provided = set(map(str, fixture["inputs"]))
    missing = [n for n in input_names if n not in provided]
    extra = sorted(provided - set(input_names))
    if missing:
        problems.add(loc, f"fixture set {fname!r} has no tensor for input(s) "
                     f"{', '.join(missing)} (expected keys {', '.join(input_names)} "
                     "under its `inputs`)")
    if extra and input_names:
        problems.add(loc, f"fixture set {fname!r} defines input(s) {', '.join(extra)} "
                     f"the module does not take (expected {', '.join(input_names)})")


def _check_factory(factory: str, python_path: list[str], base: Path, loc: Loc,
                   problems: Problems) -> None:
    """Find the factory's module file without importing it (imports happen in workers)."""
    module_path = factory.split(":", 1)[0]
    if not all(part.isidentifier() for part in module_path.split(".")):
        return  # the schema reports the malformed path
    rel = Path(*module_path.split("."))
    roots = [base / p for p in python_path] + [base]
    for root in roots:
        if (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file():
            return
    top = module_path.split(".")[0]
    try:
        if importlib.util.find_spec(top) is not None:
            return
    except (ImportError, ValueError):
        pass
    problems.add(loc, f"cannot find module {module_path!r} (expected a file "
                 f"{rel}.py under the manifest folder or `python_path`, or an installed package)")
