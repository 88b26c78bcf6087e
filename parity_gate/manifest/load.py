"""Load `parity.yml` and report every problem at once as `file:line:col: key.path: ...`.

PyYAML's composed node tree keeps the position of every key and value, so a
pydantic error location (a tuple of keys) can be pointed back at the line the
user has to edit. Cross-references the schema cannot express (fixture names,
input coverage, files on disk) are checked here too, with the same locations.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from parity_gate.errors import UserError
from parity_gate.manifest.models import EdgeFixture, FileFixture, Manifest, RandomFixture

Loc = tuple[Any, ...]


class ManifestLoader(yaml.SafeLoader):
    """SafeLoader reading YAML 1.2 floats: PyYAML turns `1e-5` (no dot) into a string,
    which would reach factory kwargs as text while editors' schemas see a number."""


ManifestLoader.yaml_implicit_resolvers = {
    k: [r for r in v if r[0] != "tag:yaml.org,2002:float"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ManifestLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=ManifestLoader)  # a SafeLoader subclass: no arbitrary objects

# Pydantic puts the union member's name into error locations; users never wrote it.
_TAG_PARTS = {"random", "edge", "file", "int", "str", "float", "[key]", "list", "dict"}


class _Locator:
    """Maps a key path to the YAML node (and so the line/column) it came from."""

    def __init__(self, root: yaml.Node | None) -> None:
        self.root = root

    def find(self, loc: Loc) -> tuple[yaml.Node | None, list[Any]]:
        """Deepest node along `loc`, and the user-visible path up to the missing part."""
        node, path = self.root, []
        for part in loc:
            child = self._child(node, part)
            if child is None:
                if isinstance(part, str) and _is_tag(part):
                    continue
                path.append(part)
                break
            node = child
            path.append(part)
        return node, path

    def key_node(self, loc: Loc) -> yaml.Node | None:
        """The node of the key itself (for unknown-key errors), not its value."""
        parent, _ = self.find(loc[:-1])
        if isinstance(parent, yaml.MappingNode):
            for k, _v in parent.value:
                if _scalar(k) == loc[-1]:
                    return k
        return None

    @staticmethod
    def _child(node: yaml.Node | None, part: Any) -> yaml.Node | None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if _scalar(k) == part or (isinstance(part, int) and _scalar(k) == str(part)):
                    return v
        if isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
                and 0 <= part < len(node.value):
            return node.value[part]
        return None


def _scalar(node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        try:
            return yaml.safe_load(node.value) if node.tag.endswith(":int") else node.value
        except yaml.YAMLError:
            return node.value
    return None


def format_path(path: list[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int) and out:
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


class ManifestProblems:
    """Collects located problems; raises them together as one UserError."""

    def __init__(self, display: str, locator: _Locator) -> None:
        self.display = display
        self.locator = locator
        self.items: list[tuple[int, int, str]] = []

    def add(self, loc: Loc, message: str, *, at_key: bool = False,
            node: yaml.Node | None = None) -> None:
        found_node, path = self.locator.find(loc)
        if node is not None:
            path = list(loc)
        elif at_key:
            node = self.locator.key_node(loc) or found_node
            path = list(loc)
        else:
            node = found_node
        line, col = (node.start_mark.line + 1, node.start_mark.column + 1) if node else (1, 1)
        text = f"{self.display}:{line}:{col}: {format_path(path)}: {message}"
        entry = (line, col, text)
        if entry not in self.items:
            self.items.append(entry)

    def raise_if_any(self) -> None:
        if self.items:
            raise UserError([t for _, _, t in sorted(self.items)])


def load_manifest(path: str | Path) -> Manifest:
    """Parse and fully validate a manifest, or raise UserError listing every problem."""
    p = Path(path)
    display = str(path)
    if not p.is_file():
        raise UserError(f"{display}: manifest not found (expected a parity.yml file)")
    text = p.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=ManifestLoader)
        data = parse_yaml(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"{display}:{mark.line + 1}:{mark.column + 1}" if mark else display
        raise UserError(f"{where}: invalid YAML: {e.problem} (expected valid YAML)") from None
    problems = ManifestProblems(display, _Locator(root))
    if not isinstance(data, dict):
        problems.add((), "expected a mapping with `fixtures` and `modules` keys")
        problems.raise_if_any()
    _check_duplicate_keys(root, problems, ())
    manifest: Manifest | None = None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as e:
        for loc, message, at_key in _translate(e, data):
            problems.add(loc, message, at_key=at_key)
    _check_references(data, p.resolve().parent, problems)
    problems.raise_if_any()
    assert manifest is not None  # no problems means the schema accepted it
    return manifest


def _check_duplicate_keys(node: yaml.Node | None, problems: ManifestProblems, loc: Loc) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for k, v in node.value:
            key = _scalar(k)
            if key in seen:
                problems.add((*loc, key), "duplicate key (expected each key once)", node=k)
            seen.add(key)
            _check_duplicate_keys(v, problems, (*loc, key))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _check_duplicate_keys(v, problems, (*loc, i))


def _translate(error: ValidationError, data: Any) -> list[tuple[Loc, str, bool]]:
    """Pydantic errors → (loc, 'what is wrong (what was expected)', points-at-key)."""
    grouped: dict[Loc, list[dict[str, Any]]] = {}
    for err in error.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and _is_tag(p)))
        if err["loc"] and err["loc"][-1] == "[key]":
            err = {**err, "at_key": True}
        grouped.setdefault(loc, []).append(err)
    out: list[tuple[Loc, str, bool]] = []
    for loc, errs in grouped.items():
        if len(errs) > 1 and all(e["type"].endswith(("_type", "_parsing", "from_float"))
                                 for e in errs):
            kinds = " or ".join(sorted({_expected_kind(e["type"]) for e in errs}))
            out.append((loc, f"got {_show(errs[0]['input'])} (expected {kinds})", False))
            continue
        for err in errs:
            loc2, message, at_key = _one(loc, err, data)
            out.append((loc2, message, at_key or bool(err.get("at_key"))))
    return out


def _is_tag(part: str) -> bool:
    return part in _TAG_PARTS or "[" in part


def _one(loc: Loc, err: dict[str, Any], data: Any) -> tuple[Loc, str, bool]:
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], data)
        hint = _did_you_mean(str(loc[-1]), allowed)
        expected = f"expected one of: {', '.join(allowed)}" if allowed else "no extra keys"
        return loc, f"unknown key{hint} ({expected})", True
    if kind == "missing":
        return loc, f"required key `{loc[-1]}` is missing (expected it here)", False
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        hint = _did_you_mean(str(got), options)
        return loc, f"invalid value {_show(got)}{hint} (expected {ctx.get('expected')})", False
    if kind == "union_tag_invalid":
        tags = [t.strip().strip("'") for t in str(ctx.get("expected_tags", "")).split(",")]
        hint = _did_you_mean(str(ctx.get("tag")), tags)
        return (*loc, "kind"), (
            f"unknown fixture kind {_show(ctx.get('tag'))}{hint} "
            f"(expected one of: {', '.join(tags)})"
        ), False
    if kind == "union_tag_not_found":
        return loc, "required key `kind` is missing (expected one of: random, edge, file)", False
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
              "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "?")
        return loc, f"got {_show(got)} (expected a number {op} {bound})", False
    if kind in ("too_short", "too_long"):
        return loc, f"{err['msg'].lower()} (expected {_length_hint(kind, ctx)})", False
    if kind == "string_pattern_mismatch":
        if loc and loc[-1] == "factory":
            return loc, f"got {_show(got)} (expected `package.module:callable`)", False
        return loc, (
            f"got {_show(got)} (expected a name of letters, digits, `_`, `.` or `-`)"
        ), False
    if kind == "value_error":
        return loc, f"{ctx.get('error', err['msg'])} (expected a valid combination)", False
    if kind.endswith(("_type", "_parsing", "from_float")):
        return loc, f"got {_show(got)} (expected {_expected_kind(kind)})", False
    return loc, f"{err['msg']} (got {_show(got)})", False


def _expected_kind(kind: str) -> str:
    for prefix, text in (
        ("int", "an integer"), ("float", "a number"), ("string", "a string"),
        ("bool", "true or false"), ("dict", "a mapping"), ("list", "a list"),
        ("model", "a mapping"),
    ):
        if kind.startswith(prefix):
            return text
    return kind.replace("_", " ")


def _length_hint(kind: str, ctx: dict[str, Any]) -> str:
    if kind == "too_short":
        return f"at least {ctx.get('min_length', 1)} item(s)"
    return f"at most {ctx.get('max_length')} item(s)"


def _show(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def _allowed_keys(loc: Loc, data: Any) -> list[str]:
    """Field names of the model found at `loc`, for 'did you mean'."""
    model: Any = Manifest
    node = data
    for part in loc:
        node = node.get(part) if isinstance(node, dict) else (
            node[part] if isinstance(node, list) and isinstance(part, int) else None)
        model = _submodel(model, part, node)
        if model is None:
            return []
    return sorted(model.model_fields) if isinstance(model, type) else []


def _submodel(model: Any, part: Any, node: Any) -> Any:
    """Walk the annotated type of `model` one step along `part`."""
    if model is None:
        return None
    if isinstance(model, type) and issubclass(model, BaseModel):
        field = model.model_fields.get(part) if isinstance(part, str) else None
        return _unwrap(field.annotation, node) if field else None
    origin = typing.get_origin(model)
    args = typing.get_args(model)
    if origin in (list, dict) and args:
        return _unwrap(args[-1], node)
    return None


def _unwrap(tp: Any, node: Any) -> Any:
    """Strip Optional/Annotated/unions (choosing the fixture kind by `node['kind']`)."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            fixture_kinds = {"random": RandomFixture, "edge": EdgeFixture, "file": FileFixture}
            if all(m in fixture_kinds.values() for m in members):
                kind = node.get("kind") if isinstance(node, dict) else None
                return fixture_kinds.get(kind)
            tp = members[0] if len(members) == 1 else next(
                (m for m in members if typing.get_origin(m) in (list, dict)
                 or (isinstance(m, type) and issubclass(m, BaseModel))), members[0])
            continue
        return tp


def _check_references(data: dict[str, Any], base: Path, problems: ManifestProblems) -> None:
    """What the schema alone cannot check: names, coverage, files, importability.

    Works on the raw YAML data (skipping parts the schema already rejected) so
    these problems are reported in the same pass as schema errors.
    """
    fixtures = data.get("fixtures") if isinstance(data.get("fixtures"), dict) else {}
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


def _unique_names(entries: Any, loc: Loc, what: str, problems: ManifestProblems) -> list[str]:
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
                   problems: ManifestProblems) -> None:
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
    dims = fixture.get("dims") if isinstance(fixture.get("dims"), dict) else {}
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
                    problems: ManifestProblems) -> None:
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
                   problems: ManifestProblems) -> None:
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
