"""What the exporter's upstream already knows about a finding: typed, never parsed from text.

`OpRef` is the search input: the op a finding pins, from an op-sweep case
(`case.op.op`, `case.op.variant`) or, later, from localising a module failure.
`UpstreamReport` is one searched op with its best match (or none) and the case
ids it covers; `RunResult.upstream` holds them, one per op.
"""

from __future__ import annotations

import enum
from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Record

# Short names the wording uses: "onnxscript#123", "pytorch#456".
REPO_SHORT = {"microsoft/onnxscript": "onnxscript", "pytorch/pytorch": "pytorch"}


@dataclass(frozen=True, config=CONFIG)
class OpRef(Record):
    """The op a finding pins: its ATen overload and where that came from."""

    overload: str               # e.g. "aten.atan2.default"
    variant: str = ""           # the op-sweep variant id, e.g. "atan2" or "sum.dim"
    source: str = "ops"         # "ops" (op sweep) | "localised" (a module failure, issue 11)

    @property
    def name(self) -> str:
        """The op's own name: `aten.sum.dim_IntList` → `sum`, `aten::atan2` → `atan2`."""
        text = self.overload.replace("::", ".")
        parts = [p for p in text.split(".") if p]
        if parts and parts[0] in ("aten", "prims", "torch", "ops"):
            parts = parts[1:]
        return parts[0] if parts else text

    @property
    def key(self) -> str:
        return self.overload


class MatchKind(str, enum.Enum):
    """How far upstream got with it; the order is the ranking's (best first)."""

    OPEN_PR = "open_pr"
    MERGED_PR = "merged_pr"
    OPEN_ISSUE = "open_issue"
    CLOSED_ISSUE = "closed_issue"
    CLOSED_PR = "closed_pr"  # closed without merging


@dataclass(frozen=True, config=CONFIG)
class UpstreamMatch(Record):
    """One upstream issue or pull request a finding was matched to."""

    repo: str          # "microsoft/onnxscript"
    number: int
    title: str
    url: str
    kind: MatchKind
    updated_at: str = ""
    score: float = 0.0

    @property
    def ref(self) -> str:
        return f"{REPO_SHORT.get(self.repo, self.repo)}#{self.number}"


@dataclass(frozen=True, config=CONFIG)
class UpstreamReport(Record):
    """One op's upstream search: the best match, or why there is none."""

    op: OpRef
    cases: list[str] = field(default_factory=list)  # the failing case ids it covers
    match: UpstreamMatch | None = None
    searched: bool = True                # False: not searched (error says why)
    error: str | None = None            # the search failed or stopped (rate limit, ...)
    draft: str | None = None            # path of the drafted report (`--upstream draft`)
    created: str | None = None          # URL of the issue `--upstream create` opened

    def describe(self) -> str:
        """The one phrase the summary, the HTML report and the console show."""
        if self.created:
            return f"reported by parity-gate in {self.created}"
        m = self.match
        if m is None:
            if not self.searched or self.error:
                return f"not searched upstream ({self.error or 'search skipped'})"
            return "no known report" + (f" (draft: {self.draft})" if self.draft else "")
        return {
            MatchKind.OPEN_PR: f"being fixed in {m.ref} (open PR)",
            MatchKind.MERGED_PR: f"fixed in {m.ref} (merged): upgrade to a release that has it",
            MatchKind.OPEN_ISSUE: f"reported in {m.ref} (open issue)",
            MatchKind.CLOSED_ISSUE: f"reported in {m.ref} (closed issue): check whether the "
                                    "fix reached your release",
            MatchKind.CLOSED_PR: f"attempted in {m.ref} (closed PR, not merged)",
        }[m.kind]
