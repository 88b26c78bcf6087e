"""Fixture sets → numpy input tensors for one (batch size, dtype, sample).

Seeds derive from names, not from run order, so a case gets the same tensors
whether it runs alone, in a shard or in the full run, and float32 and float16
cases of a module see the same underlying data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from parity_gate.manifest.models import (
    FLOAT_DTYPES,
    EdgeFixture,
    FileFixture,
    Manifest,
    RandomFixture,
    TensorSpec,
    resolve_settings,
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


def generate(
    name: str,
    fixture: RandomFixture | EdgeFixture | FileFixture,
    input_names: Sequence[str],
    batch_size: int,
    dtype: str,
    sample: int,
    *,
    seed: int,
    base_dir: Path,
) -> dict[str, np.ndarray]:
    """Tensors for every input, with floating inputs cast to the module dtype `dtype`."""
    if isinstance(fixture, FileFixture):
        return _from_file(fixture, input_names, batch_size, dtype, sample, base_dir)
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
    expected = {".npy": "a NumPy .npy file (np.save)", ".npz": "a NumPy .npz archive "
                "(np.savez)"}.get(path.suffix, "a torch.save file of tensors")
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
    return f"{what} (expected {expected})"


def _from_file(fixture: FileFixture, input_names: Sequence[str], batch_size: int, dtype: str,
               sample: int, base_dir: Path) -> dict[str, np.ndarray]:
    arrays = load_arrays(base_dir / fixture.path)
    out: dict[str, np.ndarray] = {}
    for input_name in input_names:
        key = fixture.keys.get(input_name, input_name)
        if key not in arrays and len(arrays) == 1 and len(input_names) == 1:
            key = next(iter(arrays))
        if key not in arrays:
            raise FixtureError(
                f"{fixture.path}: no array {key!r} for input {input_name!r} "
                f"(has: {', '.join(sorted(arrays)) or 'nothing'})")
        pool = arrays[key]
        if pool.ndim == 0 or pool.shape[0] == 0:
            raise FixtureError(f"{fixture.path}: array {key!r} needs rows along axis 0")
        rows = (sample * batch_size + np.arange(batch_size)) % pool.shape[0]
        chosen = pool[rows]
        target = dtype if chosen.dtype.kind == "f" or chosen.dtype == ml_dtypes.bfloat16 else None
        out[input_name] = cast(chosen, target) if target else np.ascontiguousarray(chosen)
    return out


def file_fixture_problems(manifest: Manifest, base_dir: Path) -> tuple[int, list[str]]:
    """Open every file fixture set as a run would, and say, where the set is written, what
    the run would find: an unreadable file, an input with no array, an array with too few
    dims for its input's dynamic axes. A run finds these too, at the cost of that set's
    cases only; `check` finds them before a CI job spends its time. Returns (files read,
    problems)."""
    problems: list[str] = []
    read = 0
    for name, fixture in manifest.fixtures.items():
        if not isinstance(fixture, FileFixture):
            continue
        try:
            load_arrays(base_dir / fixture.path)
        except FixtureError as exc:
            problems.append(f"{manifest.locate_fixture(name, 'path')}: {exc}")
            continue
        read += 1
        for module in (m for m in manifest.modules if name in m.fixtures):
            dtype = (resolve_settings(manifest, module).dtypes or ["float32"])[0]
            where = manifest.locate_fixture(name, "keys" if fixture.keys else "path")
            try:
                arrays = _from_file(fixture, [i.name for i in module.inputs], 1, dtype, 0,
                                    base_dir)
            except FixtureError as exc:
                problems.append(f"{where}: module {module.name!r}: {exc}")
                continue
            for spec in module.inputs:
                if not spec.dynamic or arrays[spec.name].ndim > max(spec.dynamic):
                    continue
                axis = max(spec.dynamic)
                problems.append(
                    f"{where}: module {module.name!r}: the array for input {spec.name!r} has "
                    f"{arrays[spec.name].ndim} dim(s) (shape {list(arrays[spec.name].shape)}) "
                    f"but the input declares dynamic dim {axis} ({spec.dynamic[axis]!r}) "
                    f"(expected at least {axis + 1} dims, rows along axis 0)")
    return read, problems
