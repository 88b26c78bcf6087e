"""Export hazards: a known pitfall found in one module's export, with where and the fix.

Filled by `parity_gate.hazards` inside the module worker (static checks of the
export's artifacts) and read by the reports and the gate; `action` is the
manifest's say (fail, warn) after its per-module settings were applied.
"""

from __future__ import annotations

import enum
from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Record


class Severity(str, enum.Enum):
    """How wrong the exported program can be, independent of what the manifest does about it."""

    INFO = "info"        # worth knowing; the numbers are not at risk
    WARNING = "warning"  # the export can be wrong for inputs the gate did not try
    ERROR = "error"      # the export is wrong or will not run where it is deployed


class Action(str, enum.Enum):
    """What the gate does with a finding: block the merge, report it, or not check."""

    FAIL = "fail"
    WARN = "warn"
    OFF = "off"


@dataclass(frozen=True, config=CONFIG)
class Site(Record):
    """Where a hazard is: any of a module path, an ONNX node, a source `file:line`."""

    module: str = ""  # submodule path, e.g. "features.1"
    node: str = ""    # ONNX node (or graph input) name
    source: str = ""  # "path/to/file.py:42"

    def describe(self) -> str:
        parts = [f"module {self.module}" if self.module else "",
                 f"node {self.node}" if self.node else "", self.source]
        return ", ".join(p for p in parts if p)


@dataclass(frozen=True, config=CONFIG)
class Hazard(Record):
    """One finding of one rule on one module (merged over the dtypes it was seen in)."""

    rule: str  # rule id, e.g. "baked-dim" (parity_gate/hazards/rules.py)
    severity: Severity
    action: Action
    module: str
    message: str
    fix: str
    sites: list[Site] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    reason: str = ""  # the manifest's reason when it changed the rule's action

    @property
    def blocks(self) -> bool:
        return self.action is Action.FAIL

    def describe(self) -> str:
        where = "; ".join(s.describe() for s in self.sites[:3])
        return f"[{self.rule}] {self.message}" + (f" ({where})" if where else "")
