"""Inside a worker: the follow-up checks for the failing cases of one (module, dtype).

The module is rebuilt for eager; its exports are the run's own, which the gate's
worker handed off (engine.cache.hand_off: the model ONNX Runtime ran, the
exporter's optimizer-off translation, where every ONNX value keeps its FX name,
and the torch.export program it translated). When the export cache served the
gate's model there is no live program: it is exported once more, optimizer off;
with no hand-off at all (a worker that died) it is exported as the gate did and
the program translated again. All of that once per (module, dtype), not per
case. Then, per failing case, cheapest check first: the ORT optimization level
the mismatch appears at, the CPU provider, the capture, a float64 run of the same
weights, and for the worst case of each module (then up to the cap) the blame
rule's scope and node, the op-sweep finding at it, its owner (ONNX Runtime on the
culprit's nodes alone against the op's definition or ONNX's reference evaluator)
and repro folders, each run before it is presented. Every check is timed, bounded
and caught on its own: one that breaks is recorded as failed and the rest still
run."""

from __future__ import annotations

import copy
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.compare.reference import OutputRules, judge_against_float64
from parity_gate.engine import stages
from parity_gate.engine.binding import Binding, bind, output_names
from parity_gate.engine.cache import handed_off
from parity_gate.engine.discrete import discrete_outputs
from parity_gate.engine.exporting import export_module
from parity_gate.engine.fixtures import Draw, generate
from parity_gate.engine.module_worker import build_module, export_batch_size, tolerance_for
from parity_gate.engine.protocol import CaseStream, Emit
from parity_gate.engine.referee import range_disagreement
from parity_gate.engine.runtime import first_line
from parity_gate.engine.tensors import leaves, to_numpy, to_torch
from parity_gate.localise import known as known_ops
from parity_gate.localise import layers, nodes, repro, sized
from parity_gate.localise.advice import fix_of
from parity_gate.localise.jobs import LocaliseJob
from parity_gate.localise.run import EXPORTS, SIZED
from parity_gate.manifest.models import EdgeFixture
from parity_gate.model.files import remove
from parity_gate.model.findings import Stage
from parity_gate.model.keys import CaseKey
from parity_gate.model.localisation import (
    EXPENSIVE,
    LEVELS,
    Check,
    Culprit,
    DivergentLayer,
    Localisation,
    Status,
    StepRun,
)
from parity_gate.model.outcomes import Outcome
from parity_gate.model.precision import Ruling
from parity_gate.model.results import CaseResult
from parity_gate.model.upstream import Owner
from parity_gate.plan.cases import GENERATE

SESSION_BYTES = 256 << 20  # what the job's kept sessions may hold of the model's weights


def _file_bytes(path: str) -> int:
    """An external-data model's size: its graph file and its weights."""
    import os

    return sum(os.path.getsize(p) for p in (path, f"{path}.data") if os.path.exists(p))


@dataclass
class _Prepared:
    """The module as the gate ran it: typed copy, its ONNX model and the names around it."""

    module: Any
    binding: Binding
    model: bytes | str  # a path when the weights are external data (past 2 GiB)
    input_names: list[str]
    output_names: list[str]
    known: Sequence[known_ops.Known]
    program: Any = None  # the torch.export program (dynamo) its translation came from
    example: dict[str, np.ndarray] = field(default_factory=dict)  # the export's example
    assumptions: list[Any] | None = None  # what the export assumed of sizes (None: unread)
    traced: dict[Any, _Traced] = field(default_factory=dict)  # by input shapes
    sessions: dict[tuple[str, str], Any] = field(default_factory=dict)  # (provider, level)

    def session(self, provider: str, options: dict[str, Any], level: str = LEVELS[-1]) -> Any:
        """A session of the gate's model: one per (provider, level) for all the job's cases
        while they fit SESSION_BYTES (weights counted once per session), else made anew."""
        key = (provider, level)
        if key in self.sessions:
            return self.sessions[key]
        made = stages.open_session(self.model, provider, options, optimization=level)
        size = len(self.model) if isinstance(self.model, bytes) else _file_bytes(self.model)
        if size * (len(self.sessions) + 1) <= SESSION_BYTES:
            self.sessions[key] = made
        return made

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
    found: _Found | None = None  # what the layer search left for the owner and the repro


def run(job: LocaliseJob, emit: Emit) -> None:
    """Emit every failing case again, with its `localisation` record (never raises)."""
    stream = CaseStream(job, emit)
    stream.step(Stage.BUILDING, job.module.name, "for localisation")
    try:
        job, prepared = _cached(job)
        if all(r.outcome in EXPORT_FAILED for r in job.failing):
            for result in job.failing:
                stream.result(replace(result, localisation=_export_failed(job, prepared,
                                                                          result)))
            return
        prepared = _prepare(job, prepared)
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


EXPORT_FAILED = EXPORTS


def _export_failed(job: LocaliseJob, module: Any, result: CaseResult) -> Localisation:
    """An export failure: its cause is on the case already (the user frame the exporter
    stopped in); what localisation adds is a repro that fails the same way, made for the
    job's lead case (every case of a dtype shares the one export)."""
    import torch

    from parity_gate.engine.evidence import export_call
    from parity_gate.localise import export_repro

    loc = Localisation()
    if not job.artifacts or result.id != next((c.id for c in job.failing
                                               if c.id in job.expensive), None):
        lead = next((c.id for c in job.failing if c.id in job.expensive), "")
        why = "no artifacts folder" if not job.artifacts else \
            f"the export of {lead} (the same export) has it" if lead else \
            "beyond the manifest's cap on localised cases"
        loc.steps.append(StepRun(Check.REPRO, Status.SKIPPED, note=why))
        return loc
    t0 = time.perf_counter()
    mj = job.module
    binding, problems = bind(module, mj.module)
    if problems:
        loc.steps.append(StepRun(Check.REPRO, Status.SKIPPED, note=problems[0]))
        return loc
    names = [i.name for i in mj.module.inputs]
    example = _export_example(job, names)
    typed = copy.deepcopy(module).to(getattr(torch, job.dtype))
    with torch.inference_mode():
        outs, _ = output_names(binding.call(typed, {n: to_torch(example[n])
                                                    for n in binding.order}), mj.module)
    call = export_call(mj, job.dtype, "cpu", binding, outs, mj.export)
    folder = Path(job.artifacts) / repro.folder_name(result.id)
    made, note = export_repro.write(folder, result.id, call,
                                    {n: example[n] for n in binding.order}, job.version,
                                    job.step_timeout_s)
    if made:
        loc.repro = str(folder)
    loc.steps.append(StepRun(Check.REPRO, Status.RAN, round(time.perf_counter() - t0, 3),
                             note=f"repro in {folder}: {note}" if made else note))
    return loc


def _cached(job: LocaliseJob) -> tuple[LocaliseJob, Any]:
    """A module with a KV cache behind the gate's own cache step (the same layout and
    flat inputs the gate exported), the job rewritten to feed it; else as it is."""
    mj = job.module
    module = build_module(mj)
    module.eval()
    if mj.module.cache is None:
        return job, module
    from parity_gate.engine.kvcache import cached_module, layout, observed, rewrite

    lay, problems = layout(module, mj.module)
    if problems or lay is None:
        raise ValueError(problems[0] if problems else "cache: no layout")
    lay = observed(module, lay)
    step = cached_module(module, lay, [i.name for i in mj.module.inputs])
    return replace(job, module=rewrite(mj, lay)), step


def _prepare(job: LocaliseJob, module: Any = None) -> _Prepared:
    import torch

    mj = job.module
    if module is None:
        job, module = _cached(job)
        mj = job.module
    binding, problems = bind(module, mj.module)
    if problems:
        raise ValueError(problems[0])
    typed = copy.deepcopy(module).to(getattr(torch, job.dtype))
    names = [i.name for i in mj.module.inputs]
    known = known_ops.bundled() if job.expensive else ()
    got = (handed_off(Path(job.handoff), mj.name, job.dtype)
           if job.handoff is not None and mj.export.exporter == "dynamo" else None)
    if got is not None and got.plain is not None:
        prep = _prepared(typed, binding, got.model, names, got.outputs, known,
                         lambda: (got.program(), got.plain))
        if prep is not None:
            return prep
    example = _export_example(job, names)
    tensors = {n: to_torch(example[n]) for n in binding.order}
    with torch.inference_mode():
        out = binding.call(typed, tensors)
    outs, _ = output_names(out, mj.module)
    args = binding.arguments(tensors)
    if got is not None and mj.export.optimize:
        # the gate's model came from the export cache (no live program): export once more,
        # optimizer off, for the program and its FX-named translation
        unoptimized = export_module(typed, args, mj.module.inputs, got.outputs,
                                    mj.export.model_copy(update={"optimize": False}))
        prep = _prepared(typed, binding, got.model, names, got.outputs, known,
                         lambda: (unoptimized.program, unoptimized.source))
        if prep is not None:
            return prep
    exported = export_module(typed, args, mj.module.inputs, outs, mj.export)
    return _Prepared(typed, binding, exported.source, names, outs, known, exported.program,
                     example, _assumed(exported, binding, mj.module.inputs))


def _export_example(job: LocaliseJob, names: list[str]) -> dict[str, np.ndarray]:
    """The example the gate exported from: its first plain fixture set at the export batch."""
    mj = job.module
    plain = sorted((n for n in mj.fixtures if GENERATE not in n),
                   key=lambda n: isinstance(mj.fixtures[n], EdgeFixture))
    return generate(plain[0], mj.fixtures[plain[0]], names,
                    Draw(export_batch_size(mj), job.dtype), seed=mj.seed, base_dir=mj.base_dir)


def _assumed(exported: Any, binding: Binding, inputs: Sequence[Any]) -> list[Any]:
    """What the export assumed of its sizes, read as the gate reads it (forward()'s order)."""
    from parity_gate.engine.assumptions import read_assumptions

    by_name = {spec.name: spec for spec in inputs}
    return read_assumptions(exported.captured, [by_name[n] for n in binding.order
                                                if n in by_name], exported.guard_sources)[0]


def _prepared(typed: Any, binding: Binding, model: bytes | str, names: list[str],
              outputs: list[str], known: Sequence[known_ops.Known],
              translation: Callable[[], tuple[Any, bytes | str | None]]) -> _Prepared | None:
    """The gate's model with a torch.export program and its optimizer-off translation
    (`translation()`: the program and the ONNX model); None when they cannot be read."""
    import onnx

    try:
        program, plain = translation()
        if program is None or plain is None:
            return None
        proto = (onnx.load_from_string(plain) if isinstance(plain, bytes)
                 else onnx.load(plain))
    except Exception:  # unreadable: export again
        traceback.print_exc()
        return None
    prep = _Prepared(typed, binding, model, names, outputs, known, program)
    if _fx_named_outputs(proto, program):  # else the program is translated again (_traced)
        prep.traced[()] = _translated(program, proto)
    return prep


def _fx_named_outputs(proto: Any, program: Any) -> bool:
    """Give the translation's outputs back their FX names (the gate named them after the
    module's outputs); False where that cannot be done safely (then: translate again)."""
    import onnx
    import torch

    (end,) = [n for n in program.graph.nodes if n.op == "output"]
    fx = [a.name for a in torch.utils._pytree.tree_leaves(end.args)
          if isinstance(a, torch.fx.Node)]
    graph = proto.graph
    if len(fx) != len(graph.output) or len(set(fx)) != len(fx) or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)  # subgraphs
            for n in graph.node for a in n.attribute):
        return False
    rename = {o.name: f for o, f in zip(graph.output, fx, strict=True) if o.name != f}
    taken = {v for n in graph.node for v in (*n.input, *n.output)} | {
        i.name for i in (*graph.input, *graph.initializer)}
    if any(f in taken for f in rename.values()) or any(o in {i.name for i in graph.input}
                                                       for o in rename):
        return False
    for node in graph.node:
        node.input[:] = [rename.get(v, v) for v in node.input]
        node.output[:] = [rename.get(v, v) for v in node.output]
    for value in (*graph.output, *graph.value_info):
        value.name = rename.get(value.name, value.name)
    return True


def _localise(job: LocaliseJob, prep: _Prepared, result: CaseResult) -> Localisation:
    """The follow-up checks of one case, its culprit given the fix an engineer would write
    (localise.advice) where its own check did not already say one."""
    loc = _checks(job, prep, result)
    if loc.culprit is not None and not loc.culprit.fix:
        loc.culprit = replace(loc.culprit, fix=fix_of(loc))
    return loc


def _checks(job: LocaliseJob, prep: _Prepared, result: CaseResult) -> Localisation:
    if result.outcome in SIZED and result.generation is None:
        sized = _sized(job, prep, result)
        if sized.culprit is not None or result.outcome is not Outcome.RUNTIME_ERROR:
            return sized
    if result.outcome is Outcome.RUNTIME_ERROR:
        return _raised(job, prep, result)
    loc = Localisation()
    sample = (_generation_sample(job, prep, result) if result.generation is not None
              else _failing_sample(job, prep, result.key))
    tol = tolerance_for(job.module, job.dtype, None)
    checks: list[tuple[Check, Callable[[], str]]] = [
        (Check.OPTIMIZER, lambda: _optimizer(job, prep, result.key, sample, loc)),
        (Check.PROVIDER, lambda: _provider(job, prep, result.key, sample, loc)),
        (Check.CAPTURE, lambda: _capture(job, prep, sample, tol, loc)),
        (Check.CONDITIONING, lambda: _conditioning(prep, sample, tol, loc)),
        (Check.LAYER, lambda: _layer(job, prep, sample, tol, loc, result.key.provider)),
        (Check.OP, lambda: _op(job, prep, sample, loc, result)),
        (Check.OWNER, lambda: _owner(job, prep, sample, tol, loc, result.key.provider)),
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


def _sized(job: LocaliseJob, prep: _Prepared, result: CaseResult) -> Localisation:
    """A failure at sizes the export did not hold: the assumption they break, its line and
    the fix (localise.sized), and a repro on the gate's model that fails the same way."""
    from parity_gate.engine.assumptions import export_sizes

    loc = Localisation()
    t0 = time.perf_counter()
    mj = job.module
    inputs = _case_inputs(job, prep, result)
    specs = mj.module.inputs
    if not prep.example:
        prep.example = _export_example(job, prep.input_names)
    sizes, exported_at = export_sizes(inputs, specs), export_sizes(prep.example, specs)
    if prep.assumptions is None:  # the gate's export came from a hand-off: read its sizes
        tensors = {n: to_torch(prep.example[n]) for n in prep.binding.order}
        again = export_module(prep.module, prep.binding.arguments(tensors), specs,
                              prep.output_names, mj.export)
        prep.assumptions = _assumed(again, prep.binding, specs)
    found = sized.broken(prep.assumptions, sizes)
    if found is None:
        loc.steps.append(StepRun(Check.LAYER, Status.SKIPPED, round(time.perf_counter() - t0, 3),
                                 note=f"the sizes {_label(sizes)} break no assumption the "
                                 f"export recorded ({len(prep.assumptions)} read)"))
        return loc
    loc.culprit = sized.culprit(found, sized.scope_of(prep.module, found.assumption.kind),
                                mj.base_dir)
    t1 = time.perf_counter()
    loc.steps.append(StepRun(Check.LAYER, Status.RAN, round(t1 - t0, 3), note=(
        f"the sizes {_label(sizes)} break `{found.assumption.text}` (exported at "
        f"{_label(exported_at)}): {loc.culprit.describe()}")))
    if not job.artifacts or result.id not in job.expensive:
        why = "no artifacts folder" if not job.artifacts else \
            "beyond the manifest's cap on localised cases"
        loc.steps.append(StepRun(Check.REPRO, Status.SKIPPED, note=why))
        return loc
    folder = Path(job.artifacts) / repro.folder_name(result.id)
    eager = prep.call(prep.module, inputs)
    made, note = sized.write_repro(folder, sized.SizedCase(
        result.id, prep.model, {n: inputs[n] for n in prep.input_names if n in inputs},
        [list(e.shape) for e in eager], sizes, exported_at, _ep(result.key.provider),
        job.version))
    if made:
        loc.repro = str(folder)
    loc.steps.append(StepRun(Check.REPRO, Status.RAN, round(time.perf_counter() - t1, 3),
                             note=f"repro in {folder}: {note}" if made else note))
    return loc


def _label(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "(none)"


def _case_inputs(job: LocaliseJob, prep: _Prepared, result: CaseResult
                 ) -> dict[str, np.ndarray]:
    """The failing case's inputs, drawn as the gate drew them."""
    fixture = job.module.fixtures[result.key.inputs]
    return generate(result.key.inputs, fixture, prep.input_names,
                    Draw(result.key.batch_size or 0, job.dtype, 0),
                    seed=job.module.seed, base_dir=job.module.base_dir)


def _raised(job: LocaliseJob, prep: _Prepared, result: CaseResult) -> Localisation:
    """An ONNX Runtime error: the node that raised, on the inputs it raised on (a
    generation's: the cached step's at the step that raised, eager's cache before it)."""
    from parity_gate.localise.raised import Raised, localise_error

    gen = result.generation
    if gen is not None and gen.error_step:
        inputs = _step_feeds(job, prep, result, gen.error_step)
    else:
        inputs = _case_inputs(job, prep, result)
    folder = Path(job.artifacts) / repro.folder_name(result.id) if job.artifacts else None
    program = prep.program.module() if prep.program is not None else None
    return localise_error(Raised(
        result.id, f"{result.reason}\n{result.detail}", prep.model, inputs, program,
        prep.arguments(inputs), folder, _ep(result.key.provider), job.version,
        gen.error_step if gen is not None else None, job.module.base_dir))


def _step_feeds(job: LocaliseJob, prep: _Prepared, result: CaseResult, step: int
                ) -> dict[str, np.ndarray]:
    """The cached step's inputs at generation step `step`, eager's cache before it."""
    from parity_gate.engine.generation import prompt_inputs, step_inputs

    gen = result.generation
    assert gen is not None
    model, lay = prep.module.model, prep.module.layout
    prompt = prompt_inputs(job.module, result.key.inputs, result.key.batch_size or 1, job.dtype)
    dtype = to_numpy(next(iter(model.parameters()))).dtype
    return step_inputs(model, lay, prompt, gen.eager_tokens, step, "cpu", dtype)


def _failing_sample(job: LocaliseJob, prep: _Prepared, key: CaseKey) -> _Sample:
    """The first sample of the case whose outputs leave tolerance (else the first)."""

    mj = job.module
    fixture = mj.fixtures[key.inputs]
    session = prep.session(key.provider, mj.providers[key.provider].options)
    tol = tolerance_for(mj, job.dtype, None)
    first: _Sample | None = None
    for index in range(fixture.samples):
        inputs = generate(key.inputs, fixture, prep.input_names,
                          Draw(key.batch_size or 0, job.dtype, index), seed=mj.seed,
                          base_dir=mj.base_dir)
        eager = prep.call(prep.module, inputs)
        onnx = _ort(session, inputs)
        sample = _Sample(inputs, eager, onnx)
        first = first or sample
        if not _passes(eager, onnx, tol):
            return sample
    assert first is not None
    return first


def _generation_sample(job: LocaliseJob, prep: _Prepared, result: CaseResult) -> _Sample:
    """A generation case's first failing step, as the cached step's inputs: its new tokens
    and eager's cache after the steps before (the tokens both sides chose so far)."""
    from parity_gate.engine.generation import prompt_inputs, step_inputs

    gen = result.generation
    assert gen is not None
    step = gen.first_failing_step or gen.first_divergent_step or 1
    model, lay = prep.module.model, prep.module.layout
    prompt = prompt_inputs(job.module, result.key.inputs, result.key.batch_size or 1, job.dtype)
    dtype = to_numpy(next(iter(model.parameters()))).dtype
    inputs = step_inputs(model, lay, prompt, gen.eager_tokens, step, "cpu", dtype)
    session = prep.session(result.key.provider, job.module.providers[result.key.provider].options)
    return _Sample(inputs, prep.call(prep.module, inputs), _ort(session, inputs))


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
        session = prep.session(key.provider, options, level)
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
    session = prep.session("cpu", {})
    cpu_ok = _passes(sample.eager, _ort(session, sample.inputs),
                     tolerance_for(job.module, job.dtype, None))
    loc.provider_specific = cpu_ok
    return "the CPU provider matches eager" if cpu_ok else "the CPU provider fails too"


@dataclass
class _Traced:
    """The program the gate exported, translated again with the exporter's optimizer off so
    every ONNX value keeps its FX name; read once per (module, dtype, input shapes)."""

    program: Any       # torch.export's ExportedProgram (the translation's)
    module: Any        # its runnable module
    graph: layers.Graph
    proto: Any         # the ONNX translation (onnx.ModelProto)
    fx: dict[str, Any]  # FX name -> node
    values: set[str]   # ONNX value names a session can return (typed)
    inputs: set[str]   # the ONNX graph's inputs

    def arguments(self, prep: _Prepared, inputs: dict[str, np.ndarray]) -> list[Any]:
        args, kwargs = prep.arguments(inputs)
        return list(self.program._get_flat_args_with_check(args, kwargs)[0])


def _traced(job: LocaliseJob, prep: _Prepared, sample: _Sample) -> _Traced:
    """The optimizer-off translation for this sample, made once and kept on `prep`."""
    import torch

    # the gate's program takes every shape its cases ran at (its dynamic dims stay dynamic
    # in the translation): one translation per (module, dtype); else one per input shape
    key = () if prep.program is not None else tuple(
        sorted((n, tuple(a.shape), str(a.dtype)) for n, a in sample.inputs.items()))
    if key not in prep.traced:
        args, kwargs = prep.arguments(sample.inputs)
        source = prep.program if prep.program is not None else prep.module
        onnx_program: Any = torch.onnx.export(  # no output names: every value keeps its own
            source, args, kwargs=kwargs or None, dynamo=True, optimize=False, verbose=False)
        prep.traced[key] = _translated(onnx_program.exported_program, onnx_program.model_proto)
    return prep.traced[key]


def _translated(program: Any, proto: Any) -> _Traced:
    typed = {v.name for v in (*proto.graph.value_info, *proto.graph.output)}
    return _Traced(program, program.module(), nodes.graph_of(program), proto,
                   {n.name: n for n in program.graph.nodes}, typed,
                   {i.name for i in proto.graph.input})


def _capture(job: LocaliseJob, prep: _Prepared, sample: _Sample, tol: cmp.Tolerance,
             loc: Localisation) -> str:
    import torch

    if job.module.export.exporter == "torchscript":
        return "skipped: the torchscript exporter has no torch.export program"
    traced = _traced(job, prep, sample)
    args, kwargs = prep.arguments(sample.inputs)
    with torch.inference_mode():
        captured = [to_numpy(t) for t in leaves(traced.module(*args, **kwargs))]
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
    rules = OutputRules(names, [tol] * len(eager), [False] * len(eager), _discrete(prep.model))
    judged = judge_against_float64(eager, onnx, truth, rules, failing)
    if judged.ruling is Ruling.UNVERIFIED:
        return f"skipped: {judged.describe()}"
    if not judged.ruling.defect:  # the gate's own rule: float64 must compute the same function
        dtype = next((str(p.dtype).removeprefix("torch.") for p in prep.module.parameters()
                      if p.is_floating_point()), "")
        apart = range_disagreement([lambda: prep.call(prep.module, sample.inputs)],
                                   [lambda: prep.call(wide, upcast)], dtype) if dtype else ""
        if apart:
            judged = replace(judged, ruling=Ruling.OUT_OF_RANGE, error=apart)
    if judged.ruling in (Ruling.OUT_OF_RANGE, Ruling.DISCRETE):
        loc.artefact = False
        return f"a defect: {judged.describe()}"
    loc.eager_error, loc.onnx_error = judged.eager_error, judged.onnx_error
    loc.artefact = not judged.ruling.defect
    figures = (f"ONNX Runtime is {judged.onnx_error or 0.0:.3g} from float64 where eager is "
               f"{judged.eager_error or 0.0:.3g}")
    return f"{figures}: {'a tolerance artefact' if loc.artefact else 'a defect'}"


def _discrete(model: bytes | str) -> list[bool]:
    """Per output, whether the gate's ONNX graph computes discrete values ([] if unread)."""
    try:
        import onnx

        proto = (onnx.load_model_from_string(model) if isinstance(model, bytes)
                 else onnx.load(model, load_external_data=False))
        return discrete_outputs(proto)
    except Exception:  # advisory: integer outputs are still told apart by their dtype
        return []


def _program_values(traced: _Traced, prep: _Prepared, sample: _Sample, names: list[str]
                    ) -> dict[str, Any]:
    """The exported program's values of `names` on this sample (tensors as torch)."""
    import torch

    wanted = set(names)
    got: dict[str, Any] = {}

    class Grab(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            if n.name in wanted:
                got[n.name] = out.clone() if isinstance(out, torch.Tensor) else out
            return out

    with torch.inference_mode():
        Grab(traced.module).run(*traced.arguments(prep, sample.inputs))
    return got


def _onnx_values(traced: _Traced, sample: _Sample, names: list[str], provider: str
                 ) -> dict[str, np.ndarray]:
    """ONNX Runtime's values of `names` on this sample: the translation with those values
    made graph outputs for one run (then put back)."""
    import onnxruntime as ort

    graph = traced.proto.graph
    typed = {v.name: v for v in (*graph.value_info, *graph.output)}
    kept = len(graph.output)
    present = {o.name for o in graph.output}
    asked = [n for n in dict.fromkeys(names) if n in typed]
    if not asked:
        return {}  # (a run asked for no names returns every output)
    graph.output.extend(typed[n] for n in asked if n not in present)
    try:
        model = traced.proto.SerializeToString()
    finally:
        del graph.output[kept:]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model, options, providers=[_ep(provider)])
    feeds = {i.name: sample.inputs[i.name] for i in session.get_inputs()
             if i.name in sample.inputs}
    return dict(zip(asked, session.run(asked, feeds), strict=True))


def _against_onnx(traced: _Traced, prep: _Prepared, sample: _Sample, tol: cmp.Tolerance,
                  provider: str) -> layers.Evaluate:
    """The blame rule's sides for a translation defect: the program against ONNX Runtime."""

    def evaluate(names: list[str]) -> dict[str, layers.Agreement]:
        names = [n for n in names if n in traced.values and n not in traced.inputs]
        program = _program_values(traced, prep, sample, names)
        tensors = {n: to_numpy(v) for n, v in program.items() if _is_tensor(v)}
        onnx = _onnx_values(traced, sample, list(tensors), provider)
        return {n: layers.agreement(tensors[n], _like(onnx[n], tensors[n]), tol)
                for n in tensors if n in onnx}

    return evaluate


def _against_eager(traced: _Traced, prep: _Prepared, sample: _Sample, tol: cmp.Tolerance
                   ) -> layers.Evaluate:
    """The blame rule's sides for a capture defect: the program against eager. Eager has
    no FX names, so a program value agrees when eager computed an equal tensor (same shape
    and dtype, within tolerance) anywhere in its forward."""
    seen = _eager_tensors(prep, sample)

    def evaluate(names: list[str]) -> dict[str, layers.Agreement]:
        program = _program_values(traced, prep, sample, names)
        out: dict[str, layers.Agreement] = {}
        for name, value in program.items():
            if not _is_tensor(value):
                continue
            mine = to_numpy(value)
            candidates = seen.get((mine.shape, str(mine.dtype)), [])
            found = next((a for a in (layers.agreement(c, mine, tol) for c in candidates)
                          if a.passed), None)
            out[name] = found or layers.Agreement(False, None, np.inf)
        return out

    return evaluate


EAGER_BYTES = 256 << 20  # what the capture search may keep of eager's intermediate tensors


def _eager_tensors(prep: _Prepared, sample: _Sample
                   ) -> dict[tuple[tuple[int, ...], str], list[np.ndarray]]:
    """Every tensor eager's forward makes on this sample (and its inputs, weights), by
    shape and dtype; bounded by EAGER_BYTES."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}
    budget = [EAGER_BYTES]

    def keep(t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.numel() * t.element_size() <= budget[0]:
            a = to_numpy(t)
            budget[0] -= a.nbytes
            seen.setdefault((a.shape, str(a.dtype)), []).append(a)

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            for t in leaves(out):
                keep(t)
            return out

    for t in (*prep.module.parameters(), *prep.module.buffers()):
        keep(t)
    for a in sample.inputs.values():
        keep(to_torch(a))
    with Record():
        prep.call(prep.module, sample.inputs)
    return seen


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _like(onnx: np.ndarray, program: np.ndarray) -> np.ndarray:
    """ONNX Runtime's value in the program's dtype where only the width differs (an int32
    index for an int64 one): the blame rule asks about numbers, not dtypes."""
    if onnx.dtype != program.dtype and onnx.dtype.kind == program.dtype.kind:
        return onnx.astype(program.dtype)
    return onnx


@dataclass
class _Found:
    """What the layer search left for the owner check and the node repro."""

    traced: _Traced
    node: Any = None  # the culprit's FX node
    cut: nodes.Cut | None = None
    feeds: dict[str, np.ndarray] | None = None
    eager: np.ndarray | None = None
    verdict: nodes.Verdict | None = None
    tensors: dict[str, Any] = field(default_factory=dict)  # the eager call's arguments


def _weights(program: Any, node: Any) -> dict[str, Any]:
    """The weights, buffers and constants `node` reads, by their placeholder names."""
    sig = program.graph_signature
    state = {**program.state_dict, **program.constants}
    names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
             **sig.inputs_to_lifted_tensor_constants}
    return {a.name: state[names[a.name]] for a in node.all_input_nodes
            if a.name in names and names[a.name] in state}


def _layer(job: LocaliseJob, prep: _Prepared, sample: _Sample, tol: cmp.Tolerance,
           loc: Localisation, provider: str) -> str:
    if job.module.export.exporter == "torchscript":
        return "skipped: the blame rule reads the dynamo exporter's torch.export program"
    traced = _traced(job, prep, sample)
    evaluate = (_against_eager(traced, prep, sample, tol) if loc.capture_owns
                else _against_onnx(traced, prep, sample, tol, provider))
    blame = layers.search(traced.graph, evaluate)
    loc.curve = blame.curve
    graph = traced.graph
    inside = graph.inside(blame.scope)
    if blame.path:
        call = graph.call(blame.scope)
        loc.layer = DivergentLayer(call.label, call.kind, [graph.call(s).label for s in
                                                           blame.path],
                                   list(dict.fromkeys(op for n in inside for op in
                                                      _op_types(traced, n.name))),
                                   list(dict.fromkeys(n.aten for n in inside)))
    sample.found = _Found(traced)
    if not blame.diverges:
        return f"no value differs on this sample ({blame.evaluated} values compared)"
    call = graph.call(blame.scope)
    if blame.node is None:
        return (f"{call.label}: its inputs agree and its outputs do not, but no single node "
                f"of its own code does ({blame.evaluated} values compared)")
    fx = traced.fx[blame.node.name]
    source, code = nodes.source_of(fx, job.module.base_dir)
    loc.culprit = Culprit(
        scope=call.label, kind=call.kind, aten=nodes._target(nodes.aten_node(fx)[0]),
        call=nodes.call_text(fx), source=source, code=code,
        onnx_nodes=_op_types(traced, blame.node.name), options=nodes.options(fx),
        owner=Owner.CAPTURE if loc.capture_owns else None,
        owned_by="the torch.export program already differs from eager"
        if loc.capture_owns else "")
    sample.found.node = fx
    return f"{loc.culprit.describe()} ({blame.evaluated} values compared)"


def _op_types(traced: _Traced, fx_name: str) -> list[str]:
    op, _ = nodes.aten_node(traced.fx[fx_name])
    return [n.op_type for n in nodes.onnx_nodes(traced.proto, op.name)
            if n.op_type != "Constant"]


def _op(job: LocaliseJob, prep: _Prepared, sample: _Sample, loc: Localisation,
        result: CaseResult) -> str:
    key = result.key
    found = sample.found
    if found is None or (loc.culprit is None and loc.layer is None):
        return "skipped: no culprit to look at"
    if found.node is not None:
        candidates = [nodes.aten_node(found.node)[0]]
        where = loc.culprit.scope if loc.culprit is not None else ""
    else:
        assert loc.layer is not None
        scope = next(s for s, c in found.traced.graph.calls.items()
                     if c.label == loc.layer.module)
        candidates = [found.traced.fx[n.name] for n in found.traced.graph.inside(scope)]
        where = loc.layer.module
    edge = isinstance(job.module.fixtures[key.inputs], EdgeFixture)
    shown = {s for c in result.comparisons if not c.passed
             if (s := known_ops.symptom(c.verdict)) is not None}
    loc.known_op = known_ops.match(candidates, prep.known,
                                   ("specials", "normal") if edge else ("normal",), shown)
    if loc.known_op is None:
        return f"no known op-sweep finding covers {len(candidates)} ATen call(s) at {where}"
    return loc.known_op.describe(where, job.version_line)


def _owner(job: LocaliseJob, prep: _Prepared, sample: _Sample, tol: cmp.Tolerance,
           loc: Localisation, provider: str) -> str:
    found = sample.found
    if found is None or found.node is None or loc.culprit is None:
        return "skipped: no culprit node"
    if loc.culprit.owner is Owner.CAPTURE:
        return ("capture owns it: the torch.export program already differs from eager "
                "(the ONNX nodes translate the program faithfully)")
    traced = found.traced
    op, _ = nodes.aten_node(found.node)
    part = nodes.cut(traced.proto, nodes.onnx_nodes(traced.proto, op.name), found.node.name)
    if part is None:
        return "skipped: the culprit's ONNX nodes could not be cut out of the graph"
    program = _program_values(traced, prep, sample, [*part.feeds, found.node.name,
                                                     *(a.name for a in op.all_input_nodes)])
    feeds = {n: to_numpy(v) for n, v in program.items() if n in part.feeds and _is_tensor(v)}
    missing = [n for n in part.feeds if n not in feeds]
    if missing:  # values with no FX name (shared constants): ONNX Runtime's own
        feeds.update(_onnx_values(traced, sample, missing, provider))
    if any(n not in feeds for n in part.feeds) or not _is_tensor(program.get(found.node.name)):
        return "skipped: the culprit's ONNX nodes read values the program does not name"
    eager = to_numpy(program[found.node.name])
    found.tensors = {**_weights(traced.program, op), **program}
    verdict = nodes.judge(part, feeds, eager, tol, _ep(provider), found.node)
    found.cut, found.feeds, found.eager, found.verdict = part, feeds, eager, verdict
    if not verdict.reproduces:
        return verdict.owned_by
    loc.culprit = replace(loc.culprit, owner=verdict.owner, owned_by=verdict.owned_by,
                          reference=verdict.reference)
    return f"{verdict.owner.value if verdict.owner else 'unknown'}: {verdict.owned_by}"


def _repro(job: LocaliseJob, prep: _Prepared, result: CaseResult, sample: _Sample,
           tol: cmp.Tolerance, loc: Localisation) -> str:
    if not job.artifacts:
        return "skipped: no artifacts folder"
    folder = Path(job.artifacts) / repro.folder_name(result.id)
    names = prep.output_names
    repro.write(folder, _repro_case(job, result, tol), model=prep.model, inputs=sample.inputs,
                expected=dict(zip(names, sample.eager, strict=False)),
                got=dict(zip(names, sample.onnx, strict=False)))
    code, _ = repro.run_script(folder)
    notes = []
    if code == 1:
        loc.repro = str(folder)
        notes.append(str(folder))
    else:
        notes.append(f"the model-level repro exits {code}, not 1: not presented")
    notes.append(_node_repro(job, result, sample, tol, loc, folder / "node"))
    return "; ".join(notes)


def _node_repro(job: LocaliseJob, result: CaseResult, sample: _Sample, tol: cmp.Tolerance,
                loc: Localisation, folder: Path) -> str:
    """The culprit's nodes alone; kept only when it reproduces (exit 1)."""
    found = sample.found
    if loc.culprit is not None and loc.culprit.owner is Owner.CAPTURE:
        remove(folder)
        return "the culprit exists only in the torch.export program: the model-level repro " \
               "is the narrowest"
    if found is None or found.cut is None or found.eager is None or found.feeds is None \
            or found.verdict is None:
        remove(folder)
        return "no node-level repro (no culprit's nodes to cut out)"
    call = None
    args: dict[str, np.ndarray] = {}
    plain = all(a.dtype.kind in "biufc" and a.dtype.name != "bfloat16"
                for a in (*found.feeds.values(), found.eager))
    if plain:
        made = nodes.eager_call(found.node, found.tensors)
        if made is not None:
            call, used = made
            args = {n: to_numpy(t) for n, t in used.items()}
    repro.write_node(folder, _repro_case(job, result, tol), repro.NodeParts(
        scope=loc.culprit.scope if loc.culprit else "",
        aten=loc.culprit.aten if loc.culprit else "", model=found.cut.model,
        feeds=found.feeds, output=found.cut.output, eager=found.eager,
        reference=found.verdict.ref, call=call, args=args, got=found.verdict.onnx))
    code, printed = repro.run_script(folder)
    if code == 1:
        loc.node_repro = str(folder)
        return f"node-level repro in {folder}"
    remove(folder)
    return (f"the node-level repro exits {code}, not 1 ({first_line(printed) or 'no output'}): "
            "not presented; the model-level repro stands")


def _repro_case(job: LocaliseJob, result: CaseResult, tol: cmp.Tolerance) -> repro.ReproCase:
    """The case both repros re-check, on the case's own execution provider."""
    return repro.ReproCase(result.id, tol.atol, tol.rtol, [_ep(result.key.provider)],
                           job.version)


def _ep(provider: str) -> str:
    from parity_gate.plan.providers import EXECUTION_PROVIDERS

    return EXECUTION_PROVIDERS[provider]
