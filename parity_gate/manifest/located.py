"""YAML with positions: the one loader of `parity.yml`, the baseline file and the Action's
manifest lines, and the one way their problems are reported, `file:line:col: key.path: ...`.

`load_document` parses text once (YAML 1.2 floats, safe constructors only,
libyaml when installed) and keeps the composed node tree beside the data, so
any key path (a tuple of keys and list indices, as pydantic reports it) can be
pointed back at the line the user has to edit. `Problems` collects located
problems and raises them together; `Problems.add_validation_error` turns a
pydantic `ValidationError` for any schema model into such lines, with "did you
mean" hints, the union-member tags pydantic inserts stripped from the path.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from parity_gate.errors import UserError

Loc = tuple[Any, ...]

_FLOAT_TAG = "tag:yaml.org,2002:float"
_YAML12_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""", re.X)


def _yaml12_floats(loader: type[yaml.SafeLoader] | type[Any]) -> None:
    """PyYAML (YAML 1.1) reads `1e-5` (no dot) as a string, which would reach factory
    kwargs as text while editors' schemas see a number; read floats as YAML 1.2 does."""
    loader.yaml_implicit_resolvers = {
        k: [r for r in v if r[0] != _FLOAT_TAG]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    loader.add_implicit_resolver(_FLOAT_TAG, _YAML12_FLOAT, list("-+0123456789."))


class Yaml12Loader(yaml.SafeLoader):
    """Pure-Python SafeLoader with YAML 1.2 floats; its error messages are the ones shown."""


_yaml12_floats(Yaml12Loader)

if yaml.__with_libyaml__:
    class _FastLoader(yaml.CSafeLoader):  # libyaml's parser, the same constructors/resolver
        pass

    _yaml12_floats(_FastLoader)
    _Loader: type[Any] = _FastLoader
else:  # pragma: no cover - PyYAML built without libyaml
    _Loader = Yaml12Loader


def parse_yaml(text: str) -> Any:
    """The data of a YAML text (YAML 1.2 floats; no arbitrary objects)."""
    return yaml.load(text, Loader=_Loader)


# Aliases share one node, so `&a [*a]` is a cycle and ten aliases of ten aliases of ...
# (a "billion laughs") is a small file whose walk never ends: both are refused before
# anything walks the tree, in time linear in the file. What is bounded is what aliases
# add: a large file written out node by node costs what its size says, and is not a bomb.
MAX_ALIAS_NODES = 100_000  # nodes that aliases add when every alias is expanded


class _AliasProblem(Exception):
    def __init__(self, node: yaml.Node, problem: str) -> None:
        self.node, self.problem = node, problem


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_aliases(root: yaml.Node) -> None:
    """Raise _AliasProblem at an anchored node used inside itself, or at the deepest node
    under which aliases add more than MAX_ALIAS_NODES nodes to the expanded tree.

    Each node is walked once. Its expanded size is itself plus its children's; a child met
    again (an alias of a node already sized) adds its whole expanded size, which is what
    expanding that alias creates; a child met first adds what aliases add under it."""
    size: dict[int, int] = {}  # expanded nodes under a walked node, itself included
    # (node, children left, expanded size so far, nodes aliases added so far)
    stack: list[tuple[yaml.Node, list[yaml.Node], int, int]] = [(root, _children(root), 1, 0)]
    open_ = {id(root)}
    while stack:
        node, todo, total, added = stack[-1]
        if todo:
            child = todo.pop()
            if id(child) in open_:
                raise _AliasProblem(child, "recursive alias (an anchored node contains an "
                                    "alias of itself)")
            if id(child) in size:
                stack[-1] = (node, todo, total + size[id(child)], added + size[id(child)])
            else:
                open_.add(id(child))
                stack.append((child, _children(child), 1, 0))
            continue
        stack.pop()
        open_.discard(id(node))
        size[id(node)] = total
        if added > MAX_ALIAS_NODES:
            raise _AliasProblem(node, f"aliases add more than {MAX_ALIAS_NODES} nodes under "
                                "this node when expanded (an alias bomb?)")
        if stack:
            parent, ptodo, ptotal, padded = stack[-1]
            stack[-1] = (parent, ptodo, ptotal + total, padded + added)


def _compose(text: str) -> tuple[yaml.Node | None, Any]:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _check_aliases(root)
        return root, (loader.construct_document(root) if root is not None else None)
    finally:
        loader.dispose()


def read_text(path: Path, what: str) -> str:
    """The file's text, or one UserError naming the file: missing, a folder, unreadable,
    binary (a NUL byte), not UTF-8 (with the line and column of the first bad byte)."""
    if path.is_dir():
        raise UserError(f"{path}: is a folder (expected {what})")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file (expected {what})") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err} (expected {what})") from None
    if b"\x00" in data:
        line, col = _byte_position(data, data.index(b"\x00"))
        raise UserError(f"{path}:{line}:{col}: binary content (a NUL byte; expected {what} "
                        "as UTF-8 text)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line, col = _byte_position(data, err.start)
        raise UserError(f"{path}:{line}:{col}: invalid UTF-8 (byte 0x{data[err.start]:02x}; "
                        f"expected {what} as UTF-8 text)") from None
    return text.removeprefix("\ufeff")


def _byte_position(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    return line, offset - (data.rfind(b"\n", 0, offset) + 1) + 1


def load_document(text: str, display: str, *, expected: str = "valid YAML") -> Document:
    """Parse `text` once, keeping its node tree; invalid YAML is one located UserError,
    `display:line:col: invalid YAML: what (expected <expected>)`, and so are alias cycles,
    alias bombs and nesting too deep to parse."""
    try:
        root, data = _compose(text)
    except _AliasProblem as bad:
        line, col = position(bad.node)
        raise UserError(f"{display}:{line}:{col}: {bad.problem} (expected {expected} "
                        "without alias cycles or bombs)") from None
    except RecursionError:
        raise UserError(f"{display}:1:1: nesting too deep to read (expected {expected})"
                        ) from None
    except yaml.YAMLError as fast_error:
        error = fast_error
        try:  # libyaml words its errors differently: show PyYAML's, as without libyaml
            yaml.load(text, Loader=Yaml12Loader)
        except yaml.YAMLError as e:
            error = e
        except RecursionError:  # the pure-Python parser recurses where libyaml does not
            pass
        raise UserError(f"{_where(error, text, display)}: invalid YAML: {_problem(error)} "
                        f"(expected {expected})") from None
    return Document(display, root, data)


def _where(error: yaml.YAMLError, text: str, display: str) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{display}:{mark.line + 1}:{mark.column + 1}"
    if isinstance(error, yaml.reader.ReaderError):
        before = text[:error.position]
        return f"{display}:{before.count(chr(10)) + 1}:{len(before) - before.rfind(chr(10))}"
    return display


def _problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError):
        return str(error.problem)
    if isinstance(error, yaml.reader.ReaderError):
        return f"unacceptable character {chr(error.character)!r} ({error.reason})" \
            if isinstance(error.character, int) else str(error.reason)
    return str(error).splitlines()[0]


def scalar_value(node: yaml.Node) -> Any:
    """A key's value as the data has it (`0:` is the integer 0), else None for non-scalars."""
    if isinstance(node, yaml.ScalarNode):
        try:
            return yaml.safe_load(node.value) if node.tag.endswith(":int") else node.value
        except yaml.YAMLError:
            return node.value
    return None


@dataclass(frozen=True)
class Document:
    """A parsed YAML file: its data, its node tree, and key paths → positions."""

    display: str
    root: yaml.Node | None
    data: Any

    def node(self, loc: Loc) -> yaml.Node | None:
        """The value node at exactly `loc`, or None when the path does not exist."""
        node = self.root
        for part in loc:
            node = _child(node, part)
            if node is None:
                return None
        return node

    def find(self, loc: Loc) -> tuple[yaml.Node | None, list[Any]]:
        """The deepest node along `loc`, and the path up to (and with) the missing part."""
        node, path = self.root, []
        for part in loc:
            path.append(part)
            child = _child(node, part)
            if child is None:
                break
            node = child
        return node, path

    def key_node(self, loc: Loc) -> yaml.Node | None:
        """The node of the key itself (for unknown keys), not of its value."""
        parent = self.node(loc[:-1]) if loc else None
        if isinstance(parent, yaml.MappingNode):
            for k, _v in parent.value:
                if scalar_value(k) == loc[-1]:
                    return k
        return None

    def duplicate_keys(self) -> Iterator[tuple[Loc, yaml.Node]]:
        """(path, key node) of every key that repeats an earlier key of its mapping."""
        stack: list[tuple[yaml.Node | None, Loc]] = [(self.root, ())]
        while stack:
            node, loc = stack.pop()
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for k, v in node.value:
                    key = scalar_value(k)
                    if key in seen:
                        yield (*loc, key), k
                    seen.add(key)
                    stack.append((v, (*loc, key)))
            elif isinstance(node, yaml.SequenceNode):
                stack.extend((v, (*loc, i)) for i, v in enumerate(node.value))


def _child(node: yaml.Node | None, part: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = scalar_value(k)
            if key == part or (isinstance(part, int) and key == str(part)):
                return v
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
            and 0 <= part < len(node.value):
        return node.value[part]
    return None


def position(node: yaml.Node | None) -> tuple[int, int]:
    """1-based (line, column) of a node; (1, 1) without one."""
    return (node.start_mark.line + 1, node.start_mark.column + 1) if node else (1, 1)


def format_path(path: list[Any] | Loc) -> str:
    out = ""
    for part in path:
        if isinstance(part, int) and out:
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


@dataclass(frozen=True)
class Phrasing:
    """What a schema's constraints mean in words, where pydantic cannot say it.

    `patterns`: a field regex → what it accepts ("`package.module:callable`").
    `tags`: a union's discriminator key → what its values name ("fixture kind").
    """

    patterns: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


class Problems:
    """Located problems of one document; raised together, sorted by position, as a UserError."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.items: list[tuple[int, int, str]] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, loc: Loc, message: str, *, at_key: bool = False,
            node: yaml.Node | None = None) -> None:
        """`message` about the value at `loc` (at its key with `at_key`; at `node` if given)."""
        found, path = self.doc.find(loc)
        if node is not None or at_key:
            node = node or self.doc.key_node(loc) or found
            path = list(loc)
        else:
            node = found
        line, col = position(node)
        entry = (line, col, f"{self.doc.display}:{line}:{col}: {format_path(path)}: {message}")
        if entry not in self.items:
            self.items.append(entry)

    def add_duplicate_keys(self) -> None:
        for loc, key in self.doc.duplicate_keys():
            self.add(loc, "duplicate key (expected each key once)", node=key)

    def add_validation_error(self, error: ValidationError, model: type[BaseModel],
                             phrasing: Phrasing | None = None) -> None:
        for loc, message, at_key in translate(error, model, phrasing):
            self.add(loc, message, at_key=at_key)

    def raise_if_any(self) -> None:
        if self.items:
            raise UserError([t for _, _, t in sorted(self.items)])


def validate(problems: Problems, model: type[BaseModel], phrasing: Phrasing | None = None
             ) -> Any:
    """`model` validated from the document's data, or None with its errors in `problems`."""
    try:
        return model.model_validate(problems.doc.data)
    except ValidationError as e:
        problems.add_validation_error(e, model, phrasing)
        return None


# ---------------------------------------------------------------------------
# pydantic errors → located one-line problems


def translate(error: ValidationError, model: type[BaseModel],
              phrasing: Phrasing | None = None) -> list[tuple[Loc, str, bool]]:
    """Pydantic errors → (key path, 'what is wrong (what was expected)', points-at-key)."""
    phrasing = phrasing or Phrasing()
    grouped: dict[Loc, list[tuple[ErrorDetails, _Walk]]] = {}
    for err in error.errors(include_url=False):
        walk = _Walk.along(model, err["loc"])
        grouped.setdefault(walk.loc, []).append((err, walk))
    # A misspelt key explains the required key it stands for: say it once, at the typo.
    misspelt = {(*walk.loc[:-1], close) for errs in grouped.values() for err, walk in errs
                if err["type"] == "extra_forbidden" and (close := _closest(walk))}
    out: list[tuple[Loc, str, bool]] = []
    for loc, errs in grouped.items():
        errs = [(e, w) for e, w in errs if not (e["type"] == "missing" and loc in misspelt)]
        if not errs:
            continue
        if len(errs) > 1 and all(_is_type_error(e["type"]) for e, _ in errs):
            kinds = " or ".join(sorted({_expected_kind(e["type"]) for e, _ in errs}))
            got = _show(errs[0][0]["input"])
            out.append((loc, f"got {got} (expected {kinds})", errs[0][1].at_key))
            continue
        for err, walk in errs:
            loc2, message, at_key = _one(walk, err, phrasing)
            out.append((loc2, message, at_key or walk.at_key))
    return out


@dataclass
class _Walk:
    """A pydantic location walked through the schema: the path the user wrote (union
    tags dropped), whether it names a mapping key, and the type at each prefix."""

    loc: Loc
    at_key: bool
    types: list[Any]  # types[k]: the (unwrapped) type at loc[:k]; None where unknown

    @classmethod
    def along(cls, model: type[BaseModel], raw: Loc) -> _Walk:
        loc: list[Any] = []
        at_key = False
        tp, disc = _unwrap(model)
        types = [tp]
        for part in raw:
            if part == "[key]":
                at_key = True
            elif _members(tp):  # pydantic names the union member it tried; users never wrote it
                tp, disc = _unwrap(_member(tp, disc, part))
                types[-1] = tp
            else:
                loc.append(part)
                tp, disc = _unwrap(_step(tp, part))
                types.append(tp)
        return cls(tuple(loc), at_key, types)

    def type_at(self, depth: int) -> Any:
        return self.types[depth] if 0 <= depth < len(self.types) else None


def _allowed(walk: _Walk) -> list[str]:
    """The keys of the mapping an unknown key was found in."""
    parent = walk.type_at(len(walk.loc) - 1)
    return sorted(parent.model_fields) if _is_model(parent) else []


def _closest(walk: _Walk) -> str | None:
    close = difflib.get_close_matches(str(walk.loc[-1]), _allowed(walk), n=1, cutoff=0.6)
    return close[0] if close else None


def _is_type_error(kind: str) -> bool:
    return kind.endswith(("_type", "_parsing", "from_float"))


def _members(tp: Any) -> list[Any]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(tp) if a is not type(None)]
    return []


def _unwrap(tp: Any) -> tuple[Any, str | None]:
    """Strip Annotated and Optional: the type, and its union's discriminator if it has one."""
    disc: str | None = None
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            args = typing.get_args(tp)
            disc = next((m.discriminator for m in args[1:]
                         if isinstance(m, FieldInfo) and isinstance(m.discriminator, str)), disc)
            tp = args[0]
            continue
        members = _members(tp)
        if len(members) == 1:
            tp = members[0]
            continue
        return tp, disc


def _tags(tp: Any, disc: str) -> list[str]:
    """The discriminator values of a tagged union's members, in declaration order."""
    out: list[str] = []
    for m in _members(tp):
        f = m.model_fields.get(disc) if _is_model(m) else None
        if f is not None:
            out.extend(str(a) for a in typing.get_args(f.annotation))
    return out


def _member(tp: Any, disc: str | None, tag: Any) -> Any:
    """The union member pydantic's tag (a discriminator value or a type name) stands for."""
    for m in _members(tp):
        if disc is not None and _is_model(m):
            f = m.model_fields.get(disc)
            if f is not None and tag in typing.get_args(f.annotation):
                return m
        elif disc is None and tag == getattr(m, "__name__", None):
            return m
    return None


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _step(tp: Any, part: Any) -> Any:
    """The declared type one step along `part` (a field, a mapping value, a list item)."""
    if _is_model(tp):
        f = tp.model_fields.get(part) if isinstance(part, str) else None
        if f is None:
            return None
        if isinstance(f.discriminator, str):
            return typing.Annotated[f.annotation, FieldInfo(discriminator=f.discriminator)]
        return f.annotation
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, dict) and args:
        return args[-1]
    return None


def _one(walk: _Walk, err: ErrorDetails, phrasing: Phrasing) -> tuple[Loc, str, bool]:
    loc = walk.loc
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed(walk)
        hint = did_you_mean(str(loc[-1]), allowed)
        expected = f"expected one of: {', '.join(allowed)}" if allowed else "no extra keys"
        return loc, f"unknown key{hint} ({expected})", True
    if kind == "missing":
        return loc, f"required key `{loc[-1]}` is missing (expected it here)", False
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        hint = did_you_mean(str(got), options)
        return loc, f"invalid value {_show(got)}{hint} (expected {ctx.get('expected')})", False
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        disc = str(ctx.get("discriminator", "")).strip("'")
        noun = phrasing.tags.get(disc, disc)
        tags = _tags(walk.type_at(len(loc)), disc) or [
            t.strip().strip("'") for t in str(ctx.get("expected_tags", "")).split(",")]
        if kind == "union_tag_not_found":
            return loc, (f"required key `{disc}` is missing "
                         f"(expected one of: {', '.join(tags)})"), False
        hint = did_you_mean(str(ctx.get("tag")), tags)
        return (*loc, disc), (f"unknown {noun} {_show(ctx.get('tag'))}{hint} "
                              f"(expected one of: {', '.join(tags)})"), False
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()), "?")
        return loc, f"got {_show(got)} (expected a number {_BOUNDS[kind]} {bound})", False
    if kind == "finite_number":
        return loc, f"got {_show(got)} (expected a finite number)", False
    if kind in ("too_short", "too_long"):
        return loc, f"{err['msg'].lower()} (expected {_length_hint(kind, ctx)})", False
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        meaning = phrasing.patterns.get(pattern, f"a string matching `{pattern}`")
        return loc, f"got {_show(got)} (expected {meaning})", False
    if kind in ("byte_size", "byte_size_unit"):
        return loc, (f"got {_show(got)} (expected a size: bytes as an integer > 0, or a "
                     "number with a unit such as `2GiB` or `512MB`)"), False
    if kind == "value_error":
        return loc, f"{ctx.get('error', err['msg'])} (expected a valid combination)", False
    if _is_type_error(kind):
        return loc, f"got {_show(got)} (expected {_expected_kind(kind)})", False
    return loc, f"{err['msg']} (got {_show(got)})", False


_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
           "less_than": "<"}


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
