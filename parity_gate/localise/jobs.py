"""A localisation job: data only, so the gate's process can plan one without importing
torch (the worker that runs it, `parity_gate.localise.worker`, does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from parity_gate.model.keys import CaseKey
from parity_gate.model.localisation import Check
from parity_gate.model.results import CaseResult
from parity_gate.plan.cases import ModuleJob


@dataclass
class LocaliseJob:
    """Follow-up checks for the failing cases of one module and dtype (data, like ModuleJob)."""

    module: ModuleJob
    dtype: str
    failing: list[CaseResult]
    expensive: list[str] = field(default_factory=list)  # case ids that get layer/op/repro
    artifacts: str | None = None                        # folder for repro folders
    step_timeout_s: float = 120.0
    version: str = ""       # parity-gate's, for the repro script
    version_line: str = ""  # "onnxscript 0.7.2, torch 2.13.0", for the known-op sentence
    handoff: str | None = None  # the pool's folder: the run's exports (engine.cache.hand_off)
    entry: ClassVar[str] = "parity_gate.localise.worker:run"

    @property
    def name(self) -> str:
        return f"{self.module.name} (localise {self.dtype})"

    @property
    def cases(self) -> list[CaseKey]:
        return [r.key for r in self.failing]

    @property
    def timeout_s(self) -> float:
        """Building and exporting, then every check of every case at its own limit."""
        checks = len(Check) * len(self.failing)
        return self.module.timeout_s + self.step_timeout_s * checks
