"""Load `parity.yml` and report every problem at once as `file:line:col: key.path: ...`.

The shared YAML-with-positions loader (`located`) keeps the position of every
key and value, so a pydantic error location is pointed back at the line the
user has to edit. Cross-references the schema cannot express (fixture names,
input coverage, files on disk) are checked here too, with the same locations.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from parity_gate.errors import UserError
from parity_gate.manifest.limits import Oversize, oversize_message, oversized
from parity_gate.manifest.located import (
    Document,
    Loc,
    Phrasing,
    Problems,
    format_path,
    load_document,
    parse_yaml,
    position,
    read_text,
    validate,
)
from parity_gate.manifest.located import did_you_mean as _did_you_mean
from parity_gate.manifest.models import Manifest, ModuleSpec
from parity_gate.manifest.options import export_option_problem, provider_option_problem

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
    """Parse and fully validate a manifest and the files it includes, or raise UserError
    listing every problem of every file."""
    p = Path(path)
    display = str(path)
    if not p.exists():
        raise UserError(f"{display}: manifest not found (expected a parity.yml file)")
    sources: list[_Source] = []
    _read(p, display, sources, chain=())
    main = sources[-1]
    merged = _merge(sources)
    roots = [str(Path(r)) for r in merged["python_path"]]
    declared = list(merged["providers"]) or ["cpu"]
    for src in sources:
        _check_references(src.doc.data, src.base, src.problems, merged["fixtures"], declared,
                          roots)
    for key in ("fixtures", "modules"):
        if not merged[key]:
            _required(main, key)
    _raise_all(sources)
    manifest = validate(main.problems, Manifest, PHRASING) if len(sources) == 1 else \
        _validate_merged(main, merged)
    _raise_all(sources)
    assert manifest is not None  # no problems means the schema accepted it
    _check_sizes(manifest, sources, merged["origins"])
    _raise_all(sources)
    _attach_locations(manifest, merged["origins"])
    _attach_fixture_locations(manifest, sources)
    return manifest


def _check_sizes(manifest: Manifest, sources: list[_Source],
                 origins: list[tuple[Document, Loc]]) -> None:
    """Cases over `max_case_bytes`, at the batch size or dim that makes them big (once per
    place: the biggest case it makes), with the way to raise the bound."""
    worst: dict[tuple[int, Loc], tuple[_Source, Loc, Oversize]] = {}
    for big in oversized(manifest):
        src, loc = _blame_site(manifest, big, sources, origins)
        key = (id(src), loc)
        if key not in worst or big.need > worst[key][2].need:
            worst[key] = (src, loc, big)
    for src, loc, big in worst.values():
        src.problems.add(loc, oversize_message(big))


def _blame_site(manifest: Manifest, big: Oversize, sources: list[_Source],
                origins: list[tuple[Document, Loc]]) -> tuple[_Source, Loc]:
    """The file and key path where the blamed batch size or dim is written."""
    by_doc = {id(src.doc): src for src in sources}
    doc, mloc = origins[big.index]
    module_src = by_doc[id(doc)]
    if big.blame[0] == "batch":
        module = manifest.modules[big.index]
        if module.batch_sizes is not None:
            return module_src, (*mloc, "batch_sizes", module.batch_sizes.index(big.batch))
        for src in reversed(sources):  # the last file's defaults win the merge
            sizes = _get(src.doc.data, "defaults", "batch_sizes")
            if isinstance(sizes, list) and big.batch in sizes:
                return src, ("defaults", "batch_sizes", sizes.index(big.batch))
        return module_src, mloc  # the built-in batch sizes: said at the module
    owner = _fixture_owner(sources, big.fixture) or module_src
    floc: Loc = ("fixtures", big.fixture)
    if big.blame[0] == "dims":
        _, symbol, item = big.blame
        return owner, (*floc, "dims", symbol) + ((item,) if item is not None else ())
    _, name, k = big.blame
    return owner, (*floc, "inputs", name, "shape", k)


def _required(main: _Source, key: str) -> None:
    data = main.doc.data
    elsewhere = " or in an included file" if data.get("include") else ""
    if key in data:
        main.problems.add((key,), f"got an empty {'list' if key == 'modules' else 'mapping'} "
                          f"(expected at least one entry here{elsewhere})")
    elif not any(_did_you_mean(str(k), [key]) for k in data if k not in Manifest.model_fields):
        # (a misspelt key stands for it otherwise: said once, at the typo)
        main.problems.add((key,), f"required key `{key}` is missing (expected it here"
                          f"{elsewhere})")


@dataclass
class _Source:
    """One file of the manifest (the main one last): its document, problems and folder."""

    doc: Document
    problems: Problems
    base: Path
    included: bool


def _read(path: Path, display: str, sources: list[_Source], chain: tuple[Path, ...]) -> None:
    """Load `path` and, first, everything it includes (depth first, in order)."""
    doc = load_document(read_text(path, "a parity.yml manifest"), display,
                        expected="a parity.yml manifest")
    problems = Problems(doc)
    src = _Source(doc, problems, path.resolve().parent, included=bool(chain))
    if not isinstance(doc.data, dict):
        problems.add((), "expected a mapping with `fixtures` and `modules` keys")
        problems.raise_if_any()
    problems.add_duplicate_keys()
    if validate(problems, Manifest, PHRASING) is not None:
        here = (*chain, path.resolve())
        for i, entry in enumerate(_as_list(doc.data.get("include"))):
            target = src.base / entry
            if not target.is_file():
                problems.add(("include", i), f"file {entry!r} not found (expected a manifest "
                             "relative to this file)")
            elif target.resolve() in here:
                problems.add(("include", i), f"{entry!r} includes this file again (expected "
                             "no include cycle)")
            else:
                _read(target, str(Path(display).parent / entry), sources, here)
    sources.append(src)


def _merge(sources: list[_Source]) -> dict[str, Any]:
    """One manifest's data from all files: later files (the main one last) win settings;
    fixture sets and modules join, each name once; paths become absolute for included files."""
    out: dict[str, Any] = {"python_path": [], "providers": {}, "defaults": {}, "fixtures": {},
                           "modules": [], "origins": []}
    owner: dict[tuple[str, str], tuple[_Source, Loc]] = {}
    for src in sources:
        data = src.doc.data
        if not isinstance(data, dict):
            continue
        for entry in _as_list(data.get("python_path")):
            out["python_path"].append(str(src.base / entry) if src.included else entry)
        if isinstance(data.get("providers"), dict):
            out["providers"].update(data["providers"])
        if "seed" in data:
            out["seed"] = data["seed"]
        if isinstance(data.get("defaults"), dict):
            for key, value in data["defaults"].items():
                if key in ("tolerances", "export") and isinstance(value, dict):
                    out["defaults"][key] = {**out["defaults"].get(key, {}), **value}
                else:
                    out["defaults"][key] = value
        fixtures = data.get("fixtures")
        for name, fixture in (fixtures.items() if isinstance(fixtures, dict) else ()):
            if _claimed(owner, ("fixture set", str(name)), src, ("fixtures", name)):
                continue
            if src.included and isinstance(fixture, dict) and fixture.get("kind") == "file" \
                    and isinstance(fixture.get("path"), str):
                fixture = {**fixture, "path": str(src.base / fixture["path"])}
            out["fixtures"][name] = fixture
        for i, module in enumerate(_as_list(data.get("modules"))):
            name = module.get("name") if isinstance(module, dict) else None
            if isinstance(name, str) and \
                    _claimed(owner, ("module", name), src, ("modules", i, "name")):
                continue
            out["modules"].append(module)
            out["origins"].append((src.doc, ("modules", i)))
        for key in data.keys() - _MERGED_APART:  # every other key (localise, ...): later
            value = data[key]                     # files win, mappings key by key
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                value = {**out[key], **value}
            out[key] = value
    return out


# Keys `_merge` joins by their own rule; every other top-level key of the manifest is
# carried over generically, so a new key cannot be dropped by an include.
_MERGED_APART = frozenset({"version", "include", "python_path", "providers", "seed", "defaults",
                           "fixtures", "modules"})


def _claimed(owner: dict[tuple[str, str], tuple[_Source, Loc]], what: tuple[str, str],
             src: _Source, loc: Loc) -> bool:
    """True (and a problem in `src`) when another file already defines this name."""
    first = owner.get(what)
    if first is None:
        owner[what] = (src, loc)
        return False
    if first[0] is src:
        return False  # the same file: its own checks report duplicates
    line, col = position(first[0].doc.node(first[1]))
    src.problems.add(loc, f"{what[0]} {what[1]!r} is also defined in "
                     f"{first[0].doc.display}:{line}:{col} (expected each name once across "
                     "included files)", at_key=loc[0] == "fixtures")
    return True


def _validate_merged(main: _Source, merged: dict[str, Any]) -> Manifest | None:
    data = {k: v for k, v in merged.items() if k != "origins" and (v or k != "providers")}
    data["version"] = 1
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:  # every file passed alone; say so rather than guess a line
        first = exc.errors()[0]
        main.problems.add((), f"the merged manifest is invalid at "
                          f"{'.'.join(map(str, first['loc']))}: {first['msg']} (expected "
                          "included files that fit together)")
        return None


def _raise_all(sources: list[_Source]) -> None:
    lines = [t for src in sources for _, _, t in sorted(src.problems.items)]
    if lines:
        raise UserError(lines)


def _attach_locations(manifest: Manifest, origins: list[tuple[Document, Loc]]) -> None:
    """Where each module's keys are written, for problems the worker finds later."""
    for module, (doc, loc) in zip(manifest.modules, origins, strict=True):
        where = {"": _where(doc, loc), "factory": _where(doc, (*loc, "factory"))}
        for key in ("inputs", "outputs"):
            for j, _ in enumerate(getattr(module, key) or []):
                where[f"{key}[{j}].name"] = _where(doc, (*loc, key, j, "name"))
        if module.cache is not None:  # what only the model's config can refute
            for key in ("cache", "cache.kind", "cache.mask"):
                where[key] = _where(doc, (*loc, *key.split(".")))
            for j, _ in enumerate(module.cache.past_lengths):
                where[f"cache.past_lengths[{j}]"] = _where(doc, (*loc, "cache", "past_lengths",
                                                                 j))
        if module.generation is not None:
            for key in ("generation", "generation.steps"):
                where[key] = _where(doc, (*loc, *key.split(".")))
        module._where = where


def _fixture_owner(sources: list[_Source], name: str) -> _Source | None:
    """The file that defines fixture set `name` (each name is defined once)."""
    return next((src for src in sources
                 if isinstance(fixtures := _get(src.doc.data, "fixtures"), dict)
                 and name in fixtures), None)


def _attach_fixture_locations(manifest: Manifest, sources: list[_Source]) -> None:
    """Where each fixture set is written (the file that defines it), for `check`'s reading
    of fixture files."""
    for name in manifest.fixtures:
        src = _fixture_owner(sources, name)
        if src is None:
            continue
        for key in ("", "path", "keys"):
            manifest._fixture_where[name, key] = _where(
                src.doc, ("fixtures", name, *((key,) if key else ())))


def _where(doc: Document, loc: Loc) -> str:
    node, path = doc.find(loc)
    line, col = position(node)
    return f"{doc.display}:{line}:{col}: {format_path(path)}"


def _check_references(data: dict[str, Any], base: Path, problems: Problems,
                      fixtures: dict[Any, Any], declared: list[Any],
                      python_path: list[str]) -> None:
    """What the schema alone cannot check: names, coverage, files, importability.

    Works on the raw YAML data (skipping parts the schema already rejected) so
    these problems are reported in the same pass as schema errors; `fixtures`,
    `declared` providers and `python_path` are those of the whole manifest (all
    included files), so a module may use a fixture set another file defines.
    """
    if not isinstance(data, dict):
        return
    own = data["fixtures"] if isinstance(data.get("fixtures"), dict) else {}
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
        _check_structure(input_names, (*mloc, "inputs"), problems)
        _unique_names(module.get("outputs"), (*mloc, "outputs"), "output", problems)
        _check_generation(module, mloc, fixtures, problems)
        _check_quantize(module, mloc, fixtures, problems)
        _check_extras(module, mloc, problems)
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
                _check_dynamic_rank(fname, fixtures[fname], module, mloc, problems)
        for k, prov in enumerate(_as_list(module.get("providers"))):
            if isinstance(prov, str) and prov in ("cpu", "cuda", "tensorrt") \
                    and prov not in declared:
                problems.add((*mloc, "providers", k),
                             f"provider {prov!r} is not declared in the top-level `providers` "
                             f"(expected one of: {', '.join(declared)})")
        factory = module.get("factory")
        if isinstance(factory, str) and ":" in factory:
            _check_factory(factory, python_path, base, (*mloc, "factory"), problems)
    for name, fixture in own.items():
        if isinstance(fixture, dict):
            _check_fixture(str(name), fixture, base, problems)
    _check_options(data, problems)
    for i, entry in enumerate(_as_list(data.get("python_path"))):
        if isinstance(entry, str) and not (base / entry).is_dir():
            problems.add(("python_path", i), f"folder {entry!r} not found (expected a folder "
                         "relative to the manifest)")


def _check_options(data: dict[str, Any], problems: Problems) -> None:
    """Names in `export.options` (defaults and modules) and `providers.<p>.options` that
    torch.onnx.export or the provider does not take, each at its key."""
    exports: list[tuple[Loc, Any]] = [(("defaults", "export", "options"),
                                       _get(data, "defaults", "export", "options"))]
    exports += [(("modules", i, "export", "options"), _get(m, "export", "options"))
                for i, m in enumerate(_as_list(data.get("modules")))]
    for loc, options in exports:
        for name in options if isinstance(options, dict) else ():
            if (problem := export_option_problem(str(name))) is not None:
                problems.add((*loc, name), problem, at_key=True)
    providers = data.get("providers")
    for provider in providers if isinstance(providers, dict) else ():
        options = _get(providers, provider, "options")
        for name in options if isinstance(options, dict) else ():
            if (problem := provider_option_problem(str(provider), str(name))) is not None:
                problems.add(("providers", provider, "options", name), problem, at_key=True)


def _get(data: Any, *keys: Any) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


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


def _check_structure(names: list[str], loc: Loc, problems: Problems) -> None:
    """Dotted input names are paths into a structured argument (`images.0`, `batch.mask`):
    they must describe one. Not: a name that is both a tensor and a parent (`x`, `x.a`), a
    list with gaps (`x.0`, `x.2`), or parts that mix indices and keys."""
    children: dict[str, list[str]] = {}
    for name in names:
        parts = name.split(".")
        for depth in range(1, len(parts)):
            children.setdefault(".".join(parts[:depth]), []).append(parts[depth])
    for j, name in enumerate(names):
        if name in children:
            problems.add((*loc, j, "name"), f"{name!r} is a whole input and also the parent "
                         f"of {name}.{children[name][0]} (expected either the tensor or its "
                         "parts)")
    for parent, kids in children.items():
        keys = list(dict.fromkeys(kids))
        digits = [k for k in keys if k.isdigit()]
        if digits and (len(digits) != len(keys)
                       or sorted(int(k) for k in keys) != list(range(len(keys)))):
            j = next(j for j, n in enumerate(names) if n.startswith(f"{parent}."))
            problems.add((*loc, j, "name"), f"the parts of {parent!r} are {', '.join(keys)} "
                         "(expected a list numbered 0..n-1, or named keys, not both)")


def _check_generation(module: dict[str, Any], mloc: Loc, fixtures: dict[Any, Any],
                      problems: Problems) -> None:
    """A generation check needs a cache to feed back and a prompt fixture set."""
    gen = module.get("generation")
    if not isinstance(gen, dict):
        return
    if not isinstance(module.get("cache"), dict):
        problems.add((*mloc, "generation"), "a generation check feeds each step's present "
                     "cache back as the next past (expected a `cache:` on this module)")
    prompt = gen.get("prompt")
    if isinstance(prompt, str) and prompt not in fixtures:
        problems.add((*mloc, "generation", "prompt"), f"unknown fixture set {prompt!r}"
                     f"{_did_you_mean(prompt, list(fixtures))} (expected one of: "
                     f"{', '.join(fixtures) or 'none defined'})")


# A module key whose check needs an optional extra: (key, value that needs it or None for
# any, the extra, the modules it installs). Said at load, not as a worker's ImportError.
EXTRAS = (
    ("task", None, "task", ("sklearn", "scipy")),
    ("quantize", ("flow", "pt2e"), "quantized", ("torchao",)),
)


def _check_extras(module: dict[str, Any], mloc: Loc, problems: Problems,
                  table: tuple[tuple[str, tuple[str, str] | None, str, tuple[str, ...]], ...]
                  = EXTRAS) -> None:
    """A check whose optional extra is not installed: one located line at load."""
    import importlib.util

    for key, needs, extra, modules in table:
        value = module.get(key)
        if not isinstance(value, dict):
            continue
        if needs is not None and value.get(needs[0], needs[1]) != needs[1]:
            continue
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            problems.add((*mloc, key), f"needs {', '.join(missing)}, which this environment "
                         f"lacks (expected the `{extra}` extra: pip install "
                         f"'parity-gate[{extra}]')")


def _check_quantize(module: dict[str, Any], mloc: Loc, fixtures: dict[Any, Any],
                    problems: Problems) -> None:
    """A quantized check calibrates on a declared fixture set."""
    quant = module.get("quantize")
    name = quant.get("calibration") if isinstance(quant, dict) else None
    if isinstance(name, str) and name not in fixtures:
        problems.add((*mloc, "quantize", "calibration"), f"unknown fixture set {name!r}"
                     f"{_did_you_mean(name, list(fixtures))} (expected one of: "
                     f"{', '.join(fixtures) or 'none defined'})")


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


def _check_dynamic_rank(fname: str, fixture: Any, module: dict[str, Any], mloc: Loc,
                        problems: Problems) -> None:
    """A dim declared dynamic must exist in the input's shape: a manifest error, not an
    exporter one found after the export."""
    if not isinstance(fixture, dict) or not isinstance(fixture.get("inputs"), dict):
        return
    for j, spec in enumerate(_as_list(module.get("inputs"))):
        if not isinstance(spec, dict) or not isinstance(spec.get("dynamic"), dict):
            continue
        tensor = fixture["inputs"].get(spec.get("name"))
        shape = tensor.get("shape") if isinstance(tensor, dict) else None
        if not isinstance(shape, list):
            continue
        for dim in spec["dynamic"]:
            if isinstance(dim, int) and not -len(shape) <= dim < len(shape):
                problems.add((*mloc, "inputs", j, "dynamic", dim),
                             f"dim {dim} of input {spec.get('name')!r} is beyond its rank "
                             f"{len(shape)} in fixture set {fname!r} (expected an index "
                             f"from 0 to {len(shape) - 1})")


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
