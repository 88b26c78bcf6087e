"""One case on one ONNX Runtime session: every sample run, then each output compared over
all samples at once (detections as sets, a batch baked into the graph named as such)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.compare.detection import DETECTION_KEYS, Detections, compare_detections
from parity_gate.engine import stages
from parity_gate.engine.stages import StageFailure
from parity_gate.engine.state import EagerRef, stack, tolerance_for
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, Provenance
from parity_gate.plan.cases import ModuleJob


@dataclass(frozen=True)
class Session:
    """An ONNX Runtime session with what each of its runs needs: the graph's input names
    (feeds are filtered to them), the batch the model was exported at, the provenance every
    result carries."""

    session: Any
    feed_names: frozenset[str]
    export_batch: int
    provenance: Provenance

    @classmethod
    def of(cls, session: Any, export_batch: int, provenance: Provenance) -> Session:
        return cls(session, frozenset(i.name for i in session.get_inputs()), export_batch,
                   provenance)


def run_case(job: ModuleJob, run: Session, key: CaseKey, ref: EagerRef,
             timings: dict[str, float]) -> tuple[CaseResult, list[list[np.ndarray]]]:
    """Run every sample of one case, then compare each output over all samples at once;
    also returns the ONNX outputs (per sample) for follow-up checks."""
    common: dict[str, Any] = {"provenance": run.provenance, "samples": len(ref.inputs)}
    got_all: list[list[np.ndarray]] = []
    t0 = time.perf_counter()
    for inputs in ref.inputs:
        feeds = {k: v for k, v in inputs.items() if k in run.feed_names}
        try:
            got_all.append(stages.run(run.session, feeds, batch_size=key.batch_size,
                                      export_batch=run.export_batch, label=""))
        except StageFailure as failure:
            timings["run_s"] = time.perf_counter() - t0
            return CaseResult(key, failure.outcome, failure.reason, failure.detail,
                              timings=timings, **common), got_all
    timings["run_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = judge_case(job, key, ref, got_all, common, run.export_batch)
    timings["compare_s"] = time.perf_counter() - t0
    timings["eager_s"] = ref.eager_s
    result.timings = timings
    return result, got_all


def judge_case(job: ModuleJob, key: CaseKey, ref: EagerRef, got_all: list[list[np.ndarray]],
               common: dict[str, Any], export_batch: int) -> CaseResult:
    n_ref, n_got = len(ref.outputs[0]), len(got_all[0])
    if n_ref != n_got:
        return CaseResult(key, Outcome.SHAPE_MISMATCH,
                          f"exported model returns {n_got} output(s), eager returns {n_ref}",
                          **common)
    names = ref.names
    specs = {o.name: o for o in job.module.outputs or []}
    groups = detection_groups(names) if job.module.detections else {}
    grouped = {i for members in groups.values() for i in members}
    comparisons = [compare_detections_of(job, key, prefix, members, ref, got_all)
                   for prefix, members in groups.items()]
    for i, name in enumerate(names):
        if i in grouped:
            continue
        spec = specs.get(name)
        tol = tolerance_for(job, key.dtype, spec)
        reference = stack([outs[i] for outs in ref.outputs])
        actual = stack([outs[i] for outs in got_all])
        if reference is None or actual is None:
            per = [cmp.compare(r[i], g[i], tol, name=name)
                   for r, g in zip(ref.outputs, got_all, strict=True)]
            comparisons.append(next((c for c in per if not c.passed), per[0]))
            continue
        comparisons.append(cmp.compare(
            reference, actual, tol, name=name,
            task=spec.task if spec else None,
            min_top1_agreement=spec.min_top1_agreement if spec else 1.0,
        ))
    outcome = stages.classify(comparisons)
    reason = stages.failure_reason(comparisons)
    baked = (baked_output(key.batch_size, export_batch, ref.outputs[0], got_all[0])
             if outcome is Outcome.SHAPE_MISMATCH else "")
    if baked:
        outcome = Outcome.BAKED_SHAPE
        reason = (f"batch {key.batch_size}: {baked} — the exported model (exported at batch "
                  f"{export_batch}) silently reshapes to the export batch size")
    return CaseResult(key, outcome, reason, comparisons=comparisons, **common)


def detection_groups(names: list[str]) -> dict[str, tuple[int, int, int]]:
    """`prefix` → the indices of its `prefix.boxes`, `.scores`, `.labels` outputs (one
    image's detections), for every prefix that has all three."""
    found: dict[str, dict[str, int]] = {}
    for i, name in enumerate(names):
        prefix, _, leaf = name.rpartition(".")
        if leaf in DETECTION_KEYS:
            found.setdefault(prefix, {})[leaf] = i
    return {prefix or "detections": (k["boxes"], k["scores"], k["labels"])
            for prefix, k in found.items() if len(k) == len(DETECTION_KEYS)}


def compare_detections_of(job: ModuleJob, key: CaseKey, prefix: str,
                        members: tuple[int, int, int], ref: EagerRef,
                        got_all: list[list[np.ndarray]]) -> cmp.Comparison:
    """One image's detections over every sample: the first sample that fails decides."""
    iou = job.module.detections.iou if job.module.detections else 0.5
    tol = tolerance_for(job, key.dtype, None)
    per = [compare_detections(prefix, Detections(*(r[i] for i in members)),
                              Detections(*(g[i] for i in members)), tol, iou)
           for r, g in zip(ref.outputs, got_all, strict=True)]
    return next((c for c in per if not c.passed), per[0])


def baked_output(batch: int | None, export_batch: int, refs: list[np.ndarray],
                  gots: list[np.ndarray]) -> str:
    """An output whose eager dim is the batch size but whose ONNX dim is the export batch."""
    if batch is None or batch == export_batch:
        return ""
    for i, (r, g) in enumerate(zip(refs, gots, strict=False)):
        if r.shape != g.shape and len(r.shape) == len(g.shape):
            for axis, (rd, gd) in enumerate(zip(r.shape, g.shape, strict=True)):
                if rd == batch and gd == export_batch:
                    return (f"output {i} has shape {tuple(g.shape)} where eager gives "
                            f"{tuple(r.shape)} (axis {axis})")
    return ""
