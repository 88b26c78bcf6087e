"""What a worker and the pool say to each other: typed messages, no torch.

A job is data (what to run, its planned cases, its deadline) plus `entry`,
the dotted name of the function a worker calls with it, so the pool never
imports the code it runs and no module imports the pool's caller back.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from parity_gate.model.findings import Finding, Stage, Step
from parity_gate.model.keys import CaseKey
from parity_gate.model.results import CaseResult


class Job(Protocol):
    """A picklable unit a worker runs (a module, or a batch of ops) and its cases."""

    @property
    def name(self) -> str: ...

    @property
    def entry(self) -> str:
        """`package.module:function`, called in the worker as function(job, emit)."""
        ...

    @property
    def cases(self) -> list[CaseKey]: ...

    @property
    def timeout_s(self) -> float: ...


@dataclass(frozen=True)
class Ready:
    """The worker imported its stack and waits for jobs."""

    pid: int


@dataclass(frozen=True)
class Fatal:
    """The worker could not start (its imports failed)."""

    traceback: str


@dataclass(frozen=True)
class Done:
    """The worker finished the job named."""

    job: str


Message = Ready | Fatal | Done | Step | CaseResult | Finding
Emit = Callable[[Message], None]


def entry_point(job: Job) -> Callable[[Any, Emit], None]:
    module, _, name = job.entry.partition(":")
    fn: Callable[[Any, Emit], None] = getattr(importlib.import_module(module), name)
    return fn


class CaseStream:
    """Worker side: each planned case is reported exactly once, as it ends.

    The pool turns whatever is still pending when a worker dies into
    crash/timeout results, so reporting each case the moment it is known is
    what keeps a crash from losing finished work.
    """

    def __init__(self, job: Any, emit: Emit) -> None:
        self.job = job
        self.emit = emit
        self.pending: list[CaseKey] = list(job.cases)

    def step(self, stage: Stage, subject: str = "", detail: str = "") -> None:
        self.emit(Step(stage, subject, detail))

    def result(self, result: CaseResult) -> None:
        if result.key in self.pending:
            self.pending.remove(result.key)
            self.emit(result)

    def finding(self, finding: Finding) -> None:
        self.emit(finding)
