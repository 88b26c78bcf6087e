"""Quantized cases, worker side (a module's `quantize:`): quantize, export or quantize the
export, run in ONNX Runtime, and judge (compare.steps).

- pt2e: the converted model in eager is the reference. Each output is compared in steps
  of its own scale; each quantize node's integer values are compared with ONNX Runtime's
  at the same value (the exporter keeps the FX node's name), with optimizations on (the
  fused QLinear kernels a deployment runs) and off (the graph's Q/DQ run literally), so
  the first node beyond one step is named with its owner (compare.steps.blame).
- runtime: the float model in eager is the reference and the difference is quantization
  error by design: SQNR per output against `min_sqnr_db`, and a per-node SQNR table of the
  float ONNX graph against the QDQ graph at every value ONNX Runtime's quantizer
  quantized, worst first in the report.

The case's inputs are the fixture set's first sample at the spec's batch size; the
calibration set's batches are drawn as the fixtures draw any sample.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate.compare import steps as stepping
from parity_gate.engine import qdq
from parity_gate.model.findings import Stage
from parity_gate.model.outcomes import Outcome
from parity_gate.model.quantized import QuantizedResult, QuantNode, QuantOutput
from parity_gate.model.results import CaseResult
from parity_gate.plan.cases import QUANT, TASK

SATURATION_HAZARD = 0.01  # a node whose values clamp more often: calibration misses them


# --------------------------------------------------------------------------- judging


def judge_pt2e(model: Any, eager_out: Sequence[np.ndarray], out_names: Sequence[str],
               eager: dict[str, tuple[np.ndarray, np.ndarray, qdq.QParams]],
               fused: dict[str, np.ndarray], literal: dict[str, np.ndarray] | None,
               onnx_out: Sequence[np.ndarray], max_steps: dict[str, float] | None = None
               ) -> QuantizedResult:
    """Outputs in steps, nodes in steps (fused and literal runs) and the blame, from the
    values both sides computed on the same inputs; `max_steps`: steps tolerated per grid
    dtype (int8, uint8; default one)."""
    limits = max_steps or {}
    grids = qdq.q_params(model)
    made = qdq.producers(model)
    graph_outputs = [o.name for o in model.graph.output][:len(eager_out)]
    dq_of = qdq.dequant_outputs(model)
    nodes: list[stepping.NodeSteps] = []
    records: list[QuantNode] = []
    hazards: list[str] = []
    for name, (node, grid) in grids.items():
        if name not in eager:
            continue
        q, pre, eg = eager[name]
        if name not in fused:
            continue
        fused_steps = stepping.int_steps(q, fused[name], pre, eg.broadcast(q.ndim)[1])
        lit = stepping.int_steps(q, literal[name], pre, eg.broadcast(q.ndim)[1]) \
            if literal is not None and name in literal else None
        match, note = _same_grid(eg, grid)
        bad = eg.representable() or grid.representable()
        zero = eg.broadcast(q.ndim)[1]  # a ReLU's zeros sit at qmin on purpose
        saturated = float(np.mean(((q == eg.qmin) & (zero != eg.qmin)) | (q == eg.qmax))) \
            if q.size else 0.0
        nodes.append(stepping.NodeSteps(name, fused_steps, lit, match, note or bad, not bad,
                                        saturated))
        source = made.get(node.input[0])
        records.append(QuantNode(name, source.op_type if source is not None else "input",
                                 fused_steps.verdict, fused_steps.max_steps,
                                 lit.max_steps if lit is not None else None, None,
                                 saturated, fused_steps.histogram))
        if saturated > SATURATION_HAZARD:
            hazards.append(f"{name}: {saturated:.1%} of eager's values clamp at the grid's "
                           "ends: the calibration set does not cover the inputs tested")
        if bad:
            hazards.append(f"{name}: {bad}")
    outputs = []
    for i, (ref, got) in enumerate(zip(eager_out, onnx_out, strict=False)):
        label = out_names[i] if i < len(out_names) else f"output{i}"
        qname = dq_of.get(graph_outputs[i]) if i < len(graph_outputs) else None
        sqnr = stepping.sqnr_db(ref, got)
        if qname is None or qname not in grids:
            outputs.append(QuantOutput(label, "float", sqnr, summary="not on a quantization "
                                       "grid: compared by SQNR only"))
            continue
        grid = grids[qname][1]
        s_, z = grid.broadcast(np.ndim(ref))
        pre_out = eager[qname][1] if qname in eager else None
        st = stepping.in_steps(ref, got, s_, pre_out, z, limits.get(grid.dtype, 1.0))
        outputs.append(QuantOutput(label, st.verdict, sqnr, float(np.max(s_)), st.max_steps,
                                   st.histogram, st.describe()))
    found = stepping.blame(nodes)
    first, owner, why = ("", "", "") if found is None else (found[0].name, found[1], found[2])
    failed = [o for o in outputs if o.verdict in ("defect", "rounding_mode")]
    if failed:
        o = failed[0]
        summary = (f"{o.name}: {o.max_steps or 0:.3g} step(s) at most "
                   f"({o.verdict.replace('_', ' ')})")
    elif found is not None:
        summary = "every output within one step, but not every node inside the graph"
    else:
        summary = "every output within one step of the quantized eager model"
    if found is not None:
        summary += f"; first node beyond one step: {first}, owner {owner} ({why})"
    return QuantizedResult("pt2e", outputs, records, first, owner, why, hazards,
                           summary=summary)


def _same_grid(eager: qdq.QParams, onnx: qdq.QParams) -> tuple[bool, str]:
    """Whether the exported Q node quantizes on eager's grid (scale, zero point, axis)."""
    es, os_ = np.asarray(eager.scale, np.float64), np.asarray(onnx.scale, np.float64)
    if es.size != os_.size or not np.allclose(es.ravel(), os_.ravel(), rtol=1e-6, atol=0):
        return False, (f"scale {float(os_.ravel()[0]):.6g} in ONNX, {float(es.ravel()[0]):.6g} "
                       "in eager")
    ez, oz = np.asarray(eager.zero_point).ravel(), np.asarray(onnx.zero_point).ravel()
    if ez.size != oz.size or np.any(ez.astype(np.int64) != oz.astype(np.int64)):
        return False, f"zero point {oz[:4].tolist()} in ONNX, {ez[:4].tolist()} in eager"
    if (eager.axis is None) != (onnx.axis is None) or (
            eager.axis is not None and onnx.axis is not None and eager.axis != onnx.axis):
        return False, f"axis {onnx.axis} in ONNX, {eager.axis} in eager (per-channel axis moved)"
    return True, ""


def judge_runtime(float_model: Any, qdq_model: Any, eager_out: Sequence[np.ndarray],
                  out_names: Sequence[str], onnx_out: Sequence[np.ndarray],
                  float_values: dict[str, np.ndarray], qdq_values: dict[str, np.ndarray],
                  min_sqnr_db: float) -> QuantizedResult:
    """SQNR per output against the float model, and per quantized value of the graph
    (float ONNX against the QDQ graph's dequantized values)."""
    outputs = []
    for i, (ref, got) in enumerate(zip(eager_out, onnx_out, strict=False)):
        label = out_names[i] if i < len(out_names) else f"output{i}"
        db = stepping.sqnr_db(ref, got)
        ok = db >= min_sqnr_db
        outputs.append(QuantOutput(label, "sqnr_ok" if ok else "sqnr_low", db, summary=(
            f"SQNR {db:.1f} dB against the float model ({'at least' if ok else 'below'} "
            f"{min_sqnr_db:g} dB)")))
    made = qdq.producers(float_model)
    nodes: list[QuantNode] = []
    hazards: list[str] = []
    for name, (node, grid) in qdq.q_params(qdq_model).items():
        x = node.input[0]
        if x not in float_values or name not in qdq_values:
            continue
        ref = float_values[x]
        s, z = grid.broadcast(np.ndim(ref))
        deq = (np.asarray(qdq_values[name], np.float64) - z) * s
        lo, hi = (grid.qmin - z) * s, (grid.qmax - z) * s
        out_of_range = float(np.mean((ref < lo - s / 2) | (ref > hi + s / 2))) if ref.size \
            else 0.0
        src = made.get(x)
        nodes.append(QuantNode(x, src.op_type if src is not None else "input",
                               sqnr_db=stepping.sqnr_db(ref, deq), saturated=out_of_range))
        if out_of_range > SATURATION_HAZARD:
            hazards.append(f"{x}: {out_of_range:.1%} of the float values lie outside the "
                           "calibrated range: the calibration set does not cover the inputs "
                           "tested")
        if grid.representable():
            hazards.append(f"{x}: {grid.representable()}")
    low = [o for o in outputs if o.verdict == "sqnr_low"]
    worst = sorted((n for n in nodes if n.sqnr_db is not None), key=lambda n: n.sqnr_db or 0)
    summary = (f"{low[0].name}: {low[0].summary}" if low else
               "every output within the SQNR budget of the float model")
    if worst:
        summary += f"; worst layer: {worst[0].name} ({worst[0].op}, {worst[0].sqnr_db:.1f} dB)"
    return QuantizedResult("runtime", outputs, nodes, hazards=hazards,
                           min_sqnr_db=min_sqnr_db, summary=summary)


# --------------------------------------------------------------------------- running


def run_values(data: bytes, provider: str, options: dict[str, Any], feeds: dict[str, Any],
               optimization: str = "all") -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """(the graph's outputs, every value by name) of one run of a model whose extra
    outputs were added by `qdq.with_outputs`."""
    from parity_gate.engine import stages

    session = stages.open_session(data, provider, options, optimization)
    names = [o.name for o in session.get_outputs()]
    feed = {i.name: feeds[i.name] for i in session.get_inputs()}
    values = stages.run(session, feed)
    return values, dict(zip(names, values, strict=True))


def _dynamic(torch: Any, inputs: Sequence[Any]) -> dict[str, Any]:
    symbols: dict[str, Any] = {}
    return {spec.name: {dim: symbols.setdefault(sym, torch.export.Dim(sym))
                        for dim, sym in spec.dynamic.items()} or None for spec in inputs}


def run_cases(ctx: Any, mod: Any, exported: Any, cached: bool, keys: list[Any],
              open_session: Callable[..., Any]) -> None:
    """Every quantized case of the module (float32 only), flow by the manifest; the
    runtime flow's task cases run on the QDQ graph through `taskrun` (`open_session`: the
    worker's; the other cases open sessions on graphs with extra outputs themselves)."""
    spec = ctx.job.module.quantize
    provenance = ctx.provenance(mod.device, exported, cached)
    tasks = [k for k in keys if TASK + QUANT in k.inputs]
    keys = [k for k in keys if k not in tasks]
    try:
        made = _prepare(ctx, mod, exported, spec)
    except Exception as exc:
        ctx.fail_all(keys + tasks, Outcome.EXPORT_ERROR, f"quantize ({spec.flow}): "
                     f"{type(exc).__name__}: {str(exc)[:300]}", traceback.format_exc()[-4000:],
                     provenance=provenance)
        return
    if tasks:  # the task metric, float eager against the QDQ graph (runtime flow)
        from parity_gate.engine import taskrun
        from parity_gate.engine.exporting import ExportedModel

        qdq_model = getattr(made, "qdq_model", None)
        if qdq_model is None:
            ctx.fail_all(tasks, Outcome.SKIPPED, "the task metric of a quantized model runs "
                         "in the runtime flow only")
        else:
            taskrun.run_cases(ctx, mod, ExportedModel(qdq_model), False, tasks, open_session)
    for key in keys:
        ctx.step(Stage.RUNNING, key.id, f"quantized ({spec.flow})")
        t0 = time.perf_counter()
        try:
            record = made(key)
        except Exception as exc:
            from parity_gate.engine.stages import StageFailure

            if isinstance(exc, StageFailure):
                ctx.result(CaseResult(key, exc.outcome, exc.reason, exc.detail,
                                      provenance=provenance))
            else:
                ctx.result(CaseResult(key, Outcome.RUNTIME_ERROR,
                                      f"quantized ({spec.flow}): {type(exc).__name__}: "
                                      f"{str(exc)[:300]}", traceback.format_exc()[-4000:],
                                      provenance=provenance))
            continue
        failed = bool(record.first_bad) or any(
            o.verdict in ("defect", "rounding_mode", "sqnr_low") for o in record.outputs)
        ctx.result(CaseResult(key, Outcome.MISMATCH if failed else Outcome.PASS,
                              record.summary[:500], provenance=provenance, quantized=record,
                              samples=1, timings={"run_s": round(time.perf_counter() - t0, 4),
                                                  "quantize_s": record.quantize_s}))


def _prepare(ctx: Any, mod: Any, exported: Any, spec: Any) -> Callable[[Any], QuantizedResult]:
    """Quantize once per module (calibration included); returns the per-case check."""
    import dataclasses

    import onnx
    import torch

    from parity_gate.engine.exporting import export_module
    from parity_gate.engine.fixtures import Draw, generate
    from parity_gate.engine.tensors import leaves, to_numpy, to_torch
    from parity_gate.plan.cases import QUANT, calibration_id

    job = ctx.job
    names = list(mod.binding.order)
    cid = calibration_id(job.module)
    calibration = [generate(cid, job.fixtures[cid], names, Draw(spec.batch_size, "float32", i),
                            seed=job.seed, base_dir=job.base_dir)
                   for i in range(spec.calibration_batches)]
    float_s = float(exported.timings.get("capture_s", 0.0) + exported.timings.get(
        "translate_s", 0.0))

    def inputs_of(key: Any) -> dict[str, np.ndarray]:
        fixture_name = key.inputs.split(QUANT)[0]
        return generate(fixture_name, job.fixtures[fixture_name], names,
                        Draw(key.batch_size, "float32", 0), seed=job.seed, base_dir=job.base_dir)

    def torch_in(feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        return {n: to_torch(feeds[n], "cpu") for n in names}

    t0 = time.perf_counter()
    options = {p: job.providers[p].options for p in job.providers}
    if spec.flow == "pt2e" and any("." in n for n in names):
        raise ValueError("the pt2e flow takes plain tensor inputs only, not the parts of a "
                         "structured argument (" + ", ".join(n for n in names if "." in n) + ")")
    if spec.flow == "pt2e":
        converted = qdq.pt2e_convert(torch, mod.typed, torch_in(calibration[0]),
                                     [torch_in(c) for c in calibration],
                                     _dynamic(torch, job.module.inputs), spec.reduce_range)
        bad = qdq.unrepresentable(torch, converted)
        if bad:
            raise ValueError(f"the quantizer's grid cannot be exported (owner: quantizer): "
                             f"{'; '.join(bad[:3])}")
        with torch.no_grad():
            first = converted(**torch_in(calibration[0]))
        from parity_gate.engine.binding import output_names

        out_names, _ = output_names(first, job.module)
        twin = export_module(converted, torch_in(calibration[0]), job.module.inputs,
                             out_names, job.export)
        model = onnx.load_from_string(twin.model)
        data = qdq.with_outputs(model, list(qdq.q_params(model)))
        quantize_s = time.perf_counter() - t0
        hazards = [f"{op} {name}: ONNX Runtime runs it in float between Q/DQ pairs"
                   for op, name in qdq.float_ops(data, ["CPUExecutionProvider"])]
        hazards += qdq.weight_axes(twin.program, model)

        def check(key: Any) -> QuantizedResult:
            feeds = inputs_of(key)
            with torch.no_grad():
                out = [to_numpy(t) for t in leaves(converted(**torch_in(feeds)))]
                eager = qdq.eager_nodes(torch, twin.program,
                                        [torch_in(feeds)[n] for n in names])
            opts = options.get(key.provider, {})
            fused_out, fused = run_values(data, key.provider, opts, feeds)
            _, literal = run_values(data, key.provider, opts, feeds, "disabled")
            got = judge_pt2e(model, out, out_names, eager, fused, literal,
                             fused_out[:len(out)], dict(spec.max_steps))
            repro = ""
            if got.first_bad and job.artifacts is not None:
                try:
                    repro = write_repro(Path(job.artifacts) / key.id.replace("/", "__"),
                                        data, feeds, eager, got.first_bad)
                except Exception as exc:  # advisory: the case keeps its verdict
                    hazards.append(f"repro folder not written: {exc}")
            return dataclasses.replace(got, hazards=[*got.hazards, *hazards], repro=repro,
                                       quantize_s=round(quantize_s, 3), float_s=round(float_s, 3))
        return check

    float_model = onnx.load(exported.path) if exported.path else \
        onnx.load_from_string(exported.model)
    qdq_bytes = qdq.ort_quantize(exported.source, calibration, spec.per_channel)
    qdq_model = onnx.load_from_string(qdq_bytes)
    grids = qdq.q_params(qdq_model)
    data_q = qdq.with_outputs(qdq_model, list(grids))
    known = {v for n in float_model.graph.node for v in n.output} | {
        i.name for i in float_model.graph.input}
    data_f = qdq.with_outputs(float_model, [n.input[0] for n, _ in grids.values()
                                            if n.input[0] in known])
    quantize_s = time.perf_counter() - t0
    float_names = [o.name for o in float_model.graph.output]

    def check_runtime(key: Any) -> QuantizedResult:
        feeds = inputs_of(key)
        with torch.no_grad():
            out = [to_numpy(t) for t in leaves(mod.binding.call(mod.typed, torch_in(feeds)))]
        opts = options.get(key.provider, {})
        q_out, q_values = run_values(data_q, key.provider, opts, feeds)
        _, f_values = run_values(data_f, key.provider, opts, feeds)
        got = judge_runtime(float_model, qdq_model, out, float_names, q_out[:len(out)],
                            f_values, q_values, spec.min_sqnr_db)
        return dataclasses.replace(got, quantize_s=round(quantize_s, 3),
                                   float_s=round(float_s, 3))
    check_runtime.qdq_model = qdq_bytes  # type: ignore[attr-defined]  # for the task cases
    return check_runtime


REPRO_SCRIPT = '''"""Repro: the quantize node {node} of a QDQ graph against its
quantized eager twin, in steps. Needs numpy and onnxruntime only: python repro.py"""
import numpy as np
import onnxruntime as ort

feeds = dict(np.load("inputs.npz"))
eager = np.load("eager.npz")
for level in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    session = ort.InferenceSession("model.onnx", so, providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    steps = np.abs(got["{node}"].astype(np.int64) - eager["{node}"].astype(np.int64))
    print(f"{{level}}: {node} max {{int(steps.max())}} step(s), "
          f"{{int((steps > 1).sum())}} of {{steps.size}} beyond one")
'''


def write_repro(folder: Path, model: bytes, feeds: dict[str, np.ndarray],
                eager: dict[str, tuple[np.ndarray, np.ndarray, qdq.QParams]], node: str) -> str:
    """A folder that replays the first bad node alone: the QDQ graph (its quantize nodes as
    outputs), the inputs, eager's integer values at every quantize node, and repro.py.
    Returns the folder's path."""
    import io

    from parity_gate.model.files import atomic_write, make_folder

    make_folder(folder.parent, folder)

    def npz(arrays: dict[str, np.ndarray]) -> bytes:
        buffer = io.BytesIO()
        savez: Any = np.savez
        savez(buffer, **arrays)
        return buffer.getvalue()

    atomic_write(folder / "model.onnx", model, binary=True)
    atomic_write(folder / "inputs.npz", npz(feeds), binary=True)
    atomic_write(folder / "eager.npz", npz({k: v[0] for k, v in eager.items()}), binary=True)
    atomic_write(folder / "repro.py", REPRO_SCRIPT.format(node=node))
    return str(folder)
