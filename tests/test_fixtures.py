"""Fixture generation: deterministic, dtype-aware special values, file rows."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from parity_gate.engine.fixtures import Draw, FixtureError, generate, special_values
from parity_gate.manifest.models import EdgeFixture, FileFixture, RandomFixture
from parity_gate.plan.cases import batch_sizes_for


def random_set(**extra: object) -> RandomFixture:
    return RandomFixture.model_validate({
        "kind": "random", "dims": {"seq": 5},
        "inputs": {"x": {"shape": ["batch", "seq", 3]},
                   "ids": {"shape": ["batch", "seq"], "dtype": "int64", "low": 0, "high": 7},
                   "mask": {"shape": ["batch"], "dtype": "bool"}},
        **extra})


def gen(fixture: object, batch: int = 4, dtype: str = "float32", sample: int = 0,
        names: tuple[str, ...] = ("x", "ids", "mask"), seed: int = 0,
        base: Path = Path(".")) -> dict[str, np.ndarray]:
    return generate("set", fixture, names, Draw(batch, dtype, sample),  # type: ignore[arg-type]
                    seed=seed, base_dir=base)


def test_random_shapes_dtypes_and_ranges() -> None:
    out = gen(random_set(), batch=3, dtype="float16")
    assert out["x"].shape == (3, 5, 3) and out["x"].dtype == np.float16
    assert out["ids"].dtype == np.int64 and out["ids"].min() >= 0 and out["ids"].max() < 7
    assert out["mask"].dtype == np.bool_


def test_seeds_come_from_names_not_order() -> None:
    a = gen(random_set(), sample=1)
    gen(random_set(), sample=0)
    b = gen(random_set(), sample=1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = gen(random_set(), sample=2)
    assert not np.array_equal(a["x"], c["x"])
    d = gen(random_set(), seed=1, sample=1)
    assert not np.array_equal(a["x"], d["x"])


def test_float16_and_float32_cases_see_the_same_data() -> None:
    f32 = gen(random_set(), dtype="float32")["x"]
    f16 = gen(random_set(), dtype="float16")["x"]
    np.testing.assert_array_equal(f32.astype(np.float16), f16)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_edge_values_are_those_of_the_dtype(dtype: str) -> None:
    edge = EdgeFixture.model_validate({"kind": "edge", "fraction": 0.2,
                                       "inputs": {"x": {"shape": ["batch", 50]}}})
    x = gen(edge, batch=4, dtype=dtype, names=("x",))["x"].astype(np.float64)
    finfo = ml_dtypes.finfo(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.finfo(dtype)
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    zeros = x[x == 0]
    assert np.signbit(zeros).any() and (~np.signbit(zeros)).any()
    tiny = float(finfo.tiny)
    assert ((np.abs(x) > 0) & (np.abs(x) < tiny)).any(), "no denormal"
    assert (np.abs(x[np.isfinite(x)]) >= float(finfo.max) / 4).any(), "no huge value"


def test_edge_integer_extremes_and_opt_out() -> None:
    edge = EdgeFixture.model_validate({
        "kind": "edge", "fraction": 0.3,
        "inputs": {"n": {"shape": ["batch", 20], "dtype": "int32"},
                   "ids": {"shape": ["batch", 20], "dtype": "int64", "high": 10,
                           "specials": []}}})
    out = gen(edge, names=("n", "ids"))
    info = np.iinfo(np.int32)
    assert out["n"].min() == info.min and out["n"].max() == info.max
    assert out["ids"].min() >= 0 and out["ids"].max() < 10


def test_edge_sets_add_an_empty_batch() -> None:
    edge = EdgeFixture.model_validate({"kind": "edge", "inputs": {"x": {"shape": ["batch"]}}})
    assert batch_sizes_for(edge, [1, 4]) == [1, 4, 0]
    assert gen(edge, batch=0, names=("x",))["x"].shape == (0,)
    assert batch_sizes_for(random_set(), [1, 4]) == [1, 4]


def test_special_values_table() -> None:
    assert special_values("float16", ["denormal"]) == [float(np.float16(2 ** -24)) * 3]
    assert special_values("uint8", None) == [0, 255, 0]


def test_file_rows_wrap_and_cast(tmp_path: Path) -> None:
    rows = np.arange(5 * 2, dtype=np.float64).reshape(5, 2)
    np.savez(tmp_path / "d.npz", x=rows, label=np.arange(5))
    fixture = FileFixture.model_validate({"kind": "file", "path": "d.npz",
                                          "keys": {"y": "label"}})
    out = generate("f", fixture, ["x", "y"], Draw(3, "float16", 1), seed=0, base_dir=tmp_path)
    assert out["x"].dtype == np.float16
    np.testing.assert_array_equal(out["x"][:, 0], [6, 8, 0])  # rows 3, 4, then wrap to 0
    assert out["y"].dtype == rows.dtype.type(0).astype(np.int64).dtype
    np.testing.assert_array_equal(out["y"], [3, 4, 0])


def test_file_missing_key_names_what_exists(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", a=np.zeros((2, 2)))
    fixture = FileFixture.model_validate({"kind": "file", "path": "d.npz"})
    with pytest.raises(FixtureError, match=r"no array 'x' .*\(has: a\)"):
        generate("f", fixture, ["x", "z"], Draw(1, "float32"), seed=0, base_dir=tmp_path)


def test_pt_file_loads_without_pickle(tmp_path: Path) -> None:
    import torch

    torch.save({"x": torch.ones(4, 3, dtype=torch.bfloat16)}, tmp_path / "d.pt")
    fixture = FileFixture.model_validate({"kind": "file", "path": "d.pt"})
    out = generate("f", fixture, ["x"], Draw(2, "bfloat16"), seed=0, base_dir=tmp_path)
    assert out["x"].dtype == ml_dtypes.bfloat16 and out["x"].shape == (2, 3)


# ------------------------------------------------------------ padding masks, several sizes


def test_padding_mask_has_random_lengths_row_zero_full_and_a_minimum() -> None:
    spec = {"kind": "random", "dims": {"seq": 12},
            "inputs": {"mask": {"shape": ["batch", "seq"], "dtype": "int64",
                                "distribution": "padding", "min_length": 3}}}
    mask = gen(RandomFixture.model_validate(spec), batch=64, names=("mask",))["mask"]
    assert mask.dtype == np.int64 and set(np.unique(mask)) == {0, 1}
    lengths = mask.sum(1)
    assert lengths[0] == 12 and lengths.min() >= 3 and len(set(lengths)) > 3
    # right padding: every row is ones then zeros
    assert all((row[:n] == 1).all() and (row[n:] == 0).all()
               for row, n in zip(mask, lengths, strict=True))
    spec["inputs"]["mask"]["padding_side"] = "left"
    left = gen(RandomFixture.model_validate(spec), batch=8, names=("mask",))["mask"]
    assert all((row[12 - n:] == 1).all() and (row[: 12 - n] == 0).all()
               for row, n in zip(left, left.sum(1), strict=True))


def test_padding_mask_stays_a_mask_in_edge_sets() -> None:
    edge = EdgeFixture.model_validate({
        "kind": "edge", "fraction": 0.5, "dims": {"seq": 10},
        "inputs": {"mask": {"shape": ["batch", "seq"], "dtype": "int64",
                            "distribution": "padding"}}})
    mask = gen(edge, batch=6, names=("mask",))["mask"]
    assert set(np.unique(mask)) <= {0, 1}


def test_randint_range_is_per_input_with_a_documented_default() -> None:
    fixture = RandomFixture.model_validate({
        "kind": "random", "inputs": {
            "ids": {"shape": ["batch", 50], "dtype": "int64", "high": 30522},
            "small": {"shape": ["batch", 50], "dtype": "int64"},
            "bytes": {"shape": ["batch", 50], "dtype": "uint8", "low": 250}}})
    out = gen(fixture, batch=40, names=("ids", "small", "bytes"))
    assert out["ids"].max() >= 1000 and out["ids"].max() < 30522
    assert out["small"].min() >= 0 and out["small"].max() < 100  # the default [0, 100)
    assert out["bytes"].min() >= 250 and out["bytes"].max() <= 255


def test_a_list_of_sizes_gives_one_fixture_id_per_size() -> None:
    from parity_gate.manifest.models import Manifest
    from parity_gate.plan.cases import all_case_keys, module_fixtures

    manifest = Manifest.model_validate({
        "fixtures": {"text": {"kind": "random", "dims": {"seq": [8, 32], "n": 2},
                              "inputs": {"ids": {"shape": ["batch", "seq", "n"],
                                                 "dtype": "int64"}}}},
        "modules": [{"name": "m", "factory": "a:b", "inputs": [{"name": "ids"}],
                     "fixtures": ["text"]}]})
    module = manifest.modules[0]
    sets = module_fixtures(manifest, module)
    assert list(sets) == ["text@seq=8", "text@seq=32"]
    shapes = [gen(s, batch=2, names=("ids",))["ids"].shape for s in sets.values()]
    assert shapes == [(2, 8, 2), (2, 32, 2)]
    from parity_gate.manifest.models import resolve_settings

    ids = [k.id for k in all_case_keys(manifest, module, resolve_settings(manifest, module))]
    assert ids[:2] == ["m/float32/text@seq=8/b1/cpu", "m/float32/text@seq=8/b4/cpu"]
    assert "m/float32/text@seq=32/b7/cpu" in ids
