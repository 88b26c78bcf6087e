"""When a float64 run may referee a low-precision mismatch, and what it says about ties.

The float64 referee (compare.reference) measures eager and ONNX against the same
model computed in float64, assuming that run computes the same function with
less rounding. Two cases break that assumption, and each is checked here on the
real module, only for mismatches the referee would otherwise excuse:

* Range. Where the low-precision run reaches its dtype's range limit (an
  overflow to inf, a value at the dtype's largest finite magnitude) or NaN at an
  intermediate op and the float64 run does not (or the reverse), the two runs
  compute different functions from there on: a float32 `(h * 1e38) * 10` is inf,
  in float64 it is 1e39. `range_disagreement` runs both under a dispatch mode that
  records, per ATen op call, which output elements are NaN or at/over the range
  limit of their own dtype, and names the first op (with the model's source line)
  where the two runs disagree. A flush to zero that matters shows up there too,
  at the op where it becomes a non-finite value (log(0), x/0). Both runs being at
  their own dtype's limit (a mask of `finfo(dtype).min`, -inf + -65504) agree.

* Ties. A discrete output (rounded, compared, an index) that differs by a whole
  unit is not rounding noise, however close ONNX is to float64. It may still be a
  tie: the exact value sits within one rounding of a boundary, so either side is
  a correct rounding. `tie_elements` shows it by witness: the float64 run, each
  op's output rounded to the case's dtype one way or the other (as is, to
  nearest, all up, all down, up or down at random per element; a fused
  divide-and-round split into its steps), must itself land on both eager's and
  ONNX's value at every differing element.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity_gate.engine.exporting import _model_file
from parity_gate.engine.tensors import leaves, to_numpy
from parity_gate.model.precision import ROUNDOFF

__all__ = ["range_disagreement", "tie_elements"]

_NAN, _LIMIT = "nan", "limit"
# Float64 runs per tie check: as is, rounded to nearest, all up, all down, then up or
# down at random per element.
TIE_TRIALS = 10


@dataclass
class _Trace:
    """One forward: every ATen op's name in call order, and for the calls whose floating
    outputs hold NaN or range-limit values, those elements (packed masks) and the site."""

    names: list[str] = field(default_factory=list)
    events: dict[int, dict[tuple[int, str], tuple[tuple[int, ...], bytes, bool]]] = \
        field(default_factory=dict)
    sites: dict[int, str] = field(default_factory=dict)


def _site() -> str:
    """`file:line` of the innermost frame of the model's own code on the call stack."""
    frame = sys._getframe(2)
    while frame is not None and not _model_file(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return ""
    return f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"


def _events(t: Any) -> dict[tuple[int, str], tuple[tuple[int, ...], bytes, bool]]:
    """NaN and range-limit elements of one floating tensor, against its own dtype."""
    import torch

    if not t.is_floating_point() or t.numel() == 0 or t.is_complex():
        return {}
    top = torch.finfo(t.dtype).max
    if bool(t.abs().amax() < top):  # one pass; NaN fails the test and is looked at below
        return {}
    a = t.detach().cpu()
    found = {}
    for cat, mask in ((_NAN, a.isnan()), (_LIMIT, a.abs() >= top)):
        if bool(mask.any()):
            inf = bool(a[mask].isinf().any()) if cat == _LIMIT else False
            found[(0, cat)] = (tuple(a.shape), np.packbits(mask.numpy()).tobytes(), inf)
    return found


def _record(call: Callable[[], Any]) -> _Trace:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    trace = _Trace()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            k = len(trace.names)
            trace.names.append(str(func.overloadpacket))
            found = {}
            for i, t in enumerate(leaves(out)):
                found.update({(i, cat): v for (_, cat), v in _events(t).items()})
            if found:
                trace.events[k] = found
                trace.sites[k] = _site()
            return out

    with torch.inference_mode(), Record():
        call()
    return trace


def _pairs(low: list[str], wide: list[str]) -> list[tuple[int, int]]:
    """Call indices of the same op in both runs (they differ only where the model
    branches on its dtype)."""
    if low == wide:
        return [(i, i) for i in range(len(low))]
    sm = difflib.SequenceMatcher(None, low, wide, autojunk=False)
    return [(a + k, b + k) for a, b, size in sm.get_matching_blocks() for k in range(size)]


def _first_difference(low: _Trace, wide: _Trace, dtype: str) -> str:
    for i, j in _pairs(low.names, wide.names):
        el, ew = low.events.get(i, {}), wide.events.get(j, {})
        if not el and not ew:
            continue
        for key in sorted(set(el) | set(ew)):
            a, b = el.get(key), ew.get(key)
            if a is not None and b is not None and (a[0] != b[0] or a[1] == b[1]):
                continue  # same elements (or an op whose shape differs: not comparable)
            side, other, ev, site = ((dtype, "float64", a, low.sites.get(i)) if a is not None
                                     and (b is None or _count(a) >= _count(b))
                                     else ("float64", dtype, b, wide.sites.get(j)))
            assert ev is not None
            what = ("gives NaN" if key[1] == _NAN else "overflows to inf" if ev[2]
                    else "saturates at its largest finite value")
            at = f"{site} ({low.names[i]})" if site else low.names[i]
            return (f"{side} {what} at {at} where {other} does not: the float64 check "
                    "cannot referee this case")
    return ""


def _count(ev: tuple[tuple[int, ...], bytes, bool]) -> int:
    return int(np.unpackbits(np.frombuffer(ev[1], np.uint8)).sum())


def range_disagreement(low: Sequence[Callable[[], Any]], wide: Sequence[Callable[[], Any]],
                       dtype: str) -> str:
    """"" when, on every sample, the `dtype` run and the float64 run (each a forward call)
    agree on which intermediate values are NaN or at their dtype's range limit; else the
    first op where they do not, as a sentence."""
    for run_low, run_wide in zip(low, wide, strict=True):
        why = _first_difference(_record(run_low), _record(run_wide), dtype)
        if why:
            return why
    return ""


def _perturbed(call: Callable[[], Any], dtype: str, trial: int) -> list[np.ndarray]:
    """The float64 forward with every op output rounded to `dtype` as one of its possible
    roundings: none (trial 0), to nearest (1), up (2), down (3), up or down per element
    at random (4..). A value `dtype` holds exactly stays as it is."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    gen = torch.Generator().manual_seed(trial)
    narrow = getattr(torch, dtype)

    def nudge(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float64 or t.numel() == 0 \
                or trial == 0:
            return t
        near = t.to(narrow)
        if trial == 1:
            return near.to(torch.float64)
        inf = torch.full_like(near, float("inf"))
        up = torch.where(near.to(torch.float64) >= t, near, torch.nextafter(near, inf))
        down = torch.where(near.to(torch.float64) <= t, near, torch.nextafter(near, -inf))
        pick = (torch.full(t.shape, trial == 2) if trial < 4
                else torch.randint(0, 2, t.shape, generator=gen).bool()).to(t.device)
        return torch.where(pick, up, down).to(torch.float64)

    from torch._decomp import decomposition_table

    aten = torch.ops.aten
    # Ops that compute a value and round it to a whole number inside one kernel: split
    # into their steps (a division, then a trunc), so the division is what gets rounded.
    fused = {aten.div.Tensor_mode, aten.div.Scalar_mode, aten.floor_divide.default,
             aten.round.decimals}

    class Perturb(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if func in fused and func in decomposition_table:
                with self:
                    return decomposition_table[func](*args, **(kwargs or {}))
            out = func(*args, **(kwargs or {}))
            schema = func._schema
            if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
                return out  # views and in-place writes keep their aliasing
            if isinstance(out, torch.Tensor):
                return nudge(out)
            if isinstance(out, tuple):
                return tuple(nudge(t) for t in out)
            return out

    with torch.inference_mode(), Perturb():
        return [to_numpy(t) for t in leaves(call())]


def tie_elements(wide: Sequence[Callable[[], Any]], dtype: str, output: int,
                 eager: Sequence[np.ndarray], onnx: Sequence[np.ndarray],
                 differ: Sequence[np.ndarray]) -> bool:
    """True when at every element in `differ` (per sample, boolean masks of output
    `output`) some float64 run rounded like `dtype` at each op lands on eager's
    value and some on ONNX's: the exact value is within one rounding of a boundary."""
    if dtype not in ROUNDOFF:
        return False
    for call, e, o, mask in zip(wide, eager, onnx, differ, strict=True):
        if not mask.any():
            continue
        e_need, o_need = e[mask].astype(np.float64), o[mask].astype(np.float64)
        seen_e = np.zeros(e_need.shape, bool)
        seen_o = np.zeros(o_need.shape, bool)
        for trial in range(TIE_TRIALS):
            outs = _perturbed(call, dtype, trial)
            if output >= len(outs) or outs[output].shape != mask.shape:
                return False
            with np.errstate(all="ignore"):
                got = outs[output].astype(e.dtype).astype(np.float64)[mask]
            seen_e |= got == e_need
            seen_o |= got == o_need
            if seen_e.all() and seen_o.all():
                break
        if not (seen_e.all() and seen_o.all()):
            return False
    return True
