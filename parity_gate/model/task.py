"""A task-metric case's record: the metric on both sides of a labelled slice, the paired
delta with its interval, the discordant samples and the verdict (compare.task)."""

from __future__ import annotations

from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Real, Record

FLIPPED_IDS = 200  # sample ids kept per case (the counts are always whole)


@dataclass(frozen=True, config=CONFIG)
class ClassFlips(Record):
    """One true class's discordant samples."""

    label: int
    eager_only: int  # eager right, ONNX wrong
    onnx_only: int   # ONNX right, eager wrong


@dataclass(frozen=True, config=CONFIG)
class TaskResult(Record):
    metric: str
    samples: int
    eager: Real
    onnx: Real
    delta: Real                # onnx - eager (points for accuracy and F1)
    low: Real                  # the delta's paired bootstrap interval
    high: Real
    level: Real
    budget: Real               # the manifest's max_drop
    verdict: str               # pass | drop | inconclusive
    eager_only: int = 0
    onnx_only: int = 0
    p_value: Real | None = None  # exact McNemar (accuracy-like metrics)
    flips: list[ClassFlips] = field(default_factory=list)
    flipped: list[int] = field(default_factory=list)  # sample ids (first FLIPPED_IDS)
    settle: int | None = None  # inconclusive: about how many samples would settle it
    summary: str = ""          # the verdict in words (compare.task.Stats.describe)
