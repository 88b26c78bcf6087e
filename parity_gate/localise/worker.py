"""Inside a worker: the follow-up checks for the failing cases of one (module, dtype).

The module is rebuilt and exported exactly as the gate did; then, per failing
case, cheapest check first: the ORT optimization level the mismatch appears
at, the CPU provider, the torch.export capture, a float64 run of the same
weights, and for the first few cases the first divergent layer, the op to
blame and a repro folder. Every check is timed, bounded and caught on its own:
one that breaks is recorded as failed and the rest still run.
"""

from __future__ import annotations

import copy
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.compare.reference import judge_against_float64
from parity_gate.engine import stages
from parity_gate.engine.binding import Binding, bind, output_names
from parity_gate.engine.exporting import export_module
from parity_gate.engine.fixtures import generate
from parity_gate.engine.module_worker import build_module, export_batch_size, tolerance_for
from parity_gate.engine.protocol import CaseStream, Emit
from parity_gate.engine.runtime import first_line
from parity_gate.engine.tensors import leaves, to_numpy, to_torch
from parity_gate.localise import known as known_ops
from parity_gate.localise import layers, repro
from parity_gate.localise.jobs import LocaliseJob
from parity_gate.manifest.models import EdgeFixture
from parity_gate.model.findings import Stage
from parity_gate.model.keys import CaseKey
from parity_gate.model.localisation import EXPENSIVE, Check, Localisation, Status, StepRun
from parity_gate.model.precision import Ruling
from parity_gate.model.results import CaseResult

LEVELS = ("disabled", "basic", "extended", "all")


@dataclass
class _Prepared:
    """The module as the gate ran it: typed copy, its ONNX model and the names around it."""

    module: Any
    binding: Binding
    model: bytes | str  # a path when the weights are external data (past 2 GiB)
    input_names: list[str]
    output_names: list[str]
    known: list[known_ops.Known]

    def call(self, module: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """`module` on numpy inputs, bound to forward() as the gate binds them."""
        import torch

        with torch.inference_mode():
            out = self.binding.call(module, {n: to_torch(inputs[n]) for n in self.binding.order})
        return [to_numpy(t) for t in leaves(out)]

    def arguments(self, inputs: dict[str, np.ndarray]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """(args, kwargs) for torch.export and the exported program."""
        bound = self.binding.arguments({n: to_torch(inputs[n]) for n in self.binding.order})
        return ((), bound) if isinstance(bound, dict) else (tuple(bound), {})


@dataclass
class _Sample:
    """The failing sample of one case: inputs, eager and ONNX outputs."""

    inputs: dict[str, np.ndarray]
    eager: list[np.ndarray]
    onnx: list[np.ndarray]
    program: Any = None  # the optimizer-off dynamo export of these inputs, once made


def run(job: LocaliseJob, emit: Emit) -> None:
    """Emit every failing case again, with its `localisation` record (never raises)."""
    stream = CaseStream(job, emit)
    stream.step(Stage.BUILDING, job.module.name, "for localisation")
    try:
        prepared = _prepare(job)
    except Exception as exc:
        note = f"could not rebuild and export the module: {first_line(repr(exc))}"
        for result in job.failing:
            stream.result(replace(result, localisation=Localisation(
                steps=[StepRun(c, Status.FAILED, note=note) for c in Check])))
        return
    for result in job.failing:
        stream.step(Stage.RECHECKING, result.id, "localising")
        try:
            loc = _localise(job, prepared, result)
        except Exception:
            loc = Localisation(steps=[StepRun(Check.OPTIMIZER, Status.FAILED,
                                              note=traceback.format_exc()[-600:])])
        stream.result(replace(result, localisation=loc))


def _prepare(job: LocaliseJob) -> _Prepared:
    import torch

    mj = job.module
    module = build_module(mj)
    module.eval()
    binding, problems = bind(module, mj.module)
    if problems:
        raise ValueError(problems[0])
    typed = copy.deepcopy(module).to(getattr(torch, job.dtype))
    names = [i.name for i in mj.module.inputs]
    batch = export_batch_size(mj)
    plain = sorted(mj.fixtures, key=lambda n: isinstance(mj.fixtures[n], EdgeFixture))
    example = generate(plain[0], mj.fixtures[plain[0]], names, batch, job.dtype, 0,
                       seed=mj.seed, base_dir=mj.base_dir)
    tensors = {n: to_torch(example[n]) for n in binding.order}
    with torch.inference_mode():
        out = binding.call(typed, tensors)
    outs, _ = output_names(out, mj.module)
    exported = export_module(typed, binding.arguments(tensors), mj.module.inputs, outs,
                             mj.export)
    return _Prepared(typed, binding, exported.source, names, outs,
                     known_ops.bundled() if job.expensive else [])


def _localise(job: LocaliseJob, prep: _Prepared, result: CaseResult) -> Localisation:
    loc = Localisation()
    sample = _failing_sample(job, prep, result.key)
    tol = tolerance_for(job.module, job.dtype, None)
    checks: list[tuple[Check, Callable[[], str]]] = [
        (Check.OPTIMIZER, lambda: _optimizer(job, prep, result.key, sample, loc)),
        (Check.PROVIDER, lambda: _provider(job, prep, result.key, sample, loc)),
        (Check.CAPTURE, lambda: _capture(job, prep, sample, tol, loc)),
        (Check.CONDITIONING, lambda: _conditioning(prep, sample, tol, loc)),
        (Check.LAYER, lambda: _layer(job, prep, sample, tol, loc)),
        (Check.OP, lambda: _op(job, prep, sample, loc, result.key)),
        (Check.REPRO, lambda: _repro(job, prep, result, sample, tol, loc)),
    ]
    for check, fn in checks:
        if check in EXPENSIVE and result.id not in job.expensive:
            loc.steps.append(StepRun(check, Status.SKIPPED,
                                     note="beyond the manifest's cap on localised cases"))
            continue
        t0 = time.perf_counter()
        try:
            note = fn()
            status = Status.SKIPPED if note.startswith("skipped: ") else Status.RAN
            note = note.removeprefix("skipped: ")
        except Exception as exc:
            status, note = Status.FAILED, first_line(f"{type(exc).__name__}: {exc}")
        seconds = time.perf_counter() - t0
        if seconds > job.step_timeout_s and status is Status.RAN:
            status = Status.TIMEOUT
            note = f"took {seconds:.0f}s, over the {job.step_timeout_s:g}s limit; {note}"
        loc.steps.append(StepRun(check, status, round(seconds, 3), note))
    return loc


def _failing_sample(job: LocaliseJob, prep: _Prepared, key: CaseKey) -> _Sample:
    """The first sample of the case whose outputs leave tolerance (else the first)."""

    mj = job.module
    fixture = mj.fixtures[key.inputs]
    session = stages.open_session(prep.model, key.provider, mj.providers[key.provider].options)
    tol = tolerance_for(mj, job.dtype, None)
    first: _Sample | None = None
    for index in range(fixture.samples):
        inputs = generate(key.inputs, fixture, prep.input_names, key.batch_size or 0, job.dtype,
                          index, seed=mj.seed, base_dir=mj.base_dir)
        eager = prep.call(prep.module, inputs)
        onnx = _ort(session, inputs)
        sample = _Sample(inputs, eager, onnx)
        first = first or sample
        if not _passes(eager, onnx, tol):
            return sample
    assert first is not None
    return first


def _ort(session: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    feeds = {i.name: inputs[i.name] for i in session.get_inputs() if i.name in inputs}
    return stages.run(session, feeds)


def _passes(ref: list[np.ndarray], got: list[np.ndarray], tol: cmp.Tolerance) -> bool:
    return len(ref) == len(got) and all(cmp.compare(r, g, tol).passed
                                        for r, g in zip(ref, got, strict=True))


def _optimizer(job: LocaliseJob, prep: _Prepared, key: CaseKey, sample: _Sample,
               loc: Localisation) -> str:
    tol = tolerance_for(job.module, job.dtype, None)
    options = job.module.providers[key.provider].options
    for level in LEVELS:
        session = stages.open_session(prep.model, key.provider, options, optimization=level)
        loc.levels[level] = _passes(sample.eager, _ort(session, sample.inputs), tol)
    failing = [lv for lv in LEVELS if not loc.levels[lv]]
    loc.first_level = failing[0] if failing else None
    if not failing:
        return "passes at every level on this sample"
    return f"first fails at '{failing[0]}'"


def _provider(job: LocaliseJob, prep: _Prepared, key: CaseKey, sample: _Sample,
              loc: Localisation) -> str:
    if key.provider == "cpu":
        return "skipped: the case already runs on the CPU provider"
    session = stages.open_session(prep.model, "cpu", {})
    cpu_ok = _passes(sample.eager, _ort(session, sample.inputs),
                     tolerance_for(job.module, job.dtype, None))
    loc.provider_specific = cpu_ok
    return "the CPU provider matches eager" if cpu_ok else "the CPU provider fails too"


def _program(job: LocaliseJob, prep: _Prepared, sample: _Sample) -> Any:
    """The dynamo export of this sample with the exporter's optimizer off, so ONNX values
    keep their FX names (cached on the sample: capture and layer share it)."""
    import torch

    if sample.program is None:
        args, kwargs = prep.arguments(sample.inputs)
        sample.program = torch.onnx.export(
            prep.module, args, kwargs=kwargs or None, dynamo=True, optimize=False,
            verbose=False, output_names=prep.output_names or None)
    return sample.program


def _capture(job: LocaliseJob, prep: _Prepared, sample: _Sample, tol: cmp.Tolerance,
             loc: Localisation) -> str:
    import torch

    if job.module.export.exporter == "torchscript":
        return "skipped: the torchscript exporter has no torch.export program"
    program = _program(job, prep, sample)
    args, kwargs = prep.arguments(sample.inputs)
    with torch.inference_mode():
        captured = [to_numpy(t) for t in
                    leaves(program.exported_program.module()(*args, **kwargs))]
    loc.capture_owns = not _passes(sample.eager, captured, tol)
    worst = [cmp.compare(e, c, tol).max_abs for e, c in zip(sample.eager, captured,
                                                            strict=False)]
    loc.capture_max_abs = max((w for w in worst if w is not None), default=None)
    return ("the torch.export program already differs from eager" if loc.capture_owns
            else "the torch.export program matches eager")


def _conditioning(prep: _Prepared, sample: _Sample, tol: cmp.Tolerance,
                  loc: Localisation) -> str:
    """The module in float64 on the same inputs, judged by the module gate's own rule
    (compare.reference): one rule for what a tolerance artefact is, not two."""
    import torch

    wide = copy.deepcopy(prep.module).to(torch.float64)
    upcast = {n: a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16"
              else a for n, a in sample.inputs.items()}
    truth = prep.call(wide, upcast)
    eager, onnx = [np.asarray(e) for e in sample.eager], [np.asarray(o) for o in sample.onnx]
    names = [f"output{i}" for i in range(len(eager))]
    failing = [i for i, (e, o) in enumerate(zip(eager, onnx, strict=False))
               if not cmp.compare(e, o, tol).passed]
    judged = judge_against_float64(eager, onnx, truth, names, [tol] * len(eager),
                                   [False] * len(eager), failing)
    if judged.ruling is Ruling.UNVERIFIED:
        return f"skipped: {judged.describe()}"
    loc.eager_error, loc.onnx_error = judged.eager_error, judged.onnx_error
    loc.artefact = not judged.ruling.defect
    figures = (f"ONNX Runtime is {judged.onnx_error or 0.0:.3g} from float64 where eager is "
               f"{judged.eager_error or 0.0:.3g}")
    return f"{figures}: {'a tolerance artefact' if loc.artefact else 'a defect'}"


def _layer(job: LocaliseJob, prep: _Prepared, sample: _Sample, tol: cmp.Tolerance,
           loc: Localisation) -> str:
    import torch

    if job.module.export.exporter == "torchscript":
        return "skipped: layer search reads the dynamo exporter's module scopes"
    if loc.capture_owns:
        return "skipped: the capture already differs; the ONNX translation is not at fault"
    program = _program(job, prep, sample)
    args, kwargs = prep.arguments(sample.inputs)
    graph_module = program.exported_program.module()
    flat = program.exported_program._get_flat_args_with_check(args, kwargs)[0]

    def evaluate(names: list[str]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        wanted = set(names)
        expected: dict[str, np.ndarray] = {}

        class Grab(torch.fx.Interpreter):
            def run_node(self, n: Any) -> Any:
                out = super().run_node(n)
                if n.name in wanted and isinstance(out, torch.Tensor):
                    expected[n.name] = to_numpy(out)
                return out

        with torch.inference_mode():
            Grab(graph_module).run(*flat)
        present = [n for n in names if n in expected]
        values = program.compute_values(present, flat) if present else []
        return expected, {n: to_numpy(v) for n, v in zip(present, values, strict=True)}

    found = layers.search(layers.ScopeMap.of(program.model_proto), evaluate, tol)
    loc.curve = found.curve
    loc.layer = found.layer
    if found.layer is None:
        return f"no module's outputs leave tolerance ({found.evaluated} values compared)"
    return f"{found.layer.module} ({found.evaluated} values compared)"


def _op(job: LocaliseJob, prep: _Prepared, sample: _Sample, loc: Localisation,
        key: CaseKey) -> str:
    if loc.layer is None or sample.program is None:
        return "skipped: no divergent layer to look in"
    layer = loc.layer.module
    nodes = [n for n in sample.program.exported_program.graph.nodes
             if n.op == "call_function"
             and any(path == layer or path.startswith(layer + ".")
                     for path, _ in (n.meta.get("nn_module_stack") or {}).values())]
    edge = isinstance(job.module.fixtures[key.inputs], EdgeFixture)
    loc.known_op = known_ops.match(nodes, prep.known,
                                   ("specials", "normal") if edge else ("normal",))
    if loc.known_op is None:
        return f"no known op-sweep finding covers the {len(nodes)} ATen calls in {layer}"
    return loc.known_op.describe(layer, job.version_line)


def _repro(job: LocaliseJob, prep: _Prepared, result: CaseResult, sample: _Sample,
           tol: cmp.Tolerance, loc: Localisation) -> str:
    if not job.artifacts:
        return "skipped: no artifacts folder"
    folder = Path(job.artifacts) / repro.folder_name(result.id)
    names = prep.output_names
    repro.write(folder, case_id=result.id, model=prep.model, inputs=sample.inputs,
                expected=dict(zip(names, sample.eager, strict=False)),
                got=dict(zip(names, sample.onnx, strict=False)), atol=tol.atol,
                rtol=tol.rtol, providers=[_ep(result.key.provider)], version=job.version)
    loc.repro = str(folder)
    if loc.layer is None:
        return str(folder)
    try:
        note = _layer_repro(prep, sample, loc.layer.module, folder / "layer", result.id, tol,
                            result.key.provider, job.version)
    except Exception as exc:
        note = f"the layer could not be exported alone: {first_line(repr(exc))}"
    return f"{folder}; {note}"


def _layer_repro(prep: _Prepared, sample: _Sample, path: str, folder: Path, case_id: str,
                 tol: cmp.Tolerance, provider: str, version: str) -> str:
    """The divergent submodule alone, exported with the inputs it saw in this sample."""
    import torch

    sub = prep.module.get_submodule(path)
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def grab(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not seen:
            seen.append((args, kwargs))

    handle = sub.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        prep.call(prep.module, sample.inputs)
    finally:
        handle.remove()
    args, kwargs = seen[0]
    if kwargs or not all(isinstance(a, torch.Tensor) for a in args):
        return f"{path} takes non-tensor or keyword inputs: no separate layer repro"
    args = tuple(a.clone() for a in args)
    names = [f"input{i}" for i in range(len(args))]
    with torch.inference_mode():
        outs = [to_numpy(t) for t in leaves(sub(*args))]
    out_names = [f"output{i}" for i in range(len(outs))]
    program: Any = torch.onnx.export(sub, args, dynamo=True, verbose=False,
                                     input_names=names, output_names=out_names)
    model = program.model_proto.SerializeToString()
    inputs = {n: to_numpy(a) for n, a in zip(names, args, strict=True)}
    repro.write(folder, case_id=f"{case_id} (layer {path})", model=model, inputs=inputs,
                expected=dict(zip(out_names, outs, strict=True)), got=None, atol=tol.atol,
                rtol=tol.rtol, providers=[_ep(provider)], version=version)
    return f"layer {path} alone in {folder}"


def _ep(provider: str) -> str:
    from parity_gate.plan.providers import EXECUTION_PROVIDERS

    return EXECUTION_PROVIDERS[provider]
