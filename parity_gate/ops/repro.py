"""One standalone repro script per finding: explicit inputs, export, ORT, both results.

The script depends on nothing but torch, numpy and onnxruntime, so it can be
pasted into an upstream issue as is. Inputs are written out value by value
(NaN, ±inf and -0.0 included), rebuilt from the same seeds the sweep used.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate.model.files import atomic_write, make_folder
from parity_gate.ops.findings import Row
from parity_gate.ops.inputs import make_inputs
from parity_gate.ops.records import OpVariant

_HEADER = '''"""Repro: {op} [{variant}] on {dtype} inputs ({input_class}) -> {outcome}.

{effect}
Re-check: {recheck}
Also seen on: {dtypes}; input classes: {classes}.
Found by `parity-gate ops` with {versions}.
Run: python {name}
"""
import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F  # noqa: F401  (the call may use it)
import math  # noqa: F401

nan, inf = float("nan"), float("inf")
'''

_BODY = '''

class Op(torch.nn.Module):
    def forward(self, {params}):
        return {call}


def leaves(out):
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def to_ort(t):
    t = t.detach()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: hand ORT the bits
        from onnx import TensorProto
        bits = t.view(torch.int16).numpy().view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(t.numpy())


def from_ort(v):
    if v.data_type() == "tensor(bfloat16)":
        return torch.from_dlpack(v) if np.prod(v.shape()) else torch.zeros(
            v.shape(), dtype=torch.bfloat16)
    return torch.from_numpy(v.numpy())


model = Op().eval()
args = tuple(inputs.values())
with torch.{grad_mode}():
    eager = leaves(model(*args))
program = torch.onnx.export(model, args, dynamo=True, input_names=list(inputs),
                            verbose=False)
print(onnx.printer.to_text(program.model_proto.graph))
session = ort.InferenceSession(program.model_proto.SerializeToString(),
                               providers=["CPUExecutionProvider"])
got = [from_ort(v) for v in session.run_with_ort_values(
    None, {{k: to_ort(t) for k, t in inputs.items()}})]
torch.set_printoptions(precision=8, linewidth=120)
for i, (e, o) in enumerate(zip(eager, got)):
    print(f"output {{i}}: eager {{e.dtype}} {{tuple(e.shape)}} | "
          f"onnx {{o.dtype}} {{tuple(o.shape)}}")
    print("  eager:", e.detach())
    print("  onnx: ", o)
    if e.shape == o.shape and e.numel():
        diff = (e.detach().double() - o.double()).abs()
        both_nan = e.detach().double().isnan() & o.double().isnan()
        diff[both_nan | (e.detach().double() == o.double())] = 0
        print("  max |eager - onnx|:", diff.max().item(), "at", np.unravel_index(
            int(diff.argmax()), tuple(e.shape)))
if len(eager) != len(got):
    print(f"eager returns {{len(eager)}} outputs, onnx {{len(got)}}")
'''


def _literal(array: np.ndarray) -> str:
    if array.dtype.name == "bfloat16" or array.dtype.kind == "f":
        values = array.astype(np.float64).tolist()
    elif array.dtype.kind == "b":
        values = array.tolist()
    else:
        values = array.astype(np.int64).tolist()
    text = repr(values)
    return re.sub(r"\s+", " ", text)


def _tensor(name: str, array: np.ndarray, requires_grad: bool) -> str:
    dtype = array.dtype.name
    shape = tuple(array.shape)
    grad = ".requires_grad_()" if requires_grad and (dtype == "bfloat16" or
                                                     array.dtype.kind == "f") else ""
    if array.size == 0:
        return f"    {name!r}: torch.zeros({shape}, dtype=torch.{dtype}){grad},"
    return (f"    {name!r}: torch.tensor({_literal(array)}, "
            f"dtype=torch.{dtype}).reshape({shape}){grad},")


def script(row: Row, variant: OpVariant, versions: dict[str, Any], seed: int = 0) -> str:
    dtype = row.dtype or row.dtypes[0]
    arrays = make_inputs(variant, dtype, row.input_class, seed)
    grads = {a.name: a.requires_grad for a in variant.args}
    header = _HEADER.format(
        op=row.op or variant.id, variant=variant.id, dtype=dtype, input_class=row.input_class,
        outcome=row.outcome, effect=row.effect, recheck=row.recheck or "n/a",
        dtypes=", ".join(row.dtypes), classes=", ".join(row.input_classes),
        versions=", ".join(f"{k} {versions[k]}" for k in ("torch", "onnxscript", "onnxruntime")
                           if k in versions),
        name=f"{row.slug}.py")
    inputs = "inputs = {\n" + "\n".join(
        _tensor(n, a, grads.get(n, False)) for n, a in arrays.items()) + "\n}"
    body = _BODY.format(params=", ".join(variant.arg_names), call=variant.call,
                        grad_mode="enable_grad" if any(grads.values()) else "no_grad")
    return header + inputs + body


def write_all(rows: list[Row], variants: dict[str, OpVariant], folder: Path,
              versions: dict[str, Any], seed: int = 0) -> list[Path]:
    """One script per finding in `folder` (`OUT/repro`: never a link, nor any script in it;
    masked like every file the gate writes)."""
    make_folder(folder.parent, folder)
    written = []
    for row in rows:
        variant = variants.get(row.variant)
        if variant is None:
            continue
        path = folder / f"{row.slug}.py"
        atomic_write(path, script(row, variant, versions, seed))
        written.append(path)
    return written
