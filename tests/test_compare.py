"""Tests for parity_gate.compare: the pass rule, ULPs, needed tolerance, verdicts."""

from __future__ import annotations

import itertools
import json
import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from parity_gate.compare import Comparison, Tolerance, Verdict, compare, ulp_distance

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
FAST = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _next_bits(x: np.ndarray, steps: int) -> np.ndarray:
    """x moved `steps` representable values up, by stepping the bit pattern
    (positive x: bit patterns order like the values)."""
    ity = {2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]
    return (x.view(ity) + ity(steps)).view(x.dtype)


# ---------------------------------------------------------------- ULP distance


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_ulp_of_neighbours(dtype):
    for v in (1.0, 0.3, 1e-3, 1234.5):
        x = np.array([v], dtype)
        for k in (1, 2, 7):
            assert ulp_distance(x[0], _next_bits(x, k)[0], dtype) == k
            c = compare(x, _next_bits(x, k), Tolerance(0, 0))
            assert c.ulp == k and c.verdict == Verdict.ROUNDING
    if dtype != BF16:
        one = np.array(1.0, dtype)
        up = np.nextafter(one, np.array(np.inf, dtype))
        assert ulp_distance(one, up, dtype) == 1
        assert ulp_distance(one, np.nextafter(one, np.array(0, dtype)), dtype) == 1


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_ulp_across_zero_and_specials(dtype):
    tiny = np.array([1], {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]).view(dtype)
    assert ulp_distance(tiny[0], -tiny[0], dtype) == 2  # -tiny, ±0, +tiny
    assert ulp_distance(0.0, -0.0, dtype) == 0
    assert ulp_distance(np.nan, np.nan, dtype) == 0
    assert ulp_distance(np.inf, np.inf, dtype) == 0
    assert ulp_distance(np.inf, -np.inf, dtype) is None
    assert ulp_distance(np.inf, 1.0, dtype) is None
    assert ulp_distance(np.nan, 1.0, dtype) is None


# ------------------------------------------------------------ ±0, NaN and Inf


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_signed_zero_rule(dtype):
    ref = np.array([0.0, 1.0, -0.0], dtype)
    got = np.array([-0.0, 1.0, -0.0], dtype)
    c = compare(ref, got, Tolerance(0, 0))
    assert c.passed and c.verdict == Verdict.PASS and c.signed_zeros is None
    s = compare(ref, got, Tolerance(0, 0), strict_signed_zeros=True)
    assert not s.passed and s.verdict == Verdict.SIGNED_ZERO
    assert s.signed_zeros == 1 and "(0,)" in s.reason


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_nan_and_inf_rules(dtype):
    tol = Tolerance(1e-2, 1e-2)
    both = np.array([np.nan, np.inf, -np.inf, 1.0], dtype)
    assert compare(both, both.copy(), tol).verdict == Verdict.PASS
    cases = {
        "nan_got_only": ([1.0, 2.0], [1.0, np.nan]),
        "nan_ref_only": ([np.nan, 2.0], [1.0, 2.0]),
        "inf_got_only": ([1.0, 2.0], [1.0, np.inf]),
        "inf_ref_only": ([1.0, -np.inf], [1.0, 2.0]),
        "inf_sign": ([1.0, np.inf], [1.0, -np.inf]),
    }
    for cat, (r, g) in cases.items():
        c = compare(np.array(r, dtype), np.array(g, dtype), Tolerance(1e9, 1e9))
        assert c.verdict == Verdict.NON_FINITE and not c.passed, cat
        assert c.nonfinite[cat]["count"] == 1
        assert c.ulp is None and c.needed_atol is None and c.needed_rtol is None
        assert c.histogram["nonfinite"] == 1 and c.mismatch_count == 1
        assert c.worst_index == tuple(c.nonfinite[cat]["first"][0])


def test_inf_vs_finite_is_never_a_distance():
    big = np.finfo(np.float32).max
    c = compare(np.array([np.inf], np.float32), np.array([big], np.float32), Tolerance(1, 1))
    assert c.verdict == Verdict.NON_FINITE and c.ulp is None


# --------------------------------------------------------- pass rule vs torch


def _special_floats(dtype: np.dtype):
    width = 16 if dtype.itemsize == 2 else dtype.itemsize * 8
    return st.one_of(
        st.floats(width=width, allow_nan=True, allow_infinity=True),
        st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-3, 65504.0]),
    )


@st.composite
def _pair(draw, dtype: np.dtype):
    store = np.float32 if dtype == BF16 else dtype
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6))
    ref = draw(hnp.arrays(store, shape, elements=_special_floats(np.dtype(store))))
    mode = draw(st.sampled_from(["noise", "independent"]))
    if mode == "noise":
        scale = draw(st.sampled_from([1e-7, 1e-4, 1e-2, 1.0]))
        noise = draw(hnp.arrays(np.float64, shape,
                                elements=st.floats(-1, 1, allow_nan=False, allow_infinity=False)))
        with np.errstate(all="ignore"):
            got = (ref.astype(np.float64) * (1 + scale * noise)).astype(store)
    else:
        got = draw(hnp.arrays(store, shape, elements=_special_floats(np.dtype(store))))
    return ref.astype(dtype), got.astype(dtype)


_TOLS = st.tuples(st.sampled_from([0.0, 1e-8, 1e-5, 1e-3, 1e-2, 0.5]),
                  st.sampled_from([0.0, 1.3e-6, 1e-5, 1e-3, 1e-2, 0.5]))


def _torch_close(ref: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> bool:
    try:
        torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(ref),
                                   atol=atol, rtol=rtol, equal_nan=True)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@FAST
@given(data=st.data(), tols=_TOLS)
def test_pass_rule_matches_torch_assert_close_in_float64(dtype, data, tols):
    """The rule is torch's, evaluated on the float64 upcast (exact difference)."""
    ref, got = data.draw(_pair(dtype))
    atol, rtol = tols
    c = compare(ref, got, Tolerance(atol, rtol))
    expect = _torch_close(ref.astype(np.float64), got.astype(np.float64), atol, rtol)
    assert c.passed == expect
    assert (c.mismatch_count == 0) == expect


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=str)
@FAST
@given(data=st.data(), tols=_TOLS)
def test_pass_rule_matches_native_torch_away_from_the_boundary(dtype, data, tols):
    """torch>=2.x evaluates isclose in the tensors' own dtype; away from the
    rounding of that evaluation both agree."""
    ref, got = data.draw(_pair(dtype))
    atol, rtol = tols
    r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    with np.errstate(all="ignore"):
        margin = np.abs(np.abs(g64 - r64) - (atol + rtol * np.abs(r64)))
        scale = np.abs(g64 - r64) + atol + rtol * np.abs(r64)
    eps = np.finfo(dtype).eps
    assume(not np.any(np.isfinite(margin) & (margin <= 8 * eps * scale)))
    assert compare(ref, got, Tolerance(atol, rtol)).passed == _torch_close(ref, got, atol, rtol)


# ------------------------------------------------------------ needed tolerance


def _check_needed(ref, got, tol):
    c = compare(ref, got, tol)
    a, r = c.needed_atol, c.needed_rtol
    assert a is not None and r is not None
    assert compare(ref, got, Tolerance(a, tol.rtol)).passed
    if a > 0:
        assert not compare(ref, got, Tolerance(np.nextafter(a, 0.0), tol.rtol)).passed
        assert not compare(ref, got, Tolerance(a * (1 - 1e-9), tol.rtol)).passed
    if math.isfinite(r):
        assert compare(ref, got, Tolerance(tol.atol, r)).passed
        if r > 0:
            assert not compare(ref, got, Tolerance(tol.atol, np.nextafter(r, 0.0))).passed
            assert not compare(ref, got, Tolerance(tol.atol, r * (1 - 1e-9))).passed
    return c


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_needed_tolerance_is_the_smallest_that_passes(dtype):
    rng = _rng(1)
    x = rng.standard_normal((4, 5, 6))
    ref = x.astype(dtype)
    got = (x * (1 + 3e-3 * rng.standard_normal(x.shape)) + 1e-4).astype(dtype)
    for tol in (Tolerance(1e-5, 1e-3), Tolerance(0.0, 0.0), Tolerance(1e-3, 0.0),
                Tolerance(0.0, 1e-4)):
        c = _check_needed(ref, got, tol)
        assert not c.passed


@FAST
@given(data=st.data(), tols=_TOLS)
def test_needed_tolerance_property(data, tols):
    ref, got = data.draw(_pair(np.dtype(np.float32)))
    assume(np.all(np.isfinite(ref)) and np.all(np.isfinite(got)))
    _check_needed(ref, got, Tolerance(*tols))


def test_needed_tolerance_across_chunks():
    rng = _rng(2)
    x = rng.standard_normal((3, 300_001)).astype(np.float32)
    y = x + (1e-5 * rng.standard_normal(x.shape)).astype(np.float32)
    _check_needed(x, y, Tolerance(1e-6, 1e-4))


def test_needed_rtol_is_infinite_when_ref_is_zero():
    c = compare(np.array([0.0, 1.0]), np.array([0.5, 1.0]), Tolerance(0.1, 0.1))
    assert c.needed_rtol == math.inf and c.needed_atol == 0.5
    json.dumps(c.to_dict(), allow_nan=False)


# ------------------------------------------------------------ integers / bool


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64])
def test_integers_are_exact(dtype):
    ref = np.arange(24, dtype=dtype).reshape(2, 3, 4)
    assert compare(ref, ref.copy(), Tolerance(0, 0)).verdict == Verdict.PASS
    got = ref.copy()
    got[1, 2, 3] += 1
    got[0, 1, 2] += 1
    c = compare(ref, got, Tolerance(100.0, 100.0))  # tolerance does not apply
    assert not c.passed and c.mismatch_count == 2
    assert c.first_index == (0, 1, 2) and c.worst_index == (0, 1, 2)
    assert c.verdict == Verdict.MISMATCH and "(0, 1, 2)" in c.reason


def test_int64_beyond_float64_precision_is_still_exact():
    ref = np.array([2**62, 5], np.int64)
    got = np.array([2**62 + 1, 5], np.int64)
    c = compare(ref, got, Tolerance(0, 0))
    assert not c.passed and c.mismatch_count == 1


def test_booleans_are_exact():
    ref = np.array([[True, False], [True, True]])
    got = ref.copy()
    got[1, 0] = False
    c = compare(ref, got, Tolerance(1.0, 1.0))
    assert not c.passed and c.mismatch_count == 1 and c.first_index == (1, 0)
    assert compare(ref, ref.copy(), Tolerance(0, 0)).passed


# ------------------------------------------------------------ verdict classes


def _rounding_pair(seed: int, shape=(4, 16, 12, 12), channel_scale=False):
    """ref computed in float64 and rounded; got computed in float32."""
    rng = _rng(seed)
    a = rng.standard_normal((*shape[:-1], 64))
    w = rng.standard_normal((64, shape[-1])) / 8
    if channel_scale:
        a = a * np.logspace(0, 3, shape[1]).reshape(1, -1, *([1] * (len(shape) - 2)))
    got = np.tanh(a.astype(np.float32) @ w.astype(np.float32) / 4) * 4
    ref = (np.tanh((a @ w) / 4) * 4).astype(np.float32)
    return ref, got.astype(np.float32)


def _constructed() -> dict[str, tuple]:
    rng = _rng(3)
    base = rng.standard_normal((4, 8, 16, 16)).astype(np.float32)
    noisy = (base * (1 + 1e-7 * rng.standard_normal(base.shape))).astype(np.float32)
    tol = Tolerance(1e-5, 1e-3)
    cases: dict[str, tuple] = {}
    cases["pass"] = (base, noisy, tol, {})
    cases["shape"] = (base, noisy.transpose(0, 1, 3, 2).copy()[:, :, :, :15], tol, {})
    cases["dtype"] = (base, noisy.astype(np.float16), tol, {})
    g = noisy.copy()
    g[1, 2, 3, 4] = np.nan
    cases["non_finite"] = (base, g, tol, {})
    g = noisy.copy()
    g[:, 3] = rng.standard_normal(g[:, 3].shape)
    cases["region"] = (base, g, tol, {})
    cases["offset"] = (base, noisy + np.float32(0.05), tol, {})
    cases["sign"] = (base, -noisy, tol, {})
    ref, got = _rounding_pair(0)
    cases["rounding"] = (ref, got, Tolerance(0, 1e-7), {})
    logits = rng.standard_normal((32, 10)).astype(np.float32)
    flip = logits.copy()
    top = flip[7].argmax()
    flip[7, (top + 1) % 10] = flip[7, top] + np.float32(1e-4)  # within tolerance, label flips
    cases["label_flip"] = (logits, flip, tol, {"task": "classification"})
    z = base.copy()
    z[0, 0, 0, :3] = 0.0
    gz = z.copy()
    gz[0, 0, 0, 1] = -0.0
    cases["signed_zero"] = (z, gz, tol, {"strict_signed_zeros": True})
    g = noisy.copy()
    idx = rng.choice(g.size, 40, replace=False)
    g.reshape(-1)[idx] = rng.standard_normal(40).astype(np.float32) * 3
    cases["mismatch"] = (base, g, tol, {})
    return cases


_CASES = _constructed()


@pytest.mark.parametrize("expected", sorted(_CASES))
def test_each_verdict_on_its_example_and_not_on_the_others(expected):
    ref, got, tol, kw = _CASES[expected]
    c = compare(ref, got, tol, **kw)
    assert c.verdict == Verdict(expected), c.reason
    assert c.passed == (expected == "pass")
    assert c.reason.startswith(expected), c.reason
    assert "\n" not in c.reason and "\n" not in c.headline()


def test_every_verdict_is_covered():
    # `count` is the detection comparison's own (tests/test_detection_compare.py)
    assert {v.value for v in Verdict} - {Verdict.COUNT.value} == set(_CASES)


def test_region_names_axis_and_slice():
    ref, got, tol, _ = _CASES["region"]
    c = compare(ref, got, tol)
    assert c.region["axes"] == [[1, [[3, 3]]]]
    assert "index 3 of axis 1" in c.reason and "rest matches" in c.reason
    assert c.region["wrong"] <= c.region["size"] == 4 * 16 * 16


def test_region_of_negated_channel_says_so():
    ref, _, tol, _ = _CASES["region"]
    got = ref.copy()
    got[:, 5] *= -1
    c = compare(ref, got, tol)
    assert c.verdict == Verdict.REGION and "negated" in c.reason


def test_region_spanning_chunks_and_long_axis():
    x = _rng(4).standard_normal(1_200_000).astype(np.float32)
    y = x.copy()
    y[500_000:700_000] += 1.0
    c = compare(x, y, Tolerance(1e-5, 1e-3))
    assert c.verdict == Verdict.REGION, c.reason
    assert c.region["axes"] == [[0, [[500_000, 699_999]]]]


def test_sign_flip_of_negative_half_is_sign():
    x = _rng(5).standard_normal((64, 64)).astype(np.float32)
    c = compare(x, np.abs(x), Tolerance(1e-5, 1e-3))
    assert c.verdict == Verdict.SIGN, c.reason


def test_scattered_equal_shift_is_not_offset():
    x = _rng(6).standard_normal((64, 64)).astype(np.float32)
    y = x.copy()
    y.reshape(-1)[_rng(7).choice(x.size, 30, replace=False)] += 1.0
    c = compare(x, y, Tolerance(1e-5, 1e-3))
    assert c.verdict == Verdict.MISMATCH, c.reason


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("channel_scale", [False, True])
@pytest.mark.parametrize("tol", [Tolerance(0, 0), Tolerance(1e-7, 1e-7), Tolerance(1e-6, 1e-6)])
def test_rounding_only_pair_is_never_region_or_offset(seed, channel_scale, tol):
    ref, got = _rounding_pair(seed, channel_scale=channel_scale)
    c = compare(ref, got, tol)
    assert c.verdict in (Verdict.ROUNDING, Verdict.PASS), c.reason
    assert c.verdict not in (Verdict.REGION, Verdict.OFFSET, Verdict.SIGN)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_rounding_in_half_precisions(dtype):
    x = _rng(8).standard_normal((8, 32, 32))
    ref = x.astype(dtype)
    got = (x + 0.5 * 2.0 ** -11 * np.abs(x) * _rng(9).standard_normal(x.shape)).astype(dtype)
    c = compare(ref, got, Tolerance(0, 0))
    assert c.verdict == Verdict.ROUNDING, c.reason


def test_shape_reason_names_transposition():
    ref = np.zeros((2, 3, 5), np.float32)
    c = compare(ref, ref.transpose(0, 2, 1), Tolerance(1, 1))
    assert c.verdict == Verdict.SHAPE and "transposed" in c.reason
    d = compare(ref, ref.astype(np.float16), Tolerance(1, 1))
    assert d.verdict == Verdict.DTYPE and "float16" in d.reason


# ------------------------------------------------------------ classification


def test_top1_agreement_and_flipped_indices():
    rng = _rng(10)
    ref = rng.standard_normal((6, 5, 10)).astype(np.float32)  # 30 samples, 10 classes
    for s in (3, 17):  # runner-up a hair below the top in ref, a hair above in got
        row = ref.reshape(-1, 10)[s]
        row[(row.argmax() + 1) % 10] = row.max() - np.float32(1e-5)
    got = ref.copy()
    for s in (3, 17):
        row = got.reshape(-1, 10)[s]
        row[(row.argmax() + 1) % 10] += np.float32(2e-5)
    tol = Tolerance(1e-3, 1e-3)
    c = compare(ref, got, tol, task="classification")
    assert c.verdict == Verdict.LABEL_FLIP and not c.passed
    assert c.flipped == [3, 17] and c.flipped_count == 2
    assert c.top1_agreement == pytest.approx(28 / 30)
    assert c.mismatch_count == 0  # within tolerance, still fails
    ok = compare(ref, got, tol, task="classification", min_top1_agreement=0.9)
    assert ok.passed and ok.verdict == Verdict.PASS


def test_out_of_tolerance_with_full_agreement_fails_on_tolerance():
    ref = _rng(11).standard_normal((16, 10)).astype(np.float32)
    c = compare(ref, ref * 1.5, Tolerance(1e-5, 1e-3), task="classification")
    assert c.top1_agreement == 1.0 and not c.passed
    assert c.verdict not in (Verdict.LABEL_FLIP, Verdict.PASS)


# ------------------------------------------------------------ statistics


def test_histogram_and_quantiles():
    rng = _rng(12)
    ref = np.zeros(100_000)
    err = 10.0 ** rng.uniform(-11, 3, ref.size)
    err[:7] = 0.0
    err[7:20] = 1e-6  # exactly on an edge: counts in the decade above it
    c = compare(ref, err, Tolerance(0, 0))
    edges = [10.0**k for k in range(-9, 3)]
    nz = err[err > 0]
    expect = [7, int(np.sum(nz < edges[0]))]
    expect += [int(np.sum((nz >= a) & (nz < b))) for a, b in itertools.pairwise(edges)]
    expect += [int(np.sum(nz >= edges[-1])), 0]
    assert list(c.histogram.values()) == expect
    assert c.histogram["1e-6..1e-5"] >= 13
    assert c.median_abs == pytest.approx(np.median(err), rel=0.03)
    assert c.p99_abs == pytest.approx(np.percentile(err, 99), rel=0.03)
    assert c.max_abs == err.max()


def test_worst_element_reports_values_bits_and_ulp():
    ref = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    got = ref.copy()
    got[1, 0] = np.nextafter(np.float32(3.0), np.float32(4.0))
    c = compare(ref, got, Tolerance(0, 0))
    assert c.worst_index == (1, 0) and c.ulp == 1
    assert c.ref_bits == "0x40400000" and c.got_bits == "0x40400001"
    assert c.ref_value == 3.0 and c.got_value == float(got[1, 0])
    h = c.headline()
    assert "[1, 0]" in h and "1 ulp" in h and "needs atol" in h


def test_empty_and_scalar():
    e = np.zeros((0, 3), np.float32)
    assert compare(e, e, Tolerance(0, 0)).passed
    c = compare(np.float32(1.0), np.float32(2.0), Tolerance(0, 0))
    assert not c.passed and c.worst_index == ()


def test_non_contiguous_inputs():
    x = _rng(13).standard_normal((32, 48)).astype(np.float32)
    y = x.copy()
    y[:, 7] += 1
    c = compare(x.T, y.T, Tolerance(1e-5, 1e-3))
    assert c.verdict == Verdict.REGION and c.region["axes"] == [[0, [[7, 7]]]]


# ------------------------------------------------------------ serialisation


@pytest.mark.parametrize("expected", sorted(_CASES))
def test_to_dict_round_trip_is_json_safe(expected):
    ref, got, tol, kw = _CASES[expected]
    c = compare(ref, got, tol, **kw)
    d = c.to_dict()
    text = json.dumps(d, allow_nan=False)
    back = Comparison.from_dict(json.loads(text))
    assert back.to_dict() == d
    assert back.verdict == c.verdict and back.worst_index == c.worst_index
    assert bool(back) == c.passed


def test_non_finite_floats_encode_as_strings():
    c = compare(np.array([0.0, np.nan]), np.array([1.0, 2.0]), Tolerance(0, 0))
    d = c.to_dict()
    assert d["ref_value"] == "nan" and d["needed_atol"] is None
    json.dumps(d, allow_nan=False)
    assert math.isnan(Comparison.from_dict(d).ref_value)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_a_whole_unit_in_a_step_output_is_never_rounding(dtype: str) -> None:
    """heaviside(x, y) on special values: y passes through where x == 0, so the
    reference holds the dtype's largest values and its mean |ref| is enormous;
    a 0 -> 1 next to them was once called rounding against that mean."""
    x = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.0, 2.0] * 4, dtype=getattr(torch, dtype))
    y = torch.full_like(x, torch.finfo(x.dtype).max)
    y[1::6] = 0.5
    ref = torch.heaviside(x, y).numpy()
    got = ref.copy()
    got[1::6] = 1.5  # -0.0 taken as positive: a whole unit off, values 0.5 -> 1.5 are not
    got[3::6] = 1.0  # heaviside(-1) = 0 -> 1: a branch flip
    c = compare(ref, got, Tolerance(1e-5, 1e-5))
    assert c.verdict is not Verdict.ROUNDING, c.reason
    assert c.verdict in (Verdict.MISMATCH, Verdict.REGION, Verdict.OFFSET), c.reason
    # the same tensor without the flips is still within tolerance
    assert compare(ref, ref.copy(), Tolerance(1e-5, 1e-5)).passed


def test_large_integer_valued_floats_a_unit_apart_are_still_rounding() -> None:
    """The exception needs the unit to be far beyond the element's own rounding:
    2**25 + 4 vs 2**25 in float32 is one ulp apart."""
    ref = np.full(64, 2.0**25, np.float32)
    got = ref.copy()
    got[3] = np.float32(2.0**25 + 4)
    c = compare(ref, got, Tolerance(0.0, 1e-9))
    assert c.verdict is Verdict.ROUNDING, c.reason
