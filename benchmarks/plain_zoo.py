"""The zoo subset done by hand, without parity-gate: the baseline of zoo_speed.py's `plain`.

What a person writes to check a few Hugging Face models by hand, in one
process and a naive loop: for every module, dtype and batch size of the
manifest, build the model from its `zoo_models` factory (torch seeded as the
gate seeds it), export it once with `torch.onnx.export(dynamo=True)` and the
manifest's dynamic dims, open one ONNX Runtime CPU session, then run every
fixture id (e.g. both sequence lengths of `text`) and sample through eager and
ORT and compare with `np.allclose` at the gate's default tolerances. An export
that fails (t5_encoder's, a real exporter defect) is counted and the loop goes
on, as the gate does.

Honest about what differs from the gate: the gate exports once per (module,
dtype) and runs every batch size on that export, and a naive loop exports per
batch size (bench.yml has two, so the loop exports twice per dtype; with one,
as in smoke.yml, both make the same number of exports). The gate also does work
this script does not (export hazard checks, per-output figures, float64
references for float16, re-runs of failures) and pays for worker processes.
Inputs have the same shapes, dtypes, value ranges, padding masks and sample
counts as the manifest's fixture sets, drawn from numpy's generator by hand
rather than with the gate's per-case seeds.

Reads only the keys the zoo uses (modules' factory kwargs and inputs, the
defaults, random fixture sets, `include`), so it runs the full zoo too:
`python benchmarks/plain_zoo.py --manifest examples/zoo/parity.yml`.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
TOLERANCES = {"float32": (1e-5, 1e-3), "float16": (1e-2, 1e-2)}  # (atol, rtol), the gate's


def load(manifest: Path) -> dict[str, Any]:
    doc = yaml.safe_load(manifest.read_text())
    fixtures: dict[str, Any] = {}
    for name in doc.get("include", []):
        fixtures.update(yaml.safe_load((manifest.parent / name).read_text())["fixtures"])
    fixtures.update(doc.get("fixtures", {}))
    doc["fixtures"] = fixtures
    return doc


def fixture_ids(fixture: dict[str, Any]) -> list[dict[str, int]]:
    """One size per named dim: a list of sizes is one fixture id per size, as in the gate."""
    dims = fixture.get("dims", {})
    names = list(dims)
    sizes = [v if isinstance(v, list) else [v] for v in dims.values()]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*sizes)]


def make_input(spec: dict[str, Any], batch: int, dims: dict[str, int], dtype: str,
               rng: np.random.Generator) -> np.ndarray:
    shape = tuple(batch if d == "batch" else dims[d] if isinstance(d, str) else d
                  for d in spec["shape"])
    kind = spec.get("dtype", "float32")
    if spec.get("distribution") == "padding":  # row 0 full, the others a random length
        lengths = rng.integers(1, shape[-1] + 1, size=int(np.prod(shape[:-1])))
        lengths[0] = shape[-1]
        mask = np.arange(shape[-1])[None, :] < lengths[:, None]
        return mask.reshape(shape).astype(np.int64)
    if kind.startswith("int"):
        return rng.integers(spec.get("low", 0), spec.get("high", 100), size=shape,
                            dtype=np.int64)
    return rng.normal(size=shape).astype(dtype)


def flat(out: Any) -> list[np.ndarray]:
    """Eager outputs in the order the exporter flattens them (ModelOutput fields in order)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().float().numpy()]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    return [t for o in out for t in flat(o)]


def check(module: dict[str, Any], fixtures: dict[str, Any], dtype: str, batch: int,
          rng: np.random.Generator) -> tuple[int, int, int]:
    """(comparisons, failing comparisons, export errors) for one export."""
    import onnxruntime as ort
    import torch
    import zoo_models

    torch.manual_seed(0)
    model = zoo_models.build(**module.get("kwargs", {})).eval().to(getattr(torch, dtype))
    inputs = module["inputs"]
    names = [i["name"] for i in inputs]
    sets = [fixtures[f] for f in module["fixtures"]]
    first = sets[0]
    example_dims = fixture_ids(first)[0]
    example = {n: torch.from_numpy(make_input(first["inputs"][n], max(batch, 2), example_dims,
                                              dtype, rng)) for n in names}
    symbols: dict[str, Any] = {}
    shapes = {i["name"]: {int(k): symbols.setdefault(s, torch.export.Dim(s))
                          for k, s in i.get("dynamic", {}).items()} or None for i in inputs}
    try:
        program = torch.onnx.export(model, (), kwargs=example, dynamic_shapes=shapes,
                                    dynamo=True, verbose=False)
    except Exception as exc:  # the exporter raises many types
        print(f"  {module['name']}/{dtype}/b{batch}: export error: {type(exc).__name__}")
        return 0, 0, 1
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = [i.name for i in session.get_inputs()]
    atol, rtol = TOLERANCES[dtype]
    compared = failing = 0
    for fixture in sets:
        for dims in fixture_ids(fixture):
            for _ in range(fixture.get("samples", 1)):
                arrays = {n: make_input(fixture["inputs"][n], batch, dims, dtype, rng)
                          for n in names}
                with torch.inference_mode():
                    refs = flat(model(**{n: torch.from_numpy(a) for n, a in arrays.items()}))
                got = session.run(None, {n: arrays[n] for n in feeds})
                for ref, out in zip(refs, got, strict=False):
                    compared += 1
                    failing += not np.allclose(out.astype(np.float64), ref.astype(np.float64),
                                               atol=atol, rtol=rtol, equal_nan=True)
    return compared, failing, 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=ROOT / "examples/zoo/bench.yml")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    doc = load(args.manifest)
    for path in doc.get("python_path", []):
        sys.path.insert(0, str((args.manifest.parent / path).resolve()))
    defaults = doc.get("defaults", {})
    rng = np.random.default_rng(0)
    totals = [0, 0, 0]
    for module in doc["modules"]:
        for dtype in module.get("dtypes", defaults.get("dtypes", ["float32"])):
            for batch in module.get("batch_sizes", defaults.get("batch_sizes", [2])):
                for i, n in enumerate(check(module, doc["fixtures"], dtype, batch, rng)):
                    totals[i] += n
    print(f"plain zoo: {totals[0]} comparisons, {totals[1]} failing, "
          f"{totals[2]} export errors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
