"""The unit a worker runs: a batch of op cases, exported as one module.

Picklable and torch-free: variants travel as ids plus the catalogue modules
that define them (`sources`), so test-only catalogues work in a worker too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from parity_gate.ops.records import variant_case_id
from parity_gate.results import CaseKey

DEFAULT_SOURCES: tuple[str, ...] = ("parity_gate.ops.catalogue:VARIANTS",)


@dataclass(frozen=True, order=True)
class Unit:
    """One (variant, dtype, input class): one eager run, one slot in the batch module."""

    variant: str
    dtype: str
    input_class: str

    def key(self, provider: str) -> CaseKey:
        return CaseKey(variant_case_id(self.variant), self.dtype, self.input_class, -1, provider)


@dataclass
class OpBatchJob:
    """Many units in one export; `timeout_s` covers the batch and the isolation of failures."""

    name: str
    units: list[Unit]
    providers: list[str] = field(default_factory=lambda: ["cpu"])
    sources: tuple[str, ...] = DEFAULT_SOURCES
    seed: int = 0
    timeout: float = 600.0
    generation: int = 0  # how many crash re-splits produced this job

    @property
    def cases(self) -> list[CaseKey]:
        return [u.key(p) for u in self.units for p in self.providers]

    @property
    def timeout_s(self) -> float:
        return self.timeout

    def execute(self, emit: Callable[[str, Any], None]) -> None:
        from parity_gate.ops.worker import run_batch

        run_batch(self, emit)
