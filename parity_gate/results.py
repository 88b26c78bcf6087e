"""The result model every later stage reads: case → comparison → outcome → run.

Reports, the gate, shard merging and GitHub integration are functions of a
`RunResult` (or of its JSON form) and never re-run anything, so this module is
the contract between the worker side and everything after it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from parity_gate.compare import Comparison
from parity_gate.outcomes import Outcome

SCHEMA_VERSION = 1


@dataclass(frozen=True, order=True)
class CaseKey:
    """One (module, dtype, fixture set, batch size, provider) combination."""

    module: str
    dtype: str
    fixture: str
    batch_size: int
    provider: str

    @property
    def id(self) -> str:
        """Stable id that baselines, merges and `--compare-to` key on."""
        return f"{self.module}/{self.junit_name}"

    @property
    def junit_name(self) -> str:
        # Op-sweep cases have no batch size (batch_size < 0) and leave it out.
        batch = f"/b{self.batch_size}" if self.batch_size >= 0 else ""
        return f"{self.dtype}/{self.fixture}{batch}/{self.provider}"


@dataclass
class CaseResult:
    """What happened to one case, with the evidence a reviewer needs."""

    key: CaseKey
    outcome: Outcome
    reason: str = ""
    detail: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    exporter: str = ""
    reference_device: str = "cpu"
    samples: int = 0
    # Open slot for later stages (op sweep, localisation, hazards) to attach
    # their own JSON-able records without changing this class.
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.key.id

    @property
    def failed(self) -> bool:
        return self.outcome.failed

    def worst(self) -> Comparison | None:
        """The comparison that failed worst (or the largest error if all passed)."""
        if not self.comparisons:
            return None
        failing = [c for c in self.comparisons if not c.passed]
        pool = failing or self.comparisons
        return max(pool, key=lambda c: _finite_or_inf(c.max_abs))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, **asdict(self.key)}
        d.update(
            outcome=self.outcome.value,
            reason=self.reason,
            detail=self.detail,
            exporter=self.exporter,
            reference_device=self.reference_device,
            samples=self.samples,
            comparisons=[c.to_dict() for c in self.comparisons],
            timings={k: round(v, 6) for k, v in self.timings.items()},
        )
        if self.meta:
            d["meta"] = self.meta
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaseResult:
        key = CaseKey(d["module"], d["dtype"], d["fixture"], int(d["batch_size"]), d["provider"])
        return cls(
            key=key,
            outcome=Outcome(d["outcome"]),
            reason=d.get("reason", ""),
            detail=d.get("detail", ""),
            comparisons=[Comparison.from_dict(c) for c in d.get("comparisons", [])],
            timings=dict(d.get("timings", {})),
            exporter=d.get("exporter", ""),
            reference_device=d.get("reference_device", "cpu"),
            samples=int(d.get("samples", 0)),
            meta=dict(d.get("meta", {})),
        )


@dataclass(frozen=True)
class Finding:
    """A module-level observation that is not a case outcome (training mode, baked dims)."""

    module: str
    kind: str
    message: str
    severity: str = "warning"  # "warning" | "error"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(d["module"], d["kind"], d["message"], d.get("severity", "warning"))


@dataclass
class RunResult:
    """All cases of one run plus the environment they ran in."""

    cases: list[CaseResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    tool_version: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    interrupted: bool = False
    shard: str | None = None

    def skip_reasons(self) -> dict[str, int]:
        return skip_reasons(self.cases)

    def counts(self) -> dict[str, int]:
        c = Counter(r.outcome.value for r in self.cases)
        return {o.value: c.get(o.value, 0) for o in Outcome if c.get(o.value)}

    @property
    def failures(self) -> list[CaseResult]:
        return sorted(
            (r for r in self.cases if r.failed),
            key=lambda r: (-r.outcome.severity, r.id),
        )

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self, gate: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "parity-gate", "version": self.tool_version},
            "verdict": "pass" if self.passed else "fail",
            "gate": gate or {},
            "counts": self.counts(),
            "total": len(self.cases),
            "interrupted": self.interrupted,
            "shard": self.shard,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "manifest": self.manifest,
            "versions": self.versions,
            "findings": [f.to_dict() for f in self.findings],
            "cases": [r.to_dict() for r in sorted(self.cases, key=lambda r: r.key)],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        return cls(
            cases=[CaseResult.from_dict(c) for c in d.get("cases", [])],
            findings=[Finding.from_dict(f) for f in d.get("findings", [])],
            versions=dict(d.get("versions", {})),
            manifest=dict(d.get("manifest", {})),
            tool_version=d.get("tool", {}).get("version", ""),
            started_at=d.get("started_at", ""),
            duration_s=float(d.get("duration_s", 0.0)),
            interrupted=bool(d.get("interrupted", False)),
            shard=d.get("shard"),
        )


def skip_reasons(cases: list[CaseResult]) -> dict[str, int]:
    """How many cases were skipped for each distinct reason, in first-seen order."""
    return dict(Counter(c.reason for c in cases if c.outcome is Outcome.SKIPPED))


def _finite_or_inf(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.inf
    return math.inf if math.isnan(v) else v
