"""Eager references: the module's outputs on each fixture set and batch, computed in every
run (the model's code runs: whatever it reads shows here), and the float64 run a mismatch
is judged against."""

from __future__ import annotations

import copy
import time
import traceback
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.engine.binding import output_names
from parity_gate.engine.fixtures import Draw, FixtureError, generate
from parity_gate.engine.runtime import first_line, memory_failure
from parity_gate.engine.state import EagerRef, JobContext, TypedModule, output_spec, tolerance_for
from parity_gate.engine.tensors import leaves, to_numpy, to_torch
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.plan.cases import ModuleJob


def eager_reference(ctx: JobContext, torch: Any, mod: TypedModule, fixture_name: str,
               batch: int) -> EagerRef:
    job = ctx.job
    fixture = job.fixtures[fixture_name]
    ref = EagerRef()
    names = [i.name for i in job.module.inputs]
    t0 = time.perf_counter()
    samples: list[dict[str, np.ndarray]] = []
    try:
        samples = [generate(fixture_name, fixture, names, Draw(batch, mod.dtype, sample),
                            seed=job.seed, base_dir=job.base_dir)
                   for sample in range(fixture.samples)]
        for inputs in samples:
            with torch.inference_mode():
                out = mod.binding.call(mod.typed, {n: to_torch(inputs[n], mod.device)
                                                   for n in names})
            if not ref.names:
                ref.names, problems = output_names(out, job.module)
                if problems:  # `outputs[].name` entries the module does not return
                    for text in problems:
                        ctx.note("manifest", text, "error")
                    ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.EAGER_ERROR,
                                           problems[0], "\n".join(problems))
                    return ref
            ref.inputs.append(inputs)
            ref.outputs.append([to_numpy(t) for t in leaves(out)])
    except FixtureError as exc:
        ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.EAGER_ERROR,
                               f"fixture {fixture_name!r}: {exc}")
    except Exception as exc:
        tb = traceback.format_exc()[-4000:]
        oom = memory_failure(exc, sum(a.nbytes for sample in samples[:1]
                                      for a in sample.values()) or None)
        if oom is not None:  # over the worker's memory limit: this case, not the module
            ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.OUT_OF_MEMORY, oom, tb)
        elif batch == 0:
            ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.SKIPPED,
                                   f"eager rejects an empty batch: {first_line(repr(exc))}", tb)
        else:
            ref.error = CaseResult(CaseKey("", "", "", 0, ""), Outcome.EAGER_ERROR,
                                   f"eager forward failed: {first_line(repr(exc))}", tb)
    ref.eager_s = time.perf_counter() - t0
    return ref


def nothing_finite(ref: EagerRef) -> str:
    """The first floating output with values, none of them finite, in every sample ("" if
    none): NaN equals NaN, so such an output passes without any number compared."""
    for i, name in enumerate(ref.names):
        arrays = [outs[i] for outs in ref.outputs if i < len(outs)]
        floating = [a for a in arrays if a.dtype.kind == "f" and a.size]
        if floating and len(floating) == len(arrays) \
                and not any(np.isfinite(a.astype(np.float32)).any() for a in floating):
            return name
    return ""


def float64_run(ctx: JobContext, mod: TypedModule, ref: EagerRef) -> None:
    """The same weights and the very same (low-precision) inputs, computed in float64."""
    import torch

    try:
        unstable = nondeterministic(ctx.job, mod, ref)
        if unstable:  # a random op in forward: no second run, float64 or not, is the truth
            ref.truth_error = (f"eager is not deterministic: two runs on the same inputs "
                               f"differ in {unstable} (a random op in forward?)")
            return
        if mod.float64 is None:
            mod.float64 = copy.deepcopy(mod.source).to(torch.float64).to(mod.device)
        truth = []
        for inputs in ref.inputs:
            wide = {n: (a.astype(np.float64) if a.dtype.kind == "f"
                        or a.dtype.name == "bfloat16" else a) for n, a in inputs.items()}
            with torch.inference_mode():
                out = mod.binding.call(mod.float64, {n: to_torch(wide[n], mod.device)
                                                     for n in mod.binding.order})
            truth.append([to_numpy(t) for t in leaves(out)])
        ref.truth = truth
    except Exception as exc:  # e.g. an op with no float64 kernel: the case stays as it is
        ref.truth_error = f"float64 run failed: {first_line(repr(exc))}"


def nondeterministic(job: ModuleJob, mod: TypedModule, ref: EagerRef) -> str:
    """The first output a second eager run on the first sample's inputs puts out of the
    case's tolerance of the first run ("" when none): the float64 check measures both
    sides against one more run, which means nothing for a model that draws random numbers."""
    import torch

    inputs = ref.inputs[0]
    with torch.inference_mode():
        out = mod.binding.call(mod.typed, {n: to_torch(inputs[n], mod.device)
                                           for n in mod.binding.order})
    again = [to_numpy(t) for t in leaves(out)]
    for name, first, second in zip(ref.names, ref.outputs[0], again, strict=False):
        tol = tolerance_for(job, mod.dtype, output_spec(job, name))
        if first.shape != second.shape or not cmp.compare(first, second, tol).passed:
            return name
    return ""


def forward_calls(mod: TypedModule, ref: EagerRef, wide: bool) -> list[Any]:
    """One forward per sample: the case's module on its inputs, or the float64 copy on the
    same inputs widened to float64."""
    def call(module: Any, inputs: dict[str, np.ndarray]) -> Any:
        return lambda: mod.binding.call(module, {n: to_torch(inputs[n], mod.device)
                                                 for n in mod.binding.order})

    if not wide:
        return [call(mod.typed, inputs) for inputs in ref.inputs]
    return [call(mod.float64, {n: (a.astype(np.float64) if a.dtype.kind == "f"
                                   or a.dtype.name == "bfloat16" else a)
                               for n, a in inputs.items()}) for inputs in ref.inputs]
