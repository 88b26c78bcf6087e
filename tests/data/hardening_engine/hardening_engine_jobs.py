"""A job for the pool tests that reports none of its cases and returns normally."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from parity_gate.model.findings import Stage, Step
from parity_gate.model.keys import CaseKey


@dataclass
class SilentJob:
    name: str
    cases: list[CaseKey] = field(default_factory=list)
    timeout_s: float = 60.0
    entry: str = "hardening_engine_jobs:report_nothing"


def report_nothing(job: SilentJob, emit: Any) -> None:
    emit(Step(Stage.RUNNING, job.name))
