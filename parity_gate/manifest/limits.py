"""How many bytes a case's inputs hold, from the manifest alone, and which cases are too big.

A batch size of 10**9 is a typo, not a test: the worker would die allocating it and take
the module's other cases with it. The bytes of a generated fixture set follow from its
declared shapes, dtypes, batch size, largest `dims` and sample count (every sample is
held at once: the reference keeps them all), so an oversized case is refused when the
manifest is validated, in microseconds, and blamed on what made it big: the batch size
when a batch of 1 fits, else the largest dim. File fixture sets are sized when read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import ByteSize

from parity_gate.manifest.models import (
    FLOAT_DTYPES,
    EdgeFixture,
    Manifest,
    RandomFixture,
    TensorSpec,
    resolve_settings,
)

ITEMSIZE: dict[str, int] = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "int16": 2,
    "int32": 4, "int64": 8, "uint8": 1, "bool": 1,
}


@dataclass(frozen=True)
class Oversize:
    """One too-big case: module, fixture set, dtype, batch, bytes needed and the bound; and
    what to blame: `("batch", b)`, `("dims", symbol, list index or None)` or
    `("shape", input, dim index)`."""

    module: str
    index: int  # the module's position in `modules`
    fixture: str
    dtype: str
    batch: int
    need: int
    limit: int
    blame: tuple[object, ...]


def _dims(fixture: RandomFixture | EdgeFixture) -> dict[str, int]:
    """Each symbol at its largest size: bytes only grow with a dim, so that is the worst."""
    return {k: max(v) if isinstance(v, list) else v for k, v in fixture.dims.items()}


def _elements(spec: TensorSpec, batch: int, dims: dict[str, int]) -> int:
    return math.prod(batch if d == "batch" else dims[d] if isinstance(d, str) else d
                     for d in spec.shape)


def _itemsize(spec: TensorSpec, dtype: str) -> int:
    return ITEMSIZE[dtype if spec.dtype in FLOAT_DTYPES else spec.dtype]


def input_bytes(fixture: RandomFixture | EdgeFixture, batch: int, dtype: str) -> int:
    """Bytes of every input of every sample of one case at `batch`, module dtype `dtype`."""
    dims = _dims(fixture)
    return fixture.samples * sum(_elements(s, batch, dims) * _itemsize(s, dtype)
                                 for s in fixture.inputs.values())


def _blame_dim(fixture: RandomFixture | EdgeFixture, dtype: str) -> tuple[object, ...]:
    """The biggest non-batch dim of the biggest input: a `dims` entry or a literal size."""
    dims = _dims(fixture)
    name, spec = max(fixture.inputs.items(),
                     key=lambda kv: _elements(kv[1], 1, dims) * _itemsize(kv[1], dtype))
    k, dim = max(((k, d) for k, d in enumerate(spec.shape) if d != "batch"),
                 key=lambda kd: dims[kd[1]] if isinstance(kd[1], str) else kd[1],
                 default=(0, "batch"))
    if isinstance(dim, str) and dim != "batch":
        sizes = fixture.dims[dim]
        return ("dims", dim, sizes.index(max(sizes)) if isinstance(sizes, list) else None)
    return ("shape", name, k)


def oversized(manifest: Manifest) -> list[Oversize]:
    """Every (module, fixture set, batch size) whose worst dtype's case is over its module's
    `max_case_bytes`; one per batch size, or one per set when even a batch of 1 is."""
    out: list[Oversize] = []
    for index, module in enumerate(manifest.modules):
        settings = resolve_settings(manifest, module)
        limit = int(settings.max_case_bytes or 0)
        dtypes = list(settings.dtypes or ["float32"])
        for name in module.fixtures:
            fixture = manifest.fixtures.get(name)
            if not isinstance(fixture, (RandomFixture, EdgeFixture)):
                continue
            worst = max(dtypes, key=lambda d: input_bytes(fixture, 1, d))
            at_one = input_bytes(fixture, 1, worst)
            if at_one > limit:
                out.append(Oversize(module.name, index, name, worst, 1, at_one, limit,
                                    _blame_dim(fixture, worst)))
                continue
            for batch in settings.batch_sizes or []:
                need = input_bytes(fixture, batch, worst)
                if need > limit:
                    out.append(Oversize(module.name, index, name, worst, batch, need, limit,
                                        ("batch", batch)))
    return out


def human(n: int) -> str:
    """`4000000000` → `3.7GiB` (binary units, as the bound is usually written)."""
    return str(ByteSize(n).human_readable())


def suggest(n: int) -> str:
    """A round bound that fits `n` bytes, for the error's "raise it to" hint."""
    return f"{math.ceil(n / (1 << 30))}GiB" if n >= 1 << 30 else f"{math.ceil(n / (1 << 20))}MiB"
