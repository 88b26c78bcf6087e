"""Pure comparisons of one greedy generation in eager and in ONNX Runtime.

A step compares the logits both sides computed for the next token, on the same
tokens so far, against the output's tolerance, and the greedy token each picks.
A different token where eager's (and ONNX's) top two logits lie within the dtype's
rounding is a tie, not a failure (the top-1 rule of `compare.decide`); from then
on the sequences may part legitimately and no later step is compared. A failing step
of a low-precision run is judged against float64 logits of the same tokens, as a failing
case is: it stands only when ONNX Runtime is clearly further from float64 than eager.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from parity_gate.compare.decide import top1_agreement
from parity_gate.compare.reference import OutputRules, judge_against_float64
from parity_gate.model.comparison import Tolerance
from parity_gate.model.generation import Generation, GenerationStep


def compare_step(step: int, past_length: int, eager: np.ndarray, onnx: np.ndarray,
                 tol: Tolerance, dtype: str) -> GenerationStep:
    """Step `step`'s next-token logits ([batch, vocab] on each side) compared."""
    ref = eager.astype(np.float64)
    got = onnx.astype(np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(got - ref)
        bad_nan = np.isnan(ref) != np.isnan(got)
        diff = np.where(np.isnan(ref) & np.isnan(got), 0.0, diff)
        diff = np.where(bad_nan, np.inf, diff)
        excess = diff - tol.rtol * np.abs(ref)
    flat = int(np.nanargmax(excess)) if excess.size else 0
    row, token = np.unravel_index(flat, excess.shape) if excess.size else (0, 0)
    passed = bool(np.all(excess <= tol.atol)) if excess.size else True
    top = top1_agreement(eager, onnx, dtype)
    agree = top.flips == 0 and top.ties == 0
    return GenerationStep(
        step=step, past_length=past_length,
        max_abs=float(np.max(diff)) if diff.size else 0.0,
        needed_atol=max(float(np.max(excess)), 0.0) if excess.size else 0.0,
        passed=passed, tokens_agree=agree, tie=top.flips == 0 and top.ties > 0,
        worst_row=int(row), worst_token=int(token))


@dataclass(frozen=True)
class Setup:
    """What one generation case ran, the same for both sides: the prompt's fixture set
    and length, the steps asked for, the logits' tolerance, and whether an encoder ran
    first (its decoder then starts from one token)."""

    prompt: str
    prompt_length: int
    steps: int
    tol: Tolerance
    encoder_decoder: bool = False


def judge(setup: Setup, eager_tokens: list[list[int]], onnx_tokens: list[list[int]],
          per_step: list[GenerationStep], float64_error: str = "") -> Generation:
    """The generation's verdict from its compared steps (those run on the same tokens)."""
    first_fail = next((s.step for s in per_step if s.failed), None)
    diverged = next((s for s in per_step if not s.tokens_agree), None)
    row = None
    if diverged is not None:
        i = diverged.step - 1
        row = next((r for r, (a, b) in enumerate(zip(eager_tokens, onnx_tokens, strict=True))
                    if i < len(a) and i < len(b) and a[i] != b[i]), None)
    return Generation(
        prompt=setup.prompt, prompt_length=setup.prompt_length, batch_size=len(eager_tokens),
        steps=setup.steps, atol=setup.tol.atol, rtol=setup.tol.rtol, eager_tokens=eager_tokens,
        onnx_tokens=onnx_tokens, per_step=per_step,
        first_divergent_step=diverged.step if diverged is not None else None,
        divergent_row=row, first_failing_step=first_fail,
        parted_after_tie=first_fail is None and diverged is not None,
        encoder_decoder=setup.encoder_decoder, float64_error=float64_error)


def rule_step(step: GenerationStep, eager: np.ndarray, onnx: np.ndarray, truth: np.ndarray,
              tol: Tolerance) -> GenerationStep:
    """A failing step judged as a failing case is (`compare.reference`): against float64
    logits of the same tokens, the step stands only when ONNX is clearly further off."""
    ref = judge_against_float64([eager], [onnx], [truth], OutputRules(["logits"], [tol], [True]),
                                [0])
    return replace(step, ruling=ref.ruling.value, eager_error=ref.eager_error,
                   onnx_error=ref.onnx_error)
