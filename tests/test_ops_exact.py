"""The op sweep's judgement on real eager results: exact references, the signed-zero
policy, layout quirks, figure growth at the rounding level, dtypes eager accepts.

Pure lane: torch runs eager in this process; nothing is exported, no process starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from parity_gate import compare as cmp
from parity_gate.gate import baseline as bl
from parity_gate.model.findings import OpCase, RecheckReference, RecheckVerdict
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.ops import accepted, exact, gating
from parity_gate.ops.inputs import make_inputs
from parity_gate.ops.judge import example, judge
from parity_gate.ops.recheck import recheck
from parity_gate.ops.records import FLOATS, RANGE, user_op
from parity_gate.ops.registry import load_variants
from parity_gate.ops.worker import _either, _strided, compile_call

CATALOGUE = load_variants(("parity_gate.ops.catalogue:VARIANTS",))


def _eager(vid: str, dtype: str, cls: str = "specials",
           strided: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray]:
    v = CATALOGUE[vid]
    inputs = make_inputs(v, dtype, cls)
    tensors = [torch.from_numpy(inputs[a.name]) for a in v.args]
    with torch.no_grad():
        out = compile_call(v, 0)(*[_strided(t) if strided else t for t in tensors])
    return inputs, out.numpy()


def _exact(vid: str, inputs: dict[str, np.ndarray], out: np.ndarray,
           fallback: np.ndarray | None = None) -> np.ndarray:
    v = CATALOGUE[vid]
    found = exact.reference(v.call, list(v.arg_names), inputs, [out],
                            [fallback] if fallback is not None else None)
    assert found is not None
    return found[0][0]


def _f64(vid: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The IEEE float64 values the worker falls back to for zeros and x/0."""
    v = CATALOGUE[vid]
    with torch.no_grad():
        return compile_call(v, 0)(*[torch.from_numpy(inputs[a.name]).double()
                                    for a in v.args]).numpy()


def _tol(vid: str, dtype: str) -> cmp.Tolerance:
    return cmp.Tolerance(*CATALOGUE[vid].tolerance_for(dtype))


def test_floor_divide_of_inf_is_inf_exactly_so_eager_nan_is_not_confirmed() -> None:
    inputs, eager = _eager("floor_divide", "float32")
    x, y = inputs["x"], inputs["y"]
    at = np.argwhere(np.isposinf(x) & (y > 0) & (y < 1e-40))[0]
    at_t = tuple(int(i) for i in at)
    assert np.isnan(eager[at_t])  # torch 2.13 eager: floor_divide(inf, 4.2e-45) = nan
    truth = _exact("floor_divide", inputs, eager, _f64("floor_divide", inputs))
    assert truth[at_t] == np.inf and np.isnan(_f64("floor_divide", inputs)[at_t])
    onnx = eager.copy()
    onnx[at_t] = np.inf  # what the exported Floor(Div) computes there
    checked = recheck([eager], [onnx], [truth], [_tol("floor_divide", "float32")], [0],
                      reference=RecheckReference.EXACT)
    assert checked.verdict is not RecheckVerdict.CONFIRMED
    assert "exact" in checked.describe()


def test_an_exact_zero_is_zero_though_eager_is_nan_there() -> None:
    """torch 2.13's float64 fmod(±8.99e307, ±2.2e-308) is NaN; the exact remainder is 0
    (the dividend is a multiple of the divisor), signed as the dividend, which is what
    the exported Mod(fmod=1) returns: eager is off, never the export."""
    inputs, eager = _eager("fmod", "float64")
    x, y = inputs["x"], inputs["y"]
    at = np.argwhere(np.isnan(eager) & np.isfinite(x) & (np.abs(x) > 1e307)
                     & (np.abs(y) == np.finfo(np.float64).tiny))
    assert len(at) >= 2  # torch 2.13 eager: NaN there
    truth = _exact("fmod", inputs, eager, eager)
    for index in map(tuple, at):
        assert truth[index] == 0 and np.signbit(truth[index]) == np.signbit(x[index])
    with np.errstate(invalid="ignore"):
        onnx = np.fmod(x, y)  # IEEE fmod, as ONNX Runtime's Mod(fmod=1)
    checked = recheck([eager], [onnx], [truth], [_tol("fmod", "float64")], [0],
                      reference=RecheckReference.EXACT)
    assert checked.verdict is RecheckVerdict.EAGER_OFF, checked.describe()


def test_a_negative_zero_input_is_exact_where_its_sign_cannot_matter() -> None:
    """addcdiv(-0, y, y, value=0.5) is 0.5 whatever the zero's sign; torch 2.13's float64
    eager gives 0.6667 on the denormal y (it scales y first), the export 0.5. The element
    is exact, not IEEE's fallback (eager itself on float64), so eager is the one off. An
    element where the sign decides (atan2(-0, -1) is -pi, not pi) keeps IEEE's value."""
    inputs, eager = _eager("addcdiv", "float64")
    x, y, z = inputs["x"], inputs["y"], inputs["z"]
    at = tuple(int(i) for i in np.argwhere((x == 0) & np.signbit(x) & (y == z) & (y > 0)
                                           & (y < 1e-300))[0])
    assert eager[at] != 0.5  # torch 2.13: 0.6667 there
    truth = _exact("addcdiv", inputs, eager, eager)
    assert truth[at] == 0.5
    with np.errstate(all="ignore"):
        onnx = x + 0.5 * (y / z)  # the exported Div, Mul, Add, in IEEE float64
    assert onnx[at] == 0.5
    checked = recheck([eager], [onnx], [truth], [_tol("addcdiv", "float64")], [0],
                      reference=RecheckReference.EXACT)
    assert checked.verdict is RecheckVerdict.EAGER_OFF, checked.describe()
    ref = exact.reference("torch.atan2(x, y)", ["x", "y"],
                          {"x": np.array([-0.0, 1.0]), "y": np.array([-1.0, -0.0])},
                          [np.zeros(2)], [np.array([-np.pi, np.pi / 2])])
    assert ref is not None and list(ref[0][0]) == [-np.pi, np.pi / 2] and ref[1] == 1


def test_integer_cases_get_exact_wrapping_references() -> None:
    inputs, eager = _eager("add", "int8")
    truth = _exact("add", inputs, eager)
    assert truth.dtype == np.int8 and np.array_equal(truth, eager)  # torch wraps int8
    wrong = eager.copy()
    wrong.reshape(-1)[0] ^= 1
    checked = recheck([eager], [wrong], [truth], [cmp.Tolerance(0, 0)], [0],
                      reference=RecheckReference.EXACT)
    assert checked.verdict is RecheckVerdict.CONFIRMED and checked.closer == "eager"
    gcd_in, gcd_out = _eager("gcd", "int32")
    assert _exact("gcd", gcd_in, gcd_out).dtype == np.int32


def test_float64_is_checked_against_mpmath_and_signed_zeros_stay_ieee() -> None:
    inputs, eager = _eager("atan2", "float64")
    truth = _exact("atan2", inputs, eager, eager)
    assert np.array_equal(np.signbit(truth), np.signbit(eager))  # -0 inputs: IEEE's answer
    close = np.isclose(truth, eager, rtol=1e-15, atol=0, equal_nan=True)
    assert close.all()
    i_in, i_out = _eager("erfcx", "float64", RANGE)  # moderate large x, mpmath's erfc
    assert np.allclose(_exact("erfcx", i_in, i_out, i_out), i_out, rtol=1e-13)


def test_a_call_that_is_not_elementwise_has_no_exact_reference() -> None:
    v = CATALOGUE["sum.dim"]
    inputs = make_inputs(v, "float64", "normal")
    out = torch.sum(torch.from_numpy(inputs["x"]), dim=-1).numpy()
    assert exact.reference(v.call, ["x"], inputs, [out], None) is None


@pytest.mark.parametrize("dtype", FLOATS)
def test_one_signed_zero_policy_for_every_dtype(dtype: str) -> None:
    """trunc(-0.5) is -0.0: a graph giving +0.0 fails in every dtype, the re-check
    judges the sign too (not "ill-conditioned"), and the example is that element."""
    v = CATALOGUE["trunc"]
    x = np.array([-0.5, 1.5, -2.5, 3.0] * 8, np.float64).reshape(4, 8)
    t = torch.from_numpy(x).to(getattr(torch, dtype))
    eager = torch.trunc(t)
    e = eager.float().numpy() if dtype == "bfloat16" else eager.numpy()
    onnx = np.where(e == 0, np.zeros_like(e), e).astype(e.dtype)  # -0.0 -> 0.0
    if dtype == "bfloat16":
        e, onnx = (a.astype(np.float32) for a in (e, onnx))
    verdict = judge(v, "float32" if dtype == "bfloat16" else dtype, [e], [onnx])
    assert verdict.outcome is Outcome.MISMATCH
    comparison = verdict.comparisons[0]
    assert comparison.verdict is cmp.Verdict.SIGNED_ZERO
    truth = torch.trunc(torch.from_numpy(x)).numpy()
    checked = recheck([e], [onnx], [truth], [cmp.Tolerance(1e-5, 1e-5)], [0],
                      signed_zeros=True)
    assert checked.verdict is RecheckVerdict.CONFIRMED
    ex = example(comparison, e, onnx, {"x": x})
    assert ex is not None and ex.eager == "-0.0" and ex.onnx == "0.0" and ex.inputs["x"] == "-0.5"


def test_gelu_on_strided_inputs_takes_another_path_and_either_answer_is_accepted() -> None:
    """Eager gelu on the specials, contiguous vs strided views: where the two differ,
    an exported model matching the strided answer passes (_either)."""
    _, contiguous = _eager("gelu", "float32")
    _, strided = _eager("gelu", "float32", strided=True)
    differ = ~((contiguous == strided) | (np.isnan(contiguous) & np.isnan(strided)))
    if not differ.any():
        pytest.skip("this CPU's vectorised and scalar gelu agree bit for bit")
    onnx = strided.copy()
    onnx[differ] += np.float32(1.0)  # beyond tolerance where eager's answers disagree
    merged = _either(contiguous, strided, strided)
    assert np.array_equal(merged, strided, equal_nan=True)
    assert not np.array_equal(_either(contiguous, strided, onnx), strided, equal_nan=True)


def _known(figures: tuple[float, float], now: tuple[float, float], dtype: str) -> str:
    case_id = f"op/isnan/{dtype}/specials/cpu"
    entry = bl.Entry(case_id, "recorded", outcome=Outcome.MISMATCH)
    ref = np.array([1.0, np.nan, 2.0], dtype=dtype)
    got = np.array([1.0, 5.0, 2.0 * (1 + now[1])], dtype=dtype)
    comparison = cmp.compare(ref, got, cmp.Tolerance(1e-7, 1e-7))
    case = CaseResult(CaseKey("op/isnan", dtype, "specials", None, "cpu"), Outcome.MISMATCH,
                      "o0: non_finite", comparisons=[comparison],
                      op=OpCase("isnan", "predicate", "torch.isnan(x)", "aten.isnan.default"))
    recorded = bl.record(entry, [case])
    small = bl.Entry(case_id, "recorded", outcome=Outcome.MISMATCH,
                     figures=type(recorded.figures)(figures[0], figures[1], 2 / 3))
    decision = gating.gate(RunResult(cases=[case]), bl.Baseline("known", (small,)))
    return decision.rulings[0].category


def test_figure_growth_counts_only_far_above_the_rounding_level() -> None:
    # a NaN-type failure whose finite part moved from 1.5e-14 to 1.1e-13: noise in float64
    assert _known((3e-14, 1.519e-14), (0, 1.103e-13), "float64") == "known"
    # the same growth in float64 far above rounding (1e-3 relative): a regression
    assert _known((2e-5, 1e-5), (0, 1e-3), "float64") == "regression"


def test_user_level_op_names() -> None:
    assert user_op("torch.isfinite(x)") == "torch.isfinite"
    assert user_op("F.cross_entropy(x, t)") == "torch.nn.functional.cross_entropy"
    assert user_op("x.masked_fill(m, 2.0)") == "Tensor.masked_fill"
    assert user_op("(x - y) ** 2") == "torch.pow"


def test_every_dtype_eager_accepts_is_planned_and_the_ranged_class_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed file is for the installed torch; its entries are what eager says."""
    data = json.loads(accepted.BUNDLED.read_text())
    assert data["torch"] == accepted.torch_version()
    found = accepted.accepted(CATALOGUE, ("parity_gate.ops.catalogue:VARIANTS",))
    assert set(found) == set(CATALOGUE)  # every signature current: nothing to probe
    for vid, dtype in (("special.erfcx" if "special.erfcx" in CATALOGUE else "erfcx", "int64"),
                       ("gelu", "float16")):
        x = torch.from_numpy(make_inputs(CATALOGUE[vid], dtype, "normal")["x"])
        compile_call(CATALOGUE[vid], 0)(x)  # eager accepts it ...
        assert dtype in found[vid]  # ... so it is planned
    with pytest.raises(RuntimeError):
        torch.nn.functional.gelu(torch.ones(2, dtype=torch.int64))
    assert "int64" not in found["gelu"]
    assert RANGE in CATALOGUE["erfcx"].classes_for("float32")
    values = make_inputs(CATALOGUE["erfcx"], "float64", RANGE)["x"]
    assert values.max() > 10 and 0 < np.abs(values).min() < 1e-3
    # another torch version: the cache lives under the user's cache dir, not the file
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert accepted.cache_path("9.9.9").is_relative_to(tmp_path)
    assert accepted._read(accepted.BUNDLED, "9.9.9") == ({}, False)


def test_every_planned_case_has_buildable_inputs() -> None:
    """What the worker and the repro scripts do first, for the whole catalogue: a domain
    outside a dtype's range (lgamma.large's 1e3..1e6 in int8) is clamped, not a crash."""
    from parity_gate.ops.planner import Selection, plan

    found = accepted.accepted(CATALOGUE, ("parity_gate.ops.catalogue:VARIANTS",))
    units = [u for j in plan(CATALOGUE, Selection(), accepted=found).jobs for u in j.units]
    assert len(units) > 9000
    for u in units:
        arrays = make_inputs(CATALOGUE[u.variant], u.dtype, u.input_class)
        assert set(arrays) == set(CATALOGUE[u.variant].arg_names)
