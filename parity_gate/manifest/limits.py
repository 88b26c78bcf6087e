"""How many bytes a case's inputs hold, from the manifest alone, and which cases are too big.

A batch size of 10**9 is a typo, not a test: the worker would die allocating it and take
the module's other cases with it. The bytes of a generated fixture set follow from its
declared shapes, dtypes, batch size, largest `dims` and sample count (every sample is
held at once: the reference keeps them all), so an oversized case is refused when the
manifest is validated, in microseconds, and blamed on what made it big: the batch size
when a batch of 1 fits, else the largest dim. File fixture sets are sized from their files'
array headers (engine/fixtures reads them without the data): the arrays a run loads whole,
and a case's rows of them at each batch size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from parity_gate.manifest.models import (
    FLOAT_DTYPES,
    EdgeFixture,
    FileFixture,
    Manifest,
    ModuleSpec,
    RandomFixture,
    TensorSpec,
    resolve_settings,
)
from parity_gate.model.units import human_size

ITEMSIZE: dict[str, int] = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "int16": 2,
    "int32": 4, "int64": 8, "uint8": 1, "bool": 1,
}


@dataclass(frozen=True)
class Oversize:
    """One too-big case: module, fixture set, dtype, batch, bytes needed and the bound; and
    what to blame: `("batch", b)`, `("dims", symbol, list index or None)`,
    `("shape", input, dim index)` or, for a file set, `("rows",)`; `rows` says which arrays
    of a file set the case's rows come from."""

    module: str
    index: int  # the module's position in `modules`
    fixture: str
    dtype: str
    batch: int
    need: int
    limit: int
    blame: tuple[object, ...]
    rows: str = ""


@dataclass(frozen=True)
class ArrayHeader:
    """One array of a fixture file as its header declares it: sized without reading the
    data, so a 2 MB archive of 2 GiB of zeros costs nothing to measure."""

    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    floating: bool  # a case holds it cast to the module's dtype (fixtures.cast)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def row_bytes(self, dtype: str) -> int:
        """Bytes of one row (axis 0) as a case of module dtype `dtype` holds it."""
        return math.prod(self.shape[1:]) * (ITEMSIZE[dtype] if self.floating else self.itemsize)

    def describe(self) -> str:
        return f"shape {list(self.shape)}, {self.dtype}"


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


def _bound(manifest: Manifest, module: ModuleSpec) -> tuple[int, list[str], list[int]]:
    """(max_case_bytes, dtypes, batch sizes) of a module, its defaults resolved."""
    settings = resolve_settings(manifest, module)
    return (int(settings.max_case_bytes or 0), list(settings.dtypes or ["float32"]),
            list(settings.batch_sizes or []))


def oversized(manifest: Manifest) -> list[Oversize]:
    """Every (module, fixture set, batch size) whose worst dtype's case is over its module's
    `max_case_bytes`; one per batch size, or one per set when even a batch of 1 is."""
    out: list[Oversize] = []
    for index, module in enumerate(manifest.modules):
        limit, dtypes, batches = _bound(manifest, module)
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
            for batch in batches:
                need = input_bytes(fixture, batch, worst)
                if need > limit:
                    out.append(Oversize(module.name, index, name, worst, batch, need, limit,
                                        ("batch", batch)))
    return out


def file_too_big(manifest: Manifest, name: str, arrays: Mapping[str, ArrayHeader]) -> str | None:
    """Why file set `name`'s arrays are over the smallest bound of the modules using it, or
    None: a worker loads the file whole, whatever rows its cases take."""
    fixture = manifest.fixtures[name]
    assert isinstance(fixture, FileFixture)
    total = sum(h.nbytes for h in arrays.values())
    limit, module = min(((_bound(manifest, m)[0], m.name) for m in manifest.modules
                         if name in m.fixtures), default=(total, ""))
    if total <= limit or not arrays:
        return None
    key, biggest = max(arrays.items(), key=lambda kv: kv[1].nbytes)
    what = f"array {key!r}" if key else "its array"
    held = (f"{what} ({biggest.describe()}) holds {human_size(biggest.nbytes)} "
            f"({biggest.nbytes} bytes)")
    if len(arrays) > 1:
        held += f" and its {len(arrays)} arrays {human_size(total)} ({total} bytes)"
    return (f"{fixture.path}: {held}, which a run loads whole, over `max_case_bytes` "
            f"{human_size(limit)} of module {module!r} (expected a smaller file, or raise "
            f"`max_case_bytes` in `defaults` or in module {module!r}, e.g. "
            f"`max_case_bytes: {suggest(total)}`)")


def file_oversized(manifest: Manifest, index: int, name: str,
                   arrays: Sequence[tuple[str, ArrayHeader]]) -> Oversize | None:
    """The biggest case of module `index` on file set `name` over its bound, where `arrays`
    are (key, header) of each input's array: a case holds `samples` × batch rows of each
    (rows wrap, so a case can be bigger than its file)."""
    module = manifest.modules[index]
    fixture = manifest.fixtures[name]
    assert isinstance(fixture, FileFixture)
    limit, dtypes, batches = _bound(manifest, module)

    def need(batch: int, dtype: str) -> int:
        return fixture.samples * batch * sum(h.row_bytes(dtype) for _, h in arrays)

    worst = max(dtypes, key=lambda d: need(1, d))
    rows = ", ".join(f"{k!r} ({h.describe()})" for k, h in dict(arrays).items())
    rows = f"rows of array{'s' if len(arrays) > 1 else ''} {rows}"
    if need(1, worst) > limit:
        return Oversize(module.name, index, name, worst, 1, need(1, worst), limit, ("rows",),
                        rows)
    batch = max((b for b in batches if need(b, worst) > limit), default=None)
    if batch is None:
        return None
    return Oversize(module.name, index, name, worst, batch, need(batch, worst), limit,
                    ("batch", batch), rows)


def oversize_message(big: Oversize) -> str:
    """What is too big, by how much, and the two ways out."""
    raise_it = (f"or raise `max_case_bytes` in `defaults` or in module {big.module!r}, "
                f"e.g. `max_case_bytes: {suggest(big.need)}`")
    case = f"module {big.module!r} on fixture set {big.fixture!r} ({big.dtype})"
    held = (f"{human_size(big.need)} of inputs "
            f"({big.need} bytes{': ' if big.rows else ''}{big.rows})")
    if big.blame[0] == "batch":
        return (f"batch size {big.batch}: a case of {case} would hold {held}, over "
                f"`max_case_bytes` {human_size(big.limit)} (expected a smaller batch size, "
                f"{raise_it})")
    smaller = "smaller rows or fewer `samples`" if big.blame[0] == "rows" else \
        "a smaller size here"
    return (f"even at batch size 1 a case of {case} would hold {held}, over `max_case_bytes` "
            f"{human_size(big.limit)} (expected {smaller}, {raise_it})")


def suggest(n: int) -> str:
    """A round bound that fits `n` bytes, for the error's "raise it to" hint."""
    return f"{math.ceil(n / (1 << 30))}GiB" if n >= 1 << 30 else f"{math.ceil(n / (1 << 20))}MiB"
