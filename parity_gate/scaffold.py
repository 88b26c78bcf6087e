"""`parity-gate init`: a first `parity.yml` and workflow from the team's own factories.

Each factory is imported and called as the gate will (the target folder first on the
import path), `forward`'s signature names the inputs, and their shapes come from, in this
order: `--shape NAME=1x3x32x32`; the module's own example (`example_input_array` as
Lightning keeps it, `example_inputs`, Hugging Face's `dummy_inputs`); the first layer
(`Linear(16, …)` takes `[batch, 16]`, `Conv2d(3, …)` `[batch, 3, 32, 32]`, `Embedding(V, …)`
token ids below V). The proposal is run once in eager before anything is written, and the
manifest is written only after `parity-gate check`'s own loader accepts it.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from parity_gate.errors import UserError, ended_how
from parity_gate.manifest.load import load_manifest
from parity_gate.model.files import atomic_write, kind_of, own_folder_problem

FACTORY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
SHAPE = re.compile(r"^([A-Za-z_]\w*)=(\d+(?:x\d+)*)"
                   r"(?::(float32|float16|bfloat16|int64|int32|bool))?$")
WORKFLOW = Path(".github/workflows/parity.yml")
SPATIAL = 32      # the side of a proposed image (Conv2d/Conv3d) or length of a signal (Conv1d)
SEQUENCE = 16     # the length of a proposed token sequence
GENERIC = ("build", "create", "make", "model", "get_model", "factory", "main")


@dataclass(frozen=True)
class Input:
    """One proposed graph input: its shape with `batch` first, dtype and value range."""

    name: str
    shape: list[int | str]
    dtype: str = "float32"
    high: int | None = None       # token ids: the vocabulary size
    distribution: str | None = None


@dataclass(frozen=True)
class Proposal:
    name: str
    factory: str
    inputs: list[Input]
    source: str                   # where the shapes came from, said in the manifest
    optional: list[str] = field(default_factory=list)  # forward() parameters left unset


def _where(i: int, text: str) -> str:
    return f"--factory #{i} {text!r}"


@contextlib.contextmanager
def _on_path(root: Path) -> Iterator[None]:
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(root))


def build(factory: str, root: Path, i: int = 1) -> Any:
    """The module the factory returns, in eval mode; a located one-line error otherwise."""
    if not FACTORY.match(factory):
        raise UserError(f"{_where(i, factory)}: expected package.module:callable "
                        "(for example models.cnn:build)")
    module_name, attr = factory.split(":", 1)
    with _on_path(root):
        try:
            target: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise UserError(f"{_where(i, factory)}: cannot import {module_name!r} ({exc}; "
                            f"expected {Path(*module_name.split('.'))}.py under {root} or an "
                            "installed package)") from None
        except BaseException as exc:  # the user's module: it may exit or interrupt too
            raise UserError(f"{_where(i, factory)}: importing {module_name} "
                            f"{ended_how(exc)}") from None
        for part in attr.split("."):
            if not hasattr(target, part):
                raise UserError(f"{_where(i, factory)}: {module_name} has no {attr!r} "
                                "(expected a callable returning the nn.Module)")
            target = getattr(target, part)
        try:
            module = target()
        except BaseException as exc:  # the user's code: sys.exit, Ctrl-C, any raise
            raise UserError(f"{_where(i, factory)}: calling {attr}() {ended_how(exc)}") from None
    import torch

    if not isinstance(module, torch.nn.Module):
        raise UserError(f"{_where(i, factory)}: {attr}() returned {type(module).__name__} "
                        "(expected a torch.nn.Module)")
    return module.eval()


# A check run's input is made in memory: more elements than this is a typo, not a shape.
MAX_ELEMENTS = 2**28


def parse_shapes(values: list[str]) -> dict[str, tuple[list[int], str | None]]:
    out: dict[str, tuple[list[int], str | None]] = {}
    for value in values:
        m = SHAPE.match(value)
        if m is None:
            raise UserError(f"--shape {value!r}: expected NAME=DIMxDIM... with the batch first, "
                            "optionally :dtype (for example x=1x3x224x224 or ids=1x16:int64)")
        dims = [int(d) for d in m.group(2).split("x")]
        if any(d < 1 for d in dims) or math.prod(dims) > MAX_ELEMENTS:
            raise UserError(f"--shape {value[:80]!r}: expected sizes of at least 1 and at most "
                            f"{MAX_ELEMENTS:,} elements in all (got {math.prod(dims):.3g}; "
                            "init runs the module once on an input of this shape)")
        out[m.group(1)] = (dims, m.group(3))
    return out


def _dtype_name(tensor: Any) -> str:
    text = str(tensor.dtype).removeprefix("torch.")
    return "float32" if tensor.is_floating_point() else text


def _from_tensors(params: list[str], example: Any) -> dict[str, Input] | None:
    """Inputs from an example the module carries (a tensor, a tuple or a dict of them)."""
    import torch

    if isinstance(example, torch.Tensor):
        example = (example,)
    if isinstance(example, (list, tuple)):
        example = dict(zip(params, example, strict=False))
    if not isinstance(example, dict):
        return None
    out = {}
    for name, t in example.items():
        if name in params and isinstance(t, torch.Tensor) and t.dim() >= 1:
            dtype = _dtype_name(t)
            high = int(t.max()) + 1 if dtype.startswith("int") and t.numel() else None
            out[name] = Input(name, ["batch", *t.shape[1:]], dtype, high,
                              "padding" if "mask" in name and dtype != "float32" else None)
    return out or None


def _from_first_layer(module: Any, params: list[str]) -> tuple[dict[str, Input], str] | None:
    """The one input a module's first layer implies, for a module with one input."""
    import torch.nn as nn

    if len(params) != 1:
        return None
    name = params[0]
    for sub in module.modules():
        if sub is module and list(module.children()):
            continue
        if isinstance(sub, nn.Linear):
            return {name: Input(name, ["batch", sub.in_features])}, \
                f"the first layer, Linear({sub.in_features}, …)"
        if isinstance(sub, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            rank = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}[type(sub)]
            side = SPATIAL * (2 if rank == 1 else 1)
            return {name: Input(name, ["batch", sub.in_channels, *[side] * rank])}, \
                f"the first layer, {type(sub).__name__}({sub.in_channels}, …): adjust the size"
        if isinstance(sub, nn.Embedding):
            return {name: Input(name, ["batch", SEQUENCE], "int64", sub.num_embeddings)}, \
                f"the first layer, Embedding({sub.num_embeddings}, …)"
        if isinstance(sub, (nn.LSTM, nn.GRU, nn.RNN)):
            shape: list[int | str] = (["batch", SEQUENCE, sub.input_size] if sub.batch_first
                                      else [SEQUENCE, "batch", sub.input_size])
            return {name: Input(name, shape)}, f"the first layer, {type(sub).__name__}"
        if list(sub.parameters(recurse=False)):
            return None  # a first layer whose input shape cannot be read off
    return None


def propose(module: Any, factory: str, name: str,
            shapes: dict[str, tuple[list[int], str | None]], i: int = 1) -> Proposal:
    """The inputs of one module, from the first source that has them all."""
    sig = inspect.signature(module.forward)
    params = [p.name for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    required = [p.name for p in sig.parameters.values() if p.name in params
                and p.default is inspect.Parameter.empty]
    given = {n: Input(n, ["batch", *dims[1:]], dtype or "float32",
                      100 if (dtype or "").startswith("int") else None)
             for n, (dims, dtype) in shapes.items() if n in params}
    if given and set(required) <= set(given):
        return Proposal(name, factory, list(given.values()), "--shape",
                        [p for p in params if p not in given])
    for attr in ("example_input_array", "example_inputs", "dummy_inputs"):
        example = getattr(module, attr, None)
        found = _from_tensors(params, example) if example is not None else None
        if found and set(required) <= set(found):
            vocab = getattr(getattr(module, "config", None), "vocab_size", None)
            inputs = [Input(x.name, x.shape, x.dtype, vocab if x.name == "input_ids" and vocab
                            else x.high, x.distribution) for x in found.values()]
            return Proposal(name, factory, inputs, f"the module's {attr}",
                            [p for p in params if p not in found])
    layer = _from_first_layer(module, required or params[:1])
    if layer is not None:
        found, source = layer
        return Proposal(name, factory, list(found.values()), source,
                        [p for p in params if p not in found])
    missing = ", ".join(required or params)
    raise UserError(f"{_where(i, factory)}: cannot tell the shape of forward()'s {missing} "
                    f"(expected --shape {(required or params or ['x'])[0]}=1x3x32x32, or an "
                    "example_input_array attribute on the module)")


def _check_runs(module: Any, proposal: Proposal, i: int) -> None:
    """Run the proposal once in eager: a wrong guess is said now, not in CI."""
    import torch

    kwargs = {}
    for x in proposal.inputs:
        dims = [2 if d == "batch" else int(d) for d in x.shape]
        if x.dtype == "bool":
            kwargs[x.name] = torch.ones(dims, dtype=torch.bool)
        elif x.dtype.startswith("int"):
            kwargs[x.name] = torch.randint(0, max(1, x.high or 2), dims,
                                           dtype=getattr(torch, x.dtype))
        else:
            kwargs[x.name] = torch.randn(dims, dtype=getattr(torch, x.dtype))
    try:
        with torch.no_grad():
            module(**kwargs)
    except BaseException as exc:  # the user's code: sys.exit, Ctrl-C, any raise
        shown = ", ".join(f"{x.name}={'x'.join(str(d) for d in x.shape)}" for x in proposal.inputs)
        raise UserError(f"{_where(i, proposal.factory)}: forward({shown}) {ended_how(exc)} "
                        f"(shapes from {proposal.source}; pass the right ones with --shape)"
                        ) from None


_YAML_WORDS = frozenset({"y", "yes", "n", "no", "true", "false", "on", "off", "null", "none",
                         "~"})


def _scalar(text: str) -> str:
    """`text` as a YAML scalar that reads back as this string: bare when it is a plain
    name, quoted when YAML would read it as something else (`yes`, `null`, `1e3`)."""
    plain = re.fullmatch(r"[A-Za-z_][\w.:]*", text) and text.lower() not in _YAML_WORDS
    return text if plain else json.dumps(text)


def _flow(values: list[int | str]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def manifest_text(proposals: list[Proposal], python_path: str = ".") -> str:
    """The commented manifest: defaults, providers, one random fixture set per module;
    `python_path`: the repository's root as seen from the manifest's folder."""
    out = ["# parity.yml, written by `parity-gate init`: check the proposed inputs, then",
           "# `parity-gate check` and `parity-gate run`. Every key: docs/reference/manifest.md",
           "version: 1", "seed: 0",
           f"python_path: [{python_path}]".ljust(28) + "# folders (relative to this file) "
           "factories import from",
           "", "defaults:",
           "  batch_sizes: [1, 4]       # each fixture set runs at each size, one exported model",
           "  dtypes: [float32]         # add float16 or bfloat16 to test lower precision",
           "", "providers:", "  cpu: {required: true}",
           "  cuda: {required: false}   # skipped, with the reason, where there is no GPU",
           "", "fixtures:"]
    for p in proposals:
        out += [f"  {p.name}_inputs:".ljust(28) + f"# shapes from {p.source}", "    kind: random",
                "    samples: 2", "    inputs:"]
        for x in p.inputs:
            extra = [f"dtype: {x.dtype}"] if x.dtype != "float32" else []
            if x.distribution:
                extra.append(f"distribution: {x.distribution}")
            elif x.dtype == "float32":
                extra.append("distribution: normal")
            if x.high is not None and x.distribution is None:
                extra.append(f"high: {x.high}")
            out.append(f"      {_scalar(x.name)}: {{shape: {_flow(x.shape)}, "
                       f"{', '.join(extra)}}}")
    out += ["", "modules:"]
    for p in proposals:
        out += [f"  - name: {_scalar(p.name)}", f"    factory: {_scalar(p.factory)}",
                "    inputs:"]
        out += [f"      - {{name: {_scalar(x.name)}, dynamic: {{{x.shape.index('batch')}: "
                "batch}}" for x in p.inputs]
        if p.optional:
            out.append(f"    # not passed (forward() defaults): {', '.join(p.optional)}")
        out.append(f"    fixtures: [{p.name}_inputs]")
    return "\n".join(out) + "\n"


def workflow_text(manifest: str = "parity.yml") -> str:
    """The pull-request workflow, as the README shows it, for `manifest`."""
    text = resources.files("parity_gate").joinpath("templates/workflow.yml").read_text(
        encoding="utf-8")
    return text.replace("manifest: parity.yml", f"manifest: {manifest}")


def _module_name(factory: str, taken: set[str]) -> str:
    """The factory's own name (`models.nets:tagger` → tagger), or its module's where the
    factory is a generic builder (`models.cnn:build` → cnn); unique in the manifest."""
    module_name, attr = factory.split(":", 1)
    attr = attr.rsplit(".", 1)[-1]
    generic = attr.lower() in GENERIC or attr.lower().startswith(("build", "make", "create"))
    base = module_name.rsplit(".", 1)[-1] if generic else attr
    name, n = re.sub(r"\W", "_", base), 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def init(root: Path, factories: list[str], shape_args: list[str], *, manifest: str,
         workflow: bool, force: bool) -> list[Path]:
    """Write the manifest (and the workflow); returns what was written."""
    if not factories:
        raise UserError("init: expected at least one --factory package.module:callable")
    targets = [root / manifest, *([root / WORKFLOW] if workflow else [])]
    for target in targets:  # no write below a link in the repository, nor through one
        problem = own_folder_problem(target.parent, root, inside=True)
        if problem:
            raise UserError(f"init: {problem}")
    existing = [t for t in targets if os.path.lexists(t)]  # a dangling link exists too
    if existing and not force:
        raise UserError(f"init: {existing[0]} exists (expected --force to overwrite it)")
    for target in existing:
        if not target.is_symlink() and not target.is_file():
            raise UserError(f"init: {target} is {kind_of(target)} (expected a file to "
                            "overwrite)")
    shapes = parse_shapes(shape_args)
    taken: set[str] = set()
    proposals = []
    for i, factory in enumerate(factories, 1):
        module = build(factory, root, i)
        proposal = propose(module, factory, _module_name(factory, taken), shapes, i)
        _check_runs(module, proposal, i)
        proposals.append(proposal)
    text = manifest_text(proposals, os.path.relpath(root, targets[0].parent))
    targets[0].parent.mkdir(parents=True, exist_ok=True)
    # The draft: a new file of a name no one could plant (O_EXCL), beside the target so
    # relative paths in it resolve the same way; its errors name the target.
    fd, name = tempfile.mkstemp(prefix=f".{targets[0].name}.", suffix=".init",
                                dir=targets[0].parent)
    draft = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        load_manifest(draft)  # what `parity-gate check` accepts, or its own located error
    except UserError as exc:
        raise UserError([line.replace(str(draft), str(targets[0])) for line in exc.problems]
                        ) from None
    finally:
        draft.unlink(missing_ok=True)
    writes = [(targets[0], text)] + ([(targets[1], workflow_text(manifest))] if workflow else [])
    for target, content in writes:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():  # --force: the link itself is replaced, never written through
            print(f"parity-gate init: {target} was a symbolic link; replaced by a file "
                  "(its target is untouched)", file=sys.stderr)
            target.unlink()
        atomic_write(target, content)
    return targets
