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
    forward() that takes only `*args` or positional-only parameters, in manifest order."""

    order: tuple[str, ...]
    keyword: bool = True

    def arguments(self, tensors: Mapping[str, Any]) -> dict[str, Any] | list[Any]:
        """What the module and the exporter are given: a name → tensor mapping or a list."""
        if self.keyword:
            return {n: tensors[n] for n in self.order}
        return [tensors[n] for n in self.order]

    def call(self, module: Any, tensors: Mapping[str, Any]) -> Any:
        args = self.arguments(tensors)
        return module(**args) if isinstance(args, dict) else module(*args)


def bind(module: Any, spec: ModuleSpec) -> tuple[Binding, list[str]]:
    """The binding of `spec.inputs` to `module.forward`, and every problem with it."""
    names = [i.name for i in spec.inputs]
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):  # a builtin or C-implemented forward: nothing to check
        return Binding(tuple(names)), []
    named = [p.name for p in params if p.kind in _NAMED]
    if not named and any(p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                    inspect.Parameter.VAR_POSITIONAL) for p in params):
        return Binding(tuple(names), keyword=False), []
    owner = f"{type(module).__name__}.forward()"
    swallows = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    problems: list[str] = []
    if named:
        for j, name in enumerate(names):
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
    return Binding(tuple(order)), problems


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
