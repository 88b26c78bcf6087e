"""Generation parity: N greedy steps in eager and in ONNX Runtime, step by step.

One `Generation` per generation case (module, dtype, prompt, batch, provider): the
token sequences, where they first part and why (a defect, or a tie in eager's own
logits after which the sequences may part legitimately), and the logits error of
every step both sides ran on the same tokens.
"""

from __future__ import annotations

from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Real, Record


@dataclass(frozen=True, config=CONFIG)
class GenerationStep(Record):
    """One step: its past length, the worst logits error against the tolerance, and
    whether the next tokens agree (`tie`: they differ, within eager's rounding)."""

    step: int                 # 1 = the prompt's prefill, 2 = the first cached decode
    past_length: int          # the cache length the step read
    max_abs: Real | None      # worst |onnx - eager| of this step's last-position logits
    needed_atol: Real | None  # the atol this step would need at the tolerance's rtol
    passed: bool              # logits within the tolerance
    tokens_agree: bool
    tie: bool = False         # tokens differ, but eager's top two are within rounding
    worst_row: int | None = None  # batch row of the worst error
    worst_token: int | None = None  # vocabulary index of the worst error
    # a failing step judged against a float64 run of the same tokens (compare.reference's
    # ruling): anything but onnx_worse/unverified says eager's own rounding is the gap
    ruling: str | None = None
    eager_error: Real | None = None  # atol each side needs against float64 (judged steps)
    onnx_error: Real | None = None

    @property
    def excused(self) -> bool:
        return self.ruling in ("onnx_exact", "onnx_rounding", "as_eager")

    @property
    def failed(self) -> bool:
        """Out of tolerance or a real flip, and not excused by the float64 run."""
        return (not self.passed or (not self.tokens_agree and not self.tie)) \
            and not self.excused


@dataclass(frozen=True, config=CONFIG)
class Generation(Record):
    """Eager's and ONNX Runtime's greedy sequences from one prompt, compared."""

    prompt: str               # the prompt's fixture set
    prompt_length: int
    batch_size: int
    steps: int                # steps asked for
    atol: Real
    rtol: Real
    eager_tokens: list[list[int]] = field(default_factory=list)  # [row][step]
    onnx_tokens: list[list[int]] = field(default_factory=list)
    per_step: list[GenerationStep] = field(default_factory=list)
    first_divergent_step: int | None = None  # first step whose next tokens differ
    divergent_row: int | None = None
    first_failing_step: int | None = None  # first step out of tolerance or a real flip
    parted_after_tie: bool = False  # they parted at a tie: later steps are not compared
    encoder_decoder: bool = False
    float64_error: str = ""  # why failing steps could not be judged against float64
    # ONNX Runtime raised at this step (its steps before were compared), with its message
    error_step: int | None = None
    error_past_length: int | None = None
    error: str = ""

    @property
    def passed(self) -> bool:
        """Every compared step within tolerance on the same tokens, and ONNX Runtime ran
        every step."""
        return self.first_failing_step is None and self.error_step is None

    @property
    def tokens(self) -> tuple[int, int] | None:
        """Eager's and ONNX Runtime's tokens where they first part (row `divergent_row`)."""
        step, row = self.first_divergent_step, self.divergent_row
        if step is None or row is None:
            return None
        return self.eager_tokens[row][step - 1], self.onnx_tokens[row][step - 1]

    def describe(self) -> str:
        """One line: where the two sides part and why."""
        text = self._describe()
        if self.error_step is None:
            return text
        where = (f"past length {self.error_past_length}" if self.error_step > 1
                 else "the prefill")
        raised = (f"ONNX Runtime raised at step {self.error_step} ({where}): "
                  f"{self.error}")
        if self.first_failing_step is not None:
            return f"{text}; then {raised}"
        done = self.error_step - 1
        return (f"{raised}; the {done} step(s) before it match eager" if done
                else raised)

    def _describe(self) -> str:
        if self.first_failing_step is not None:
            step = self.per_step[self.first_failing_step - 1]
            what = (f"logits off by {step.max_abs:.3g} (atol {self.atol:g}, rtol "
                    f"{self.rtol:g}) at row {step.worst_row}, token {step.worst_token}"
                    if not step.passed and step.max_abs is not None else "")
            pair = self.tokens
            flip = "" if step.tokens_agree else \
                f"greedy token differs at row {self.divergent_row}" + (
                    f" (eager {pair[0]}, ONNX Runtime {pair[1]})" if pair else "")
            judged = (f"float64 run: {step.ruling} (onnx needs atol>={step.onnx_error:.3g} "
                      f"against it, eager {step.eager_error:.3g})"
                      if step.ruling and step.onnx_error is not None
                      and step.eager_error is not None
                      else f"float64 run: {step.ruling}" if step.ruling
                      else self.float64_error)
            where = (f"past length {step.past_length}: the token at position "
                     f"{step.past_length}" if step.step > 1 else
                     f"the prefill of positions 0-{self.prompt_length - 1}")
            return (f"generation fails at step {step.step} ({where}): "
                    + "; ".join(t for t in (what, flip, judged) if t))
        worst = max((s.max_abs for s in self.per_step if s.max_abs is not None), default=0.0)
        excused = [s for s in self.per_step if s.excused]
        judged = (f"; step(s) {', '.join(str(s.step) for s in excused)} differ beyond the "
                  f"tolerance (worst {worst:.3g}), but a float64 run of the same tokens puts "
                  f"ONNX Runtime as close as eager ({excused[0].ruling}): eager's own "
                  "rounding" if excused else "")
        if self.parted_after_tie:
            return (f"{self.steps} greedy steps: the sequences part at step "
                    f"{self.first_divergent_step} on a tie (eager's top two logits within "
                    "rounding, or a flip float64 excuses), legitimately; later steps are not "
                    f"compared{judged}")
        if excused:
            return f"{self.steps} greedy steps: the same tokens{judged}"
        return (f"{self.steps} greedy steps: the same tokens, every step's logits within "
                f"tolerance (worst {worst:.3g})")
