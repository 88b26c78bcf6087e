"""The unit a worker runs: a batch of op cases, exported as one module.

Picklable and torch-free data: variants travel as ids plus the catalogue
modules that define them (`sources`), so test-only catalogues work in a
worker too. The code that runs a job is named by `entry` and resolved by the
pool inside the worker; this module never imports it (no jobs ↔ worker cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from parity_gate.model.keys import CaseKey
from parity_gate.ops.records import variant_case_id

DEFAULT_SOURCES: tuple[str, ...] = ("parity_gate.ops.catalogue:VARIANTS",)
# `parity-gate ops --source NAME`: the hand-written catalogue, and PyTorch's OpInfo samples
# (built per torch version; ops/opinfo.py). OpInfo records carry the dtypes eager accepts.
SOURCES: dict[str, str] = {"catalogue": DEFAULT_SOURCES[0],
                           "opinfo": "parity_gate.ops.opinfo:VARIANTS"}
MEASURED_SOURCES = frozenset({SOURCES["opinfo"]})


def source_of(case_id: str) -> str:
    """Which source a case id (or baseline entry) belongs to: OpInfo variants are `oi.*`."""
    return SOURCES["opinfo" if case_id.startswith(variant_case_id("oi.")) else "catalogue"]


@dataclass(frozen=True, order=True)
class Unit:
    """One (variant, dtype, input class): one eager run, one slot in the batch module."""

    variant: str
    dtype: str
    input_class: str

    def key(self, provider: str) -> CaseKey:
        return CaseKey(variant_case_id(self.variant), self.dtype, self.input_class, None,
                       provider)


@dataclass
class OpBatchJob:
    """Many units in one export; `timeout_s` covers the batch and the isolation of failures."""

    entry: ClassVar[str] = "parity_gate.ops.worker:run_batch"  # called as run_batch(job, emit)

    name: str
    units: list[Unit]
    providers: list[str] = field(default_factory=lambda: ["cpu"])
    sources: tuple[str, ...] = DEFAULT_SOURCES
    seed: int = 0
    timeout: float = 600.0
    generation: int = 0  # how many crash re-splits produced this job
    # Variants whose export failed in an earlier job of the run (the parent fills this in
    # before the job is sent): the worker exports them apart from the big batch, so a
    # failure seen once costs a small retry, not one of the whole batch.
    suspects: frozenset[str] = frozenset()

    @property
    def cases(self) -> list[CaseKey]:
        return [u.key(p) for u in self.units for p in self.providers]

    @property
    def timeout_s(self) -> float:
        return self.timeout
