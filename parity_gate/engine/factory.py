"""Building a module as the gate does: its factory imported from the job's own import path,
every random source seeded from the job (so localisation rebuilds the very same weights)."""

from __future__ import annotations

import importlib
import importlib.machinery
import random
import sys
from typing import Any

import numpy as np

from parity_gate.engine.fixtures import derive_seed
from parity_gate.plan.cases import ModuleJob


def build(job: ModuleJob) -> Any:
    module_name, attr = job.module.factory.split(":", 1)
    target: Any = import_factory_module(module_name, [str(p) for p in job.python_path])
    for part in attr.split("."):
        target = getattr(target, part)
    return target(**job.module.kwargs)


def import_factory_module(module_name: str, paths: list[str]) -> Any:
    """The factory's module as the job's own import path finds it. A warm worker (or a
    process that spawned it, whose sys.path it inherits) may already hold a module of
    that name from another manifest (two folders with a `models.py`): that one is
    dropped, never reused, and the job's folders go first on sys.path."""
    top = module_name.split(".", 1)[0]
    spec = importlib.machinery.PathFinder.find_spec(top, paths)
    loaded = sys.modules.get(top)
    if spec is not None and loaded is not None and getattr(loaded, "__file__", None) != spec.origin:
        for name in [n for n in sys.modules if n == top or n.startswith(f"{top}.")]:
            del sys.modules[name]
    for path in reversed(paths):
        while path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    return importlib.import_module(module_name)


def seed_everything(torch: Any, seed: int) -> None:
    seed32 = seed % (2**32)
    random.seed(seed32)
    np.random.seed(seed32)
    torch.manual_seed(seed32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def build_module(job: ModuleJob) -> Any:
    """The module from its factory, seeded as the gate seeds it (so the same weights),
    with the job's import path; not yet in eval mode."""
    import torch

    seed_everything(torch, derive_seed(job.seed, job.name))
    return build(job)
