"""Generation parity: N greedy steps in eager and in ONNX Runtime from one prompt.

Eager runs the model itself with its own cache object carried from step to step (what
`generate` does); ONNX Runtime runs the exported step graph, each step's present cache
fed back as the next step's past. Each side picks its own greedy tokens; a step is
compared while both have produced the same tokens so far (`compare.generation`).
An encoder-decoder's encoder runs once, in eager, and both sides decode from its states.
Worker-side only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from parity_gate.compare.generation import Setup, compare_step, judge
from parity_gate.engine import stages
from parity_gate.engine.fixtures import Draw, generate
from parity_gate.engine.kvcache import Layout, build_cache, returned_cache
from parity_gate.engine.tensors import to_numpy, to_torch
from parity_gate.model.comparison import Tolerance
from parity_gate.model.generation import Generation, GenerationStep


@dataclass
class Prompt:
    """The prompt's tensors: a decoder's `input_ids`, or an encoder's inputs."""

    name: str
    inputs: dict[str, np.ndarray]


def prompt_inputs(job: Any, fixture_id: str, batch: int, dtype: str) -> Prompt:
    fixture = job.fixtures[fixture_id]
    names = list(getattr(fixture, "inputs", None) or getattr(fixture, "keys", None)
                 or ["input_ids"])
    return Prompt(fixture_id.split("@", 1)[0],
                  generate(fixture_id, fixture, names, Draw(batch, dtype), seed=job.seed,
                           base_dir=job.base_dir))


@dataclass
class Run:
    """One side's greedy run: its tokens per row and next-token logits per step."""

    tokens: list[list[int]]
    logits: list[np.ndarray]
    failure: Any = None  # a StageFailure that ended the run early: at step len(logits) + 1


@dataclass
class Trial:
    """One generation case's two runs on one prompt (and the encoder's states, for an
    encoder-decoder): what the comparison and the float64 ruling read."""

    prompt: Prompt
    eager: Run
    onnx: Run
    encoder: np.ndarray | None = None


def eager_greedy(model: Any, lay: Layout, prompt: Prompt, steps: int, device: str,
                 forced: list[list[int]] | None = None, states: np.ndarray | None = None
                 ) -> Run:
    """`steps` greedy steps of the model itself, its cache object carried along; with
    `forced` ([row][step]) it takes those tokens instead of its own (the float64 run of
    the tokens both sides chose), with `states` those encoder states instead of its own."""
    import torch

    inputs = {k: to_torch(v, device) for k, v in prompt.inputs.items()}
    tokens: list[list[int]] = []
    logits: list[np.ndarray] = []
    with torch.inference_mode():
        if lay.kind == "encoder_decoder":
            enc = (to_torch(states, device).to(model.dtype) if states is not None
                   else model.get_encoder()(**inputs).last_hidden_state)
            batch = enc.shape[0]
            ids = torch.full((batch, 1), lay.start_token, dtype=torch.int64, device=device)
            extra = {"attention_mask": inputs["attention_mask"]} \
                if "attention_mask" in inputs else {}
        else:
            ids = inputs["input_ids"]
            batch = ids.shape[0]
            enc, extra = None, {}
        cache = build_cache(model, lay, [torch.zeros(lay.past_shape(n, batch, 0),
                                                     dtype=model.dtype, device=device)
                                         for n in lay.past_names])
        seen = ids.shape[1]
        for step in range(steps):
            out = _decode(model, lay, ids, cache, seen, (enc, extra), device)
            cache = returned_cache(out)
            last = out.logits[:, -1]
            logits.append(to_numpy(last))
            ids = last.argmax(-1, keepdim=True) if forced is None else torch.tensor(
                [[row[step]] for row in forced], dtype=torch.int64, device=device)
            tokens.append([int(t) for t in ids[:, 0]])
            seen += 1
    return Run([list(row) for row in zip(*tokens, strict=True)], logits)


def _decode(model: Any, lay: Layout, ids: Any, cache: Any, seen: int,
            encoder: tuple[Any, dict[str, Any]], device: str) -> Any:
    """One forward of the model on `ids` with its cache: an encoder-decoder's decoder on the
    encoder's states (`encoder`: the states and the mask), a decoder with its mask over the
    `seen` positions."""
    import torch

    enc, extra = encoder
    if lay.kind == "encoder_decoder":
        return model(encoder_outputs=(enc,), decoder_input_ids=ids, use_cache=True,
                     **extra, **{lay.arg: cache})
    mask = {lay.mask: torch.ones(ids.shape[0], seen, dtype=torch.int64, device=device)} \
        if lay.mask else {}
    return model(input_ids=ids, use_cache=True, **mask, **{lay.arg: cache})


def step_inputs(model: Any, lay: Layout, prompt: Prompt, tokens: list[list[int]], step: int,
                device: str, dtype: Any) -> dict[str, np.ndarray]:
    """The cached step module's inputs at generation step `step` (1: the prefill) as eager
    reaches it on `tokens` ([row][step], the tokens both sides chose): that step's new
    tokens, the mask over past and new, and eager's own cache after the steps before, so
    the step that first diverged can be rerun, localised and reproduced alone."""
    import torch

    inputs = {k: to_torch(v, device) for k, v in prompt.inputs.items()}
    feeds: dict[str, Any] = {}
    with torch.inference_mode():
        if lay.kind == "encoder_decoder":
            enc = model.get_encoder()(**inputs).last_hidden_state
            batch = enc.shape[0]
            ids = torch.full((batch, 1), lay.start_token, dtype=torch.int64, device=device)
            feeds["encoder_hidden_states"] = enc
            extra = {"attention_mask": inputs["attention_mask"]} \
                if "attention_mask" in inputs else {}
            name = "decoder_input_ids"
        else:
            ids = inputs["input_ids"]
            batch = ids.shape[0]
            enc, extra, name = None, {}, "input_ids"
        cache = build_cache(model, lay, [torch.zeros(lay.past_shape(n, batch, 0),
                                                     dtype=model.dtype, device=device)
                                         for n in lay.past_names])
        seen = ids.shape[1]
        for s in range(step - 1):
            out = _decode(model, lay, ids, cache, seen, (enc, extra), device)
            cache = returned_cache(out)
            ids = torch.tensor([[row[s]] for row in tokens], dtype=torch.int64, device=device)
            seen += 1
        feeds[name] = ids
        if lay.mask is not None and lay.kind == "decoder":
            feeds[lay.mask] = torch.ones(batch, seen, dtype=torch.int64, device=device)
        own = getattr(cache, "self_attention_cache", cache)
        for i in range(lay.layers):
            feeds[f"past_{i}_key"] = own.layers[i].keys
            feeds[f"past_{i}_value"] = own.layers[i].values
    return {k: to_numpy(v) if k in ("input_ids", "decoder_input_ids") or k == lay.mask
            else to_numpy(v).astype(dtype) for k, v in feeds.items()}


def float64_steps(source: Any, lay: Layout, trial: Trial, gen: Generation, tol: Tolerance,
                  device: str) -> Generation:
    """The generation with its failing steps judged against a float64 run of the same
    weights on the same tokens (and the same encoder states)."""
    import copy

    import torch

    from parity_gate.compare.generation import rule_step

    compared = len(gen.per_step)
    states = trial.encoder
    try:
        wide = copy.deepcopy(source).to(torch.float64).to(device).eval()
        truth = eager_greedy(wide, lay, trial.prompt, compared, device,
                             forced=[row[:compared] for row in trial.eager.tokens],
                             states=states.astype(np.float64) if states is not None else None)
    except Exception as exc:  # e.g. an op with no float64 kernel: the steps stay as they are
        return replace(gen, float64_error=f"float64 run failed: {type(exc).__name__}: "
                       f"{str(exc)[:200]}")
    steps = [rule_step(s, trial.eager.logits[i], trial.onnx.logits[i], truth.logits[i], tol)
             if s.failed else s for i, s in enumerate(gen.per_step)]
    return judge(Setup(gen.prompt, gen.prompt_length, gen.steps, tol, gen.encoder_decoder),
                 gen.eager_tokens, gen.onnx_tokens, steps)


def encoder_states(model: Any, prompt: Prompt, device: str) -> np.ndarray:
    import torch

    with torch.inference_mode():
        enc = model.get_encoder()(**{k: to_torch(v, device) for k, v in prompt.inputs.items()})
    return to_numpy(enc.last_hidden_state)


def onnx_greedy(session: Any, lay: Layout, prompt: Prompt, steps: int, dtype: Any,
                encoder: np.ndarray | None) -> Run:
    """`steps` greedy steps of the exported graph, its present cache fed back as past."""
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    if encoder is not None:
        batch = encoder.shape[0]
        ids = np.full((batch, 1), lay.start_token, dtype=np.int64)
        fixed = {"encoder_hidden_states": encoder}
        if "attention_mask" in prompt.inputs:
            fixed["attention_mask"] = prompt.inputs["attention_mask"]
        ids_name = "decoder_input_ids"
    else:
        ids = prompt.inputs["input_ids"]
        batch = ids.shape[0]
        fixed = {}
        ids_name = "input_ids"
    past = {n: np.zeros(lay.past_shape(n, batch, 0), dtype=dtype) for n in lay.past_names}
    seen = ids.shape[1]
    tokens: list[list[int]] = []
    logits: list[np.ndarray] = []
    for _ in range(steps):
        feeds = {ids_name: ids, **fixed, **past}
        if lay.mask:
            feeds[lay.mask] = np.ones((batch, seen), dtype=np.int64)
        try:
            got = dict(zip(names, stages.run(session, {k: v for k, v in feeds.items()
                                                       if k in wanted}, label=""),
                           strict=True))
        except stages.StageFailure as failure:  # the steps before it are still compared
            return Run([list(row) for row in zip(*tokens, strict=True)] if tokens
                       else [[] for _ in range(batch)], logits, failure)
        last = got["logits"][:, -1]
        logits.append(last)
        ids = np.argmax(last.astype(np.float32), axis=-1)[:, None].astype(np.int64)
        tokens.append([int(t) for t in ids[:, 0]])
        past = {p: got[f"present.{p.split('_')[1]}.{p.split('_')[2]}"] for p in lay.past_names}
        seen += 1
    return Run([list(row) for row in zip(*tokens, strict=True)], logits)


def compare_runs(trial: Trial, prompt_length: int, steps: int, tol: Tolerance,
                 dtype: str) -> Generation:
    """Steps compared while both sides have chosen the same tokens so far."""
    eager, onnx = trial.eager, trial.onnx
    per_step: list[GenerationStep] = []
    for s in range(min(steps, len(eager.logits), len(onnx.logits))):
        result = compare_step(s + 1, prompt_length + s - 1 if s else 0, eager.logits[s],
                              onnx.logits[s], tol, dtype)
        per_step.append(result)
        if not result.tokens_agree:
            break  # the next step reads different tokens on the two sides
    return judge(Setup(trial.prompt.name, prompt_length, steps, tol,
                       trial.encoder is not None), eager.tokens, onnx.tokens, per_step)


def with_failure(gen: Generation, failure: Any, prompt_length: int) -> Generation:
    """The generation with the step at which ONNX Runtime raised, after the steps
    before it were compared (a divergence among those stays the verdict)."""
    if failure is None:
        return gen
    step = len(gen.onnx_tokens[0]) + 1 if gen.onnx_tokens else 1
    return replace(gen, error_step=step, error=failure.reason,
                   error_past_length=prompt_length + step - 2 if step > 1 else 0)


def outcome_of(gen: Generation, failure: Any) -> Any:
    """A divergence before an ONNX Runtime error is the verdict; else the error is."""
    from parity_gate.model.outcomes import Outcome

    if gen.first_failing_step is not None:
        return Outcome.MISMATCH
    return failure.outcome if failure is not None else Outcome.PASS


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


# The worker's hooks (module_worker calls these two; `ctx` is its per-job state).


def prepare(ctx: Any, module: Any) -> Any:
    """A module with a declared cache, behind its flat-tensor step (the job rewritten to
    feed it); None when the declaration is wrong (every case fails with the located
    problem, which is also a `declaration` finding: the run exits 2)."""
    from parity_gate.engine.kvcache import cached_module, layout, observed, rewrite, window_problems
    from parity_gate.model.outcomes import Outcome

    job = ctx.job
    lay, problems = layout(module, job.module)
    if lay is not None and not problems:
        lay = observed(module, lay)
        problems = window_problems(lay, job.module, type(module).__name__)
    if problems or lay is None:
        for text in problems:
            ctx.note("declaration", text, "error")
        ctx.fail_all(ctx.pending, Outcome.EAGER_ERROR, problems[0] if problems else
                     "cache: no layout", "\n".join(problems))
        return None
    ctx.job = rewrite(job, lay)
    return cached_module(module, lay, [i.name for i in job.module.inputs])


# Dtypes whose failing steps are judged against float64 (as module_worker's cases are).
JUDGED = ("float32", "float16", "bfloat16")


def run_cases(ctx: Any, mod: Any, exported: Any, cached: bool, keys: list[Any],
              open_session: Callable[..., Any]) -> None:
    """Every generation case of one dtype on the module's export, provider by provider.
    `open_session`: the worker's own (module_worker._open_session), so a crash while
    loading is replayed here as for any case."""
    provenance = ctx.provenance(mod.device, exported, cached)
    eager: dict[int, tuple[Prompt, Run, np.ndarray | None, float]] = {}
    for provider in dict.fromkeys(k.provider for k in keys):
        pkeys = [k for k in keys if k.provider == provider]
        opened = open_session(ctx, exported, mod.dtype, provider, pkeys, provenance)
        if opened is None:
            continue
        for key in pkeys:
            ctx.result(_run_case(ctx, mod, opened[0], key, eager, provenance))


def _run_case(ctx: Any, mod: Any, session: Any, key: Any,
              eager: dict[int, tuple[Prompt, Run, np.ndarray | None, float]],
              provenance: Any) -> Any:
    """One generation case: eager's greedy run (once per batch size, kept in `eager`),
    ONNX Runtime's on the same prompt, compared step by step; failing steps judged against
    float64 unless the logits' tolerance is the manifest's own contract."""
    import torch

    from parity_gate.engine.stages import StageFailure
    from parity_gate.engine.state import contract, output_spec, tolerance_for
    from parity_gate.model.findings import Stage
    from parity_gate.model.outcomes import Outcome
    from parity_gate.model.results import CaseResult

    job, spec = ctx.job, ctx.job.module.generation
    model, lay = mod.typed.model, mod.typed.layout
    tol = tolerance_for(job, mod.dtype, output_spec(job, "logits"))
    past_dtype = to_numpy(torch.zeros(1, dtype=getattr(torch, mod.dtype))).dtype
    ctx.step(Stage.RUNNING, key.id, f"{spec.steps} greedy steps")
    try:
        if key.batch_size not in eager:
            prompt = prompt_inputs(job, key.inputs, key.batch_size, mod.dtype)
            t0 = time.perf_counter()
            run = eager_greedy(model, lay, prompt, spec.steps, mod.device)
            enc = encoder_states(model, prompt, mod.device) \
                if lay.kind == "encoder_decoder" else None
            eager[key.batch_size] = (prompt, run, enc, time.perf_counter() - t0)
        prompt, ref, enc, eager_s = eager[key.batch_size]
        got, run_s = timed(onnx_greedy, session, lay, prompt, spec.steps, past_dtype, enc)
    except StageFailure as failure:
        return CaseResult(key, failure.outcome, failure.reason, failure.detail,
                          provenance=provenance)
    except Exception as exc:
        import traceback

        return CaseResult(key, Outcome.EAGER_ERROR,
                          f"generation failed: {type(exc).__name__}: {exc}"[:300],
                          traceback.format_exc()[-4000:], provenance=provenance)
    trial = Trial(prompt, ref, got, enc)
    length = 1 if enc is not None else prompt.inputs["input_ids"].shape[1]
    gen = compare_runs(trial, length, spec.steps, tol, mod.dtype)
    # the logits' tolerance the manifest set is a contract, which float64 never waives
    if not gen.passed and mod.dtype in JUDGED and not contract(job, mod.dtype, "logits"):
        ctx.step(Stage.RECHECKING, key.id, "against float64")
        gen = float64_steps(mod.source.model, lay, trial, gen, tol, mod.device)
    gen = with_failure(gen, got.failure, length)
    return CaseResult(key, outcome_of(gen, got.failure), gen.describe(),
                      got.failure.detail if got.failure is not None else "",
                      timings={"eager_s": eager_s, "run_s": run_s}, provenance=provenance,
                      samples=1, generation=gen)
