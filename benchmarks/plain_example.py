"""The bundled example done by hand, without parity-gate: the baseline of overhead.py.

One export per (module, dtype) with the same dynamic dims, one ORT session,
every batch size and sample run and compared with a plain allclose.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "parity_gate" / "example"))
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

from models import cnn, mlp, transformer  # noqa: E402

BATCHES = [1, 4, 7]


def run(model: torch.nn.Module, dtype: torch.dtype, make_inputs, dynamic, batches,
        samples: int) -> int:
    model = model.eval().to(dtype)
    example = make_inputs(2, 0)
    dims = {name: torch.export.Dim(name) for name in {s for d in dynamic for s in d.values()}}
    shapes = tuple({i: dims[s] for i, s in d.items()} for d in dynamic)
    names = [f"in{i}" for i in range(len(example))]
    program = torch.onnx.export(model, tuple(torch.from_numpy(a) for a in example), dynamo=True,
                                dynamic_shapes=shapes, input_names=names, verbose=False)
    session = ort.InferenceSession(program.model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    failures = 0
    for batch in batches:
        for sample in range(samples):
            inputs = make_inputs(batch, sample)
            with torch.inference_mode():
                ref = model(*(torch.from_numpy(a) for a in inputs))
            refs = ref if isinstance(ref, tuple) else (ref,)
            got = session.run(None, dict(zip(names, inputs, strict=True)))
            tol = 1e-2 if dtype == torch.float16 else 1e-3
            for r, g in zip(refs, got, strict=True):
                failures += not np.allclose(g.astype(np.float64), r.numpy().astype(np.float64),
                                            atol=tol, rtol=tol, equal_nan=True)
    return failures


def main() -> int:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    rows = np.load(ROOT / "parity_gate" / "example" / "data" / "mlp_inputs.npz")["x"]
    fails = run(cnn.build(), torch.float32,
                lambda b, s: [rng.normal(size=(b, 3, 32, 32)).astype(np.float32)],
                [{0: "batch"}], BATCHES, 2)
    fails += run(transformer.build(), torch.float32,
                 lambda b, s: [rng.normal(size=(b, 12, 32)).astype(np.float32),
                               rng.random((b, 12)) < 0.2],
                 [{0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}], BATCHES, 1)
    for dtype, np_dtype in ((torch.float32, np.float32), (torch.float16, np.float16)):
        model = mlp.build()
        fails += run(model, dtype,
                     lambda b, s, t=np_dtype: [rows[(s * b + np.arange(b)) % len(rows)].astype(t)],
                     [{0: "batch"}], BATCHES, 2)
        fails += run(model, dtype,
                     lambda b, s, t=np_dtype: [rng.normal(size=(b, 16)).astype(t)],
                     [{0: "batch"}], [*BATCHES, 0], 1)
    print(f"plain script: {fails} failing comparisons")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
