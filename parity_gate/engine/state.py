"""A worker's state for one job: the module in one dtype, its eager references, and the
per-job context every step reports through; with the small rules the steps share
(tolerances, output specs, the export batch). Worker side only (numpy, no torch import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity_gate import compare as cmp
from parity_gate.engine.binding import Binding
from parity_gate.engine.cached import WorkerCache
from parity_gate.engine.exporting import ExportedModel
from parity_gate.engine.protocol import CaseStream
from parity_gate.hazards.run import merge as merge_hazards
from parity_gate.model.findings import Finding
from parity_gate.model.hazards import Hazard
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, Provenance
from parity_gate.plan.cases import ModuleJob

# Dtypes whose eager run is not a trustworthy reference on its own: judged against float64.
LOW_PRECISION = ("float16", "bfloat16")


# Every float dtype below float64 has its mismatches judged against a float64 run.
JUDGED = ("float32", *LOW_PRECISION)


@dataclass
class EagerRef:
    """Eager outputs of one (fixture, batch) across samples, or why there are none;
    `truth`: the float64 run of the same inputs, made on the first mismatch only."""

    inputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    outputs: list[list[np.ndarray]] = field(default_factory=list)
    error: CaseResult | None = None
    eager_s: float = 0.0
    names: list[str] = field(default_factory=list)
    truth: list[list[np.ndarray]] | None = None
    truth_error: str = ""
    out_of_range: str | None = None  # referee.range_disagreement's answer, once asked


@dataclass
class TypedModule:
    """One module in one dtype, and what follow-up checks create from it once."""

    typed: Any
    binding: Binding
    dtype: str
    device: str
    source: Any  # the module before casting (float64 copies are made from it)
    float64: Any = None
    unoptimized: dict[str, Any] = field(default_factory=dict)  # provider -> session / error
    plain: ExportedModel | None = None  # the optimize: false export, when one was made
    handed: bool = False                # its exports left for localisation (hand_off_exports)


class JobContext(CaseStream):
    """Per-job state shared by the steps below."""

    job: ModuleJob
    training: tuple[str, ...] = ()    # submodules in training mode, read before .eval()
    hazards: list[Hazard] | None = None
    cache: WorkerCache | None = None  # the export cache, when the run has one
    probe_sets: frozenset[str] = frozenset()  # fixture ids `shapes: auto` added to the job
    # While a dtype's cases run on a reused ONNX translation, a failing result is held
    # back (its key stays pending) and re-checked on a fresh translation (module_worker).
    on_reused: bool = False
    suspects: tuple[CaseKey, ...] = ()
    build_s: float = 0.0  # the factory's time (reported with the export's, per case)

    def holds(self, result: CaseResult) -> bool:
        """Whether `result` is a failure on a reused translation (held, not reported)."""
        return self.on_reused and result.failed and (
            result.key in self.pending or (bool(result.probe) and result.key not in self.probed))

    def result(self, result: CaseResult) -> None:
        if self.holds(result):
            self.suspects = (*self.suspects, result.key)
            return
        super().result(result)

    def hazard(self, found: list[Hazard]) -> None:
        self.hazards = [*(self.hazards or []), *found]

    def emit_hazards(self) -> None:
        """One finding per hazard, folded across dtypes, once the module is done."""
        for h in merge_hazards(self.hazards or []):
            severity = "error" if h.blocks else "warning"  # an error annotation blocks
            self.finding(Finding(self.job.name, h.rule, h.describe(), severity, hazard=h))

    def fail_all(self, keys: list[CaseKey], outcome: Outcome, reason: str, detail: str = "",
                 **extra: Any) -> None:
        for key in list(keys):
            self.result(CaseResult(key, outcome, reason=reason, detail=detail, **extra))

    def note(self, kind: str, message: str, severity: str = "warning") -> None:
        self.finding(Finding(self.job.name, kind, message, severity))

    def provenance(self, device: str, exported: ExportedModel | None = None,
                   cached: bool = False) -> Provenance:
        """What ran for this job's cases: recorded on every result, failed ones included."""
        export = self.job.export
        return Provenance(
            exporter=export.exporter or "", export_options=export.model_dump(exclude_none=True),
            opset=exported.opset if exported else None,
            ir_version=exported.ir_version if exported else None,
            seed=self.job.seed, reference_device=device, export_cached=cached)


def output_spec(job: ModuleJob, name: str) -> Any:
    return next((o for o in job.module.outputs or [] if o.name == name), None)


def contract(job: ModuleJob, dtype: str, output: str) -> bool:
    """The manifest set this tolerance itself (defaults, module, or the output's own)."""
    spec = output_spec(job, output)
    own = spec is not None and dtype in {str(d) for d in (spec.tolerances or {})}
    return own or dtype in job.contract_dtypes


def tolerance_for(job: ModuleJob, dtype: str, spec: Any) -> cmp.Tolerance:
    table: dict[str, Any] = {str(k): v for k, v in (job.settings.tolerances or {}).items()}
    if spec is not None and spec.tolerances:
        table.update(spec.tolerances)
    tol = table.get(dtype) or table["float32"]
    return cmp.Tolerance(atol=tol.atol, rtol=tol.rtol)


def stack(arrays: list[np.ndarray]) -> np.ndarray | None:
    """Samples side by side on a new leading axis, so index[0] names the sample."""
    first = arrays[0]
    if all(a.shape == first.shape and a.dtype == first.dtype for a in arrays):
        return np.stack(arrays) if len(arrays) > 1 else first[None]
    return None


def choose_export_batch(configured: int | None, batch_sizes: list[int]) -> int:
    if configured:
        return configured
    return min((b for b in batch_sizes if b >= 2), default=2)
