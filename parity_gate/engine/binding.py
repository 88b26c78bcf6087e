"""Manifest inputs → forward()'s parameters by name; a module's outputs → their own names.

Binding by position let a swapped pair of inputs pass silently (BERT took the
attention mask as token ids and still matched its export), so each input is
passed by keyword and checked against `forward()`'s signature as soon as the
module exists. Output names come from the module's structure (`ModelOutput`
fields, dict keys, `b.0` for an item of a nested tuple), so a failure line and a
per-output tolerance can say which output they mean. Problems are located
lines (`parity.yml:LINE:COL: modules[i].inputs[j].name: ...`) because they are
manifest problems that only the worker, which imports the model, can see.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from parity_gate.manifest.located import did_you_mean
from parity_gate.manifest.models import ModuleSpec

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True)
class Binding:
    """How inputs reach forward(): by keyword in forward()'s order (`keyword`), or, for a
    forward() that takes only `*args` or positional-only parameters, in manifest order.

    By keyword, a dotted input name is a path into a structured argument, the way output
    names are: `images.0` and `images.1` pass `images=[t0, t1]`, `batch.mask` passes
    `batch={"mask": t}` (a detector's list of images, a dict of features). Each leaf stays
    its own fixture tensor and its own graph input under its dotted name."""

    order: tuple[str, ...]
    keyword: bool = True

    def arguments(self, tensors: Mapping[str, Any]) -> dict[str, Any] | list[Any]:
        """What the module and the exporter are given: a name → tensor mapping (nested
        where names are dotted) or a list."""
        if self.keyword:
            return nest({n: tensors[n] for n in self.order})
        return [tensors[n] for n in self.order]

    def call(self, module: Any, tensors: Mapping[str, Any]) -> Any:
        args = self.arguments(tensors)
        return module(**args) if isinstance(args, dict) else module(*args)


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted leaf names → nested dicts, with all-digit keys `0..n-1` as a list, in the
    leaves' order (so the exporter's flattened inputs follow `flat`'s order)."""
    tree: dict[str, Any] = {}
    for name, leaf in flat.items():
        *parents, last = name.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = leaf
    return {k: _lists(v) for k, v in tree.items()}


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {k: _lists(v) for k, v in node.items()}
    if items and sorted(items) == [str(i) for i in range(len(items))] and all(
            k.isdigit() for k in items):
        return [items[str(i)] for i in range(len(items))]
    return items


def leaf_paths(tree: Mapping[str, Any]) -> list[str]:
    """The dotted names of `nest(flat)`'s leaves in pytree order: `flat`'s names."""
    out: list[str] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(node, list | tuple):
            for i, v in enumerate(node):
                walk(f"{prefix}.{i}", v)
        else:
            out.append(prefix)

    walk("", tree)
    return out


def bind(module: Any, spec: ModuleSpec) -> tuple[Binding, list[str]]:
    """The binding of `spec.inputs` to `module.forward`, and every problem with it."""
    leaves = [i.name for i in spec.inputs]
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):  # a builtin or C-implemented forward: nothing to check
        return Binding(tuple(leaves)), []
    named = [p.name for p in params if p.kind in _NAMED]
    if not named and any(p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                    inspect.Parameter.VAR_POSITIONAL) for p in params):
        return Binding(tuple(leaves), keyword=False), []
    problems: list[str] = []
    # a structured input binds by its first part: `images.0` is forward()'s `images`
    names = list(dict.fromkeys(n.split(".")[0] for n in leaves))
    owner = f"{type(module).__name__}.forward()"
    swallows = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    if named:
        for name in names:
            j = next(j for j, n in enumerate(leaves) if n.split(".")[0] == name)
            if name not in named:
                silent = (" (its **kwargs would take it and ignore it silently)"
                          if swallows else "")
                problems.append(
                    f"{spec.locate(f'inputs[{j}].name')}: {owner} has no parameter "
                    f"{name!r}{did_you_mean(name, named)}{silent} (expected one of: "
                    f"{', '.join(named)})")
    required = [p.name for p in params if p.kind in _NAMED and p.default is p.empty]
    for name in required:
        if name not in names:
            problems.append(f"{spec.locate('')}.inputs: {owner} requires parameter {name!r} "
                            f"(expected an entry `- name: {name}` under `inputs`)")
    order = [n for n in named if n in names] + [n for n in names if n not in named]
    return Binding(tuple(leaf for top in order for leaf in leaves
                         if leaf.split(".")[0] == top)), problems


def structural_names(output: Any) -> tuple[list[str], bool]:
    """Names of the tensor leaves of a forward() result in pytree order, and whether they
    are positional only (a tensor, or a tuple/list at the top: named `output0`, ...)."""
    import torch
    from torch.utils import _pytree as pytree

    try:
        flat = pytree.tree_flatten_with_path(output)[0]
    except Exception:  # a pytree node registered without key paths
        count = sum(isinstance(t, torch.Tensor) for t in pytree.tree_leaves(output))
        return [f"output{i}" for i in range(count)], True
    names: list[str] = []
    positional = True
    for path, leaf in flat:
        if not isinstance(leaf, torch.Tensor):
            continue
        parts = [_part(k) for k in path]
        if not path:
            parts = ["output0"]
        elif isinstance(path[0], pytree.SequenceKey):
            parts[0] = f"output{parts[0]}"
        else:
            positional = False
        names.append(".".join(parts))
    return names, positional


def _part(key: Any) -> str:
    for attr in ("key", "idx", "name"):  # MappingKey, SequenceKey, GetAttrKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def output_names(output: Any, spec: ModuleSpec) -> tuple[list[str], list[str]]:
    """The name of every output, and the manifest's `outputs` entries that name none.

    Named outputs (a ModelOutput, a dict) keep their own names and `outputs[]`
    entries refer to them by name; positional outputs take the manifest's names
    in order (then output<i>), as they always have.
    """
    found, positional = structural_names(output)
    declared = [o.name for o in spec.outputs or []]
    if positional:
        return declared[: len(found)] + found[len(declared):], []
    problems = [
        f"{spec.locate(f'outputs[{j}].name')}: {spec.name} returns no output named "
        f"{name!r}{did_you_mean(name, found)} (expected one of: {', '.join(found)})"
        for j, name in enumerate(declared) if name not in found]
    return found, problems
