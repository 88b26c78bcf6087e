"""The gate decision: which results block the merge, and the exit code."""

from __future__ import annotations

from dataclasses import dataclass, field

from parity_gate.errors import EXIT_FAIL, EXIT_PASS
from parity_gate.results import CaseResult, RunResult

FAIL_ON = ("any-failure", "never")


@dataclass
class GateDecision:
    """What blocks, and why; later extended by the baseline (known/fixed/stale)."""

    blocking: list[CaseResult] = field(default_factory=list)
    fail_on: str = "any-failure"

    @property
    def passed(self) -> bool:
        return not self.blocking or self.fail_on == "never"

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_FAIL

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "fail_on": self.fail_on,
            "blocking": [r.id for r in self.blocking],
        }


def decide(run: RunResult, fail_on: str = "any-failure") -> GateDecision:
    return GateDecision(blocking=run.failures, fail_on=fail_on)
