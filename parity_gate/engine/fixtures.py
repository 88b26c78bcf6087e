"""Fixture sets → numpy input tensors for one (batch size, dtype, sample).

Seeds derive from names, not from run order, so a case gets the same tensors
whether it runs alone, in a shard or in the full run, and float32 and float16
cases of a module see the same underlying data.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from parity_gate.manifest.limits import (
    ArrayHeader,
    file_oversized,
    file_too_big,
    oversize_message,
)
from parity_gate.manifest.models import (
    FLOAT_DTYPES,
    EdgeFixture,
    FileFixture,
    Manifest,
    ModuleSpec,
    RandomFixture,
    TensorSpec,
)

NUMPY_DTYPES: dict[str, Any] = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "bool": np.bool_,
}

FLOAT_SPECIALS = ("nan", "inf", "-inf", "zero", "neg_zero", "denormal", "tiny", "huge")
INT_SPECIALS = ("int_min", "int_max", "zero")


class FixtureError(Exception):
    """A fixture that cannot produce tensors (missing key in a file, bad rank)."""


def derive_seed(*parts: object) -> int:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def is_float_dtype(name: str) -> bool:
    return name in FLOAT_DTYPES


def sample_count(fixture: Any) -> int:
    return fixture.samples


@dataclass(frozen=True)
class Draw:
    """Which tensors of a fixture set a case reads: its batch size, the module dtype its
    floating inputs are cast to, and the sample's index. Batch size and sample are part
    of every input's seed (a file set's rows start at ``sample * batch_size``)."""

    batch_size: int
    dtype: str
    sample: int = 0


def generate(
    name: str,
    fixture: RandomFixture | EdgeFixture | FileFixture,
    input_names: Sequence[str],
    draw: Draw,
    *,
    seed: int,
    base_dir: Path,
) -> dict[str, np.ndarray]:
    """Tensors for every input, with floating inputs cast to the module dtype `draw.dtype`."""
    if isinstance(fixture, FileFixture):
        return _from_file(fixture, input_names, draw, base_dir)
    batch_size, dtype, sample = draw.batch_size, draw.dtype, draw.sample
    set_seed = fixture.seed if fixture.seed is not None else seed
    out: dict[str, np.ndarray] = {}
    for input_name in input_names:
        spec = fixture.inputs[input_name]
        shape = tuple(d if isinstance(d, int) else batch_size if d == "batch"
                      else _size(fixture.dims[d], d) for d in spec.shape)
        rng = np.random.default_rng(derive_seed(set_seed, name, input_name, batch_size, sample))
        target = dtype if is_float_dtype(spec.dtype) else spec.dtype
        array = _random(spec, shape, rng)
        if isinstance(fixture, EdgeFixture) and (spec.distribution != "padding"
                                                 or spec.specials is not None):
            specials = spec.specials if spec.specials is not None else fixture.specials
            array = _mix_specials(array, target, specials, fixture.fraction, rng)
        out[input_name] = cast(array, target)
    return out


def _size(value: int | list[int], symbol: str) -> int:
    """A dim's size; a list of sizes is split into one fixture id each by the planner."""
    if isinstance(value, list):
        raise FixtureError(f"dim {symbol!r} has several sizes {value}: run the set through "
                           "parity_gate.plan.cases.fixture_variants first")
    return value


def cast(array: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(array.astype(NUMPY_DTYPES[dtype], copy=False))


def _random(spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dist = spec.distribution or (
        "normal" if is_float_dtype(spec.dtype) else "bernoulli" if spec.dtype == "bool"
        else "randint"
    )
    if dist == "normal":
        return rng.normal(spec.mean, spec.std, size=shape)
    if dist == "uniform":
        return rng.uniform(spec.low if spec.low is not None else 0.0,
                           spec.high if spec.high is not None else 1.0, size=shape)
    if dist == "bernoulli":
        return rng.random(size=shape) < spec.p
    if dist == "padding":
        return padding_mask(shape, spec.min_length, spec.padding_side, rng)
    # randint: [low, high), default [0, 100) clipped to the dtype (index-friendly).
    top = 100
    if not is_float_dtype(spec.dtype) and spec.dtype != "bool":
        top = min(top, int(np.iinfo(NUMPY_DTYPES[spec.dtype]).max) + 1)
    low = int(spec.low) if spec.low is not None else 0
    high = int(spec.high) if spec.high is not None else max(top, low + 1)
    return rng.integers(low, high, size=shape, dtype=np.int64)


def padding_mask(shape: tuple[int, ...], min_length: int, side: str,
                 rng: np.random.Generator) -> np.ndarray:
    """1 for real positions, 0 for padding along the last axis, a random length per row.

    Row 0 is never padded, so the batch's longest row spans the axis as a
    tokenizer's padded batch would; the others keep at least `min_length`.
    """
    if not shape:
        return np.ones((), dtype=np.int64)
    length = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    low = min(max(min_length, 0), length)
    lengths = rng.integers(low, length + 1, size=rows)
    if rows:
        lengths[0] = length
    position = np.arange(length)
    if side == "left":
        position = position[::-1]
    mask = (position[None, :] < lengths[:, None]).astype(np.int64)
    return mask.reshape(shape)


def special_values(dtype: str, which: Sequence[str] | None) -> list[float | int | bool]:
    """The special values of one dtype, so float16 gets float16's denormals, not float32's."""
    if dtype == "bool":
        return [True, False]
    if is_float_dtype(dtype):
        fi = ml_dtypes.finfo(NUMPY_DTYPES[dtype]) if dtype == "bfloat16" else np.finfo(
            NUMPY_DTYPES[dtype])
        table: dict[str, float] = {
            "nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "zero": 0.0,
            "neg_zero": -0.0, "denormal": float(fi.smallest_subnormal) * 3,
            "tiny": float(fi.tiny), "huge": float(fi.max) / 2,
        }
        names = [w for w in (which if which is not None else FLOAT_SPECIALS) if w in table]
        return [table[n] for n in names]
    ii = np.iinfo(NUMPY_DTYPES[dtype])
    itable = {"int_min": int(ii.min), "int_max": int(ii.max), "zero": 0}
    names = [w for w in (which if which is not None else INT_SPECIALS) if w in itable]
    return [itable[n] for n in names]


def _mix_specials(array: np.ndarray, dtype: str, which: Sequence[str] | None, fraction: float,
                  rng: np.random.Generator) -> np.ndarray:
    values = special_values(dtype, which)
    if array.size == 0 or not values:
        return array
    count = max(len(values), round(array.size * fraction))
    count = min(count, array.size)
    positions = rng.choice(array.size, size=count, replace=False)
    holder = array.astype(np.float64 if is_float_dtype(dtype) else object).reshape(-1)
    for k, pos in enumerate(positions):
        holder[pos] = values[k % len(values)]
    if dtype == "bool":
        return holder.astype(bool).reshape(array.shape)
    if not is_float_dtype(dtype):
        return holder.astype(NUMPY_DTYPES[dtype]).reshape(array.shape)
    return holder.reshape(array.shape)


_FILE_CACHE: dict[Path, dict[str, np.ndarray]] = {}


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """Read a fixture file without unpickling anything; a file that is not what its suffix
    says (corrupt, truncated, text, pickled objects) is a FixtureError naming it."""
    if path in _FILE_CACHE:
        return _FILE_CACHE[path]
    try:
        arrays = _read_arrays(path)
    except FixtureError:
        raise
    except Exception as exc:  # numpy/zipfile/torch word it many ways; say what it means
        raise FixtureError(f"{path}: {_unreadable(path, exc)}") from None
    for key, value in arrays.items():
        if not isinstance(value, np.ndarray):
            raise FixtureError(f"{path}: member {key or path.name!r} is not a NumPy array "
                               f"(expected a {path.suffix} file of arrays)")
    _FILE_CACHE[path] = arrays
    return arrays


def _read_arrays(path: Path) -> dict[str, Any]:
    if path.suffix == ".npy":
        return {"": np.load(path, allow_pickle=False)}
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    import torch

    obj = torch.load(path, weights_only=True, map_location="cpu")
    if isinstance(obj, torch.Tensor):
        obj = {"": obj}
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise FixtureError(f"{path}: expected a tensor or a dict of tensors")
    from parity_gate.engine.tensors import to_numpy

    return {str(k): to_numpy(v) for k, v in obj.items()}


def _unreadable(path: Path, exc: BaseException) -> str:
    """Why the file cannot be read, in words that never suggest loading it unsafely."""
    text = str(exc)
    if "pickled" in text or "allow_pickle" in text or "Object arrays" in text:
        what = "holds pickled Python objects, which are never loaded" \
            if "Object arrays" in text else "has no NumPy header (a text file?)"
    elif isinstance(exc, EOFError) or path.stat().st_size == 0:
        what = "is empty or truncated"
    elif "zip" in text.lower():
        what = "is not a valid zip archive (corrupt or truncated?)"
    elif "Weights only load failed" in text or "weights_only" in text:
        what = "holds Python objects besides tensors, which are never unpickled"
    else:
        first = text.splitlines()[0][:120] if text else ""
        what = f"is corrupt or of another kind ({type(exc).__name__}: {first})"
    return f"{what} (expected {_expected(path)})"


def _expected(path: Path) -> str:
    return {".npy": "a NumPy .npy file (np.save)", ".npz": "a NumPy .npz archive "
            "(np.savez)"}.get(path.suffix, "a torch.save file of tensors")


def _array_key(fixture: FileFixture, names: Collection[str], input_name: str,
               input_names: Sequence[str]) -> str:
    """The file's array for one input: `keys`, else the input's name, else a lone array."""
    key = fixture.keys.get(input_name, input_name)
    if key not in names and len(names) == 1 and len(input_names) == 1:
        key = next(iter(names))
    if key not in names:
        raise FixtureError(
            f"{fixture.path}: no array {key!r} for input {input_name!r} "
            f"(has: {', '.join(sorted(names)) or 'nothing'})")
    return key


def _from_file(fixture: FileFixture, input_names: Sequence[str], draw: Draw,
               base_dir: Path) -> dict[str, np.ndarray]:
    batch_size, dtype, sample = draw.batch_size, draw.dtype, draw.sample
    arrays = load_arrays(base_dir / fixture.path)
    out: dict[str, np.ndarray] = {}
    for input_name in input_names:
        key = _array_key(fixture, arrays, input_name, input_names)
        pool = arrays[key]
        if pool.ndim == 0 or pool.shape[0] == 0:
            raise FixtureError(f"{fixture.path}: array {key!r} needs rows along axis 0")
        # Rows from sample * batch_size on, wrapping; np.resize repeats them without an index
        # array (8 bytes a row: more than the rows themselves at a huge batch of small rows).
        start = sample * batch_size % pool.shape[0]
        chosen = np.resize(np.roll(pool, -start, axis=0) if start else pool,
                           (batch_size, *pool.shape[1:]))
        target = dtype if _floating(chosen.dtype) else None
        out[input_name] = cast(chosen, target) if target else np.ascontiguousarray(chosen)
    return out


def _floating(dtype: np.dtype[Any]) -> bool:
    """A file's float arrays are cast to the module's dtype (bfloat16 is ml_dtypes')."""
    return dtype.kind == "f" or dtype == ml_dtypes.bfloat16


def array_headers(path: Path) -> dict[str, ArrayHeader]:
    """Shape and dtype of every array of a fixture file, from the headers alone: a `.npy`'s
    header, each `.npz` member's `.npy` header, a `.pt` memory-mapped (its storages never
    read). A problem a run's load_arrays would meet in them is the FixtureError it would
    raise, worded alike: no header, pickled objects, data shorter than the header says. Only
    a legacy (non-zip) `.pt` is loaded whole, as nothing else can read it."""
    try:
        if path.suffix == ".npy":
            with path.open("rb") as f:
                return {"": _npy_header(path, "", f, path.stat().st_size)}
        if path.suffix == ".npz":
            with path.open("rb") as f:
                if not f.read(2) == b"PK" and path.stat().st_size:
                    raise _bad(path, "has no NumPy header (a text file?)")
            with zipfile.ZipFile(path) as z:
                out: dict[str, ArrayHeader] = {}
                for info in z.infolist():
                    key = info.filename.removesuffix(".npy")  # as np.load's NpzFile names it
                    with z.open(info) as f:
                        out[key] = _npy_header(path, key, f, info.file_size)
                return out
        return _pt_headers(path)
    except FixtureError:
        raise
    except Exception as exc:
        raise FixtureError(f"{path}: {_unreadable(path, exc)}") from None


def verify_archive(path: Path) -> None:
    """Stream every member of an `.npz` through its CRC check, a megabyte at a time: a
    corrupt archive is found without holding its arrays (headers alone cannot tell)."""
    if path.suffix != ".npz":
        return
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                with z.open(info) as f:
                    while f.read(1 << 20):
                        pass
    except Exception as exc:
        raise FixtureError(f"{path}: {_unreadable(path, exc)}") from None


def _npy_header(path: Path, key: str, f: Any, size: int) -> ArrayHeader:
    """One `.npy` header (numpy's own reader, as np.load's), checked against `size` bytes."""
    member = f"member {key!r} " if key else ""
    try:
        version = np.lib.format.read_magic(f)
    except ValueError:
        raise _bad(path, f"{member}has no NumPy header" + ("" if key else " (a text file?)")
                   ) from None
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read(f)
    if dtype.hasobject:
        raise _bad(path, "holds pickled Python objects, which are never loaded")
    header = ArrayHeader(tuple(int(d) for d in shape), str(dtype), dtype.itemsize,
                         _floating(dtype))
    if f.tell() + header.nbytes > size:
        raise _bad(path, f"{member}is empty or truncated (its header says "
                   f"{header.describe()}: {header.nbytes} bytes, {max(size - f.tell(), 0)} "
                   "follow)")
    return header


def _pt_headers(path: Path) -> dict[str, ArrayHeader]:
    import torch

    if not zipfile.is_zipfile(path):  # the legacy format cannot be mapped: read it
        return {k: ArrayHeader(v.shape, str(v.dtype), v.dtype.itemsize, _floating(v.dtype))
                for k, v in _read_arrays(path).items()}
    obj = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
    if isinstance(obj, torch.Tensor):
        obj = {"": obj}
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise FixtureError(f"{path}: expected a tensor or a dict of tensors")
    return {str(k): ArrayHeader(tuple(v.shape), str(v.dtype).removeprefix("torch."),
                                v.element_size(), v.is_floating_point())
            for k, v in obj.items()}


def _bad(path: Path, what: str) -> FixtureError:
    return FixtureError(f"{path}: {what} (expected {_expected(path)})")


def file_fixture_problems(manifest: Manifest, base_dir: Path, *,
                          sizes_only: bool = False) -> tuple[int, list[str]]:
    """Read every file fixture set's array headers (not its arrays) and say, where the set
    is written, what a run would find: an unreadable file, an input with no array, an array
    with too few dims for its input's dynamic axes, a file or a case over `max_case_bytes`.
    A run meets the others at the cost of that set's cases only, so `check` finds them
    before a CI job spends its time; sizes (`sizes_only`, for `run`) are refused before any
    worker starts, as a worker holding them would die with the module's other cases.
    Returns (files read, problems)."""
    problems: list[str] = []
    read = 0
    for name, fixture in manifest.fixtures.items():
        if not isinstance(fixture, FileFixture):
            continue
        at_path = manifest.locate_fixture(name, "path")
        try:
            headers = array_headers(base_dir / fixture.path)
            too_big = file_too_big(manifest, name, headers)
            if too_big is None and not sizes_only:
                verify_archive(base_dir / fixture.path)  # within bounds: worth streaming
        except FixtureError as exc:  # a run says it as the set's cases' outcome
            if not sizes_only:
                problems.append(f"{at_path}: {exc}")
            continue
        read += 1
        if too_big is not None:  # its cases cannot be held either: one line says it
            problems.append(f"{at_path}: {too_big}")
            continue
        where = manifest.locate_fixture(name, "keys" if fixture.keys else "path")
        for index, module in enumerate(manifest.modules):
            if name not in module.fixtures:
                continue
            found, wrong = _inputs_problem(fixture, headers, module)
            if wrong:
                if not sizes_only:
                    problems.extend(f"{where}: module {module.name!r}: {w}" for w in wrong)
                continue
            big = file_oversized(manifest, index, name, found)
            if big is not None:
                problems.append(f"{at_path}: {oversize_message(big)}")
    return read, problems


def _inputs_problem(fixture: FileFixture, headers: dict[str, ArrayHeader],
                    module: ModuleSpec) -> tuple[list[tuple[str, ArrayHeader]], list[str]]:
    """(key, header) of each of the module's inputs, and what a run would find wrong with
    them: no array or no rows (the first such input, as a run stops there), fewer dims
    than an input's dynamic axes (each)."""
    names = [i.name for i in module.inputs]
    found: list[tuple[str, ArrayHeader]] = []
    problems: list[str] = []
    for spec in module.inputs:
        try:
            key = _array_key(fixture, headers, spec.name, names)
        except FixtureError as exc:
            return found, [str(exc)]
        header = headers[key]
        if not header.shape or header.shape[0] == 0:
            return found, [f"{fixture.path}: array {key!r} needs rows along axis 0"]
        if spec.dynamic and len(header.shape) <= max(spec.dynamic):
            axis = max(spec.dynamic)
            problems.append(
                f"the array for input {spec.name!r} has {len(header.shape)} dim(s) (shape "
                f"{[1, *header.shape[1:]]}) but the input declares dynamic dim {axis} "
                f"({spec.dynamic[axis]!r}) (expected at least {axis + 1} dims, rows along "
                "axis 0)")
        found.append((key, header))
    return found, problems
