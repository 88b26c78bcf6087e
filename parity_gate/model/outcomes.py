"""Every case outcome, declared once.

Reports, exit codes and (later) the baseline gate read these records instead of
testing outcome names in `if` chains, so a new outcome is one line here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class OutcomeInfo:
    """How one outcome is reported.

    `junit` is the JUnit element (`failure`, `error`, `skipped`) or None for a
    pass; `severity` orders outcomes from benign to worst, which the gate uses
    to tell "got worse" (mismatch → crash) from "still failing the same way".
    `verbs` name it in a headline: "1 module crashes", "2 modules crash".
    """

    junit: str | None
    severity: int
    failed: bool
    description: str
    verbs: tuple[str, str] = ("fails", "fail")


class Outcome(str, enum.Enum):
    """The outcome of one case; the value is the name used in every report."""

    PASS = "pass"
    SKIPPED = "skipped"
    MISMATCH = "mismatch"
    METRIC_DROP = "metric_drop"
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    BAKED_SHAPE = "baked_shape"
    RUNTIME_ERROR = "runtime_error"
    NO_KERNEL = "no_kernel"
    INVALID_MODEL = "invalid_model"
    UNSUPPORTED_OP = "unsupported_op"
    EXPORT_ERROR = "export_error"
    EAGER_ERROR = "eager_error"
    OUT_OF_MEMORY = "out_of_memory"
    TIMEOUT = "timeout"
    CRASH = "crash"

    @property
    def info(self) -> OutcomeInfo:
        return _INFO[self]

    @property
    def failed(self) -> bool:
        return self.info.failed

    @property
    def severity(self) -> int:
        return self.info.severity


_INFO: dict[Outcome, OutcomeInfo] = {
    Outcome.PASS: OutcomeInfo(None, 0, False, "matches eager within tolerance",
                               ("passes", "pass")),
    Outcome.SKIPPED: OutcomeInfo("skipped", 0, False, "not run (reason given)",
                                     ("is skipped", "are skipped")),
    Outcome.MISMATCH: OutcomeInfo("failure", 10, True, "values differ beyond tolerance",
                                      ("mismatches", "mismatch")),
    Outcome.METRIC_DROP: OutcomeInfo(
        "failure", 12, True, "the task metric on the labelled slice is worse than its "
        "budget, or the slice cannot show it is within (inconclusive)",
        ("loses task accuracy", "lose task accuracy")),
    Outcome.SHAPE_MISMATCH: OutcomeInfo("failure", 20, True, "output shape differs from eager",
                                            ("changes shape", "change shape")),
    Outcome.DTYPE_MISMATCH: OutcomeInfo("failure", 20, True, "output dtype differs from eager",
                                            ("changes dtype", "change dtype")),
    Outcome.BAKED_SHAPE: OutcomeInfo(
        "failure", 30, True,
        "a batch size eager accepts fails on the exported model: a dim was baked in",
        ("bakes in a shape", "bake in a shape"),
    ),
    Outcome.NO_KERNEL: OutcomeInfo(
        "error", 35, True, "valid graph, but the provider has no kernel for a type",
        ("lacks a kernel", "lack a kernel"),
    ),
    Outcome.RUNTIME_ERROR: OutcomeInfo("error", 40, True, "ONNX Runtime failed while running",
                                           ("fails in ONNX Runtime", "fail in ONNX Runtime")),
    Outcome.INVALID_MODEL: OutcomeInfo(
        "error", 50, True, "onnx.checker or ONNX Runtime refused to load the graph",
        ("exports an invalid model", "export invalid models"),
    ),
    Outcome.UNSUPPORTED_OP: OutcomeInfo(
        "error", 55, True, "the exporter has no translation for an operator (feature request)",
        ("hits an unsupported op", "hit unsupported ops"),
    ),
    Outcome.EXPORT_ERROR: OutcomeInfo("error", 60, True, "torch.onnx.export failed",
                                          ("fails to export", "fail to export")),
    Outcome.EAGER_ERROR: OutcomeInfo(
        "error", 60, True, "building the module or running it eagerly failed",
        ("fails in eager", "fail in eager"),
    ),
    Outcome.OUT_OF_MEMORY: OutcomeInfo(
        "error", 65, True, "the case needed more memory than the worker's limit "
        "(`worker_memory`); the module's other cases still ran",
        ("runs out of memory", "run out of memory"),
    ),
    Outcome.TIMEOUT: OutcomeInfo("error", 70, True, "the worker exceeded the module's timeout",
                                     ("times out", "time out")),
    Outcome.CRASH: OutcomeInfo("error", 80, True, "the worker process died (signal or exit)",
                                   ("crashes", "crash")),
}
assert set(_INFO) == set(Outcome), "every outcome needs an OutcomeInfo record"
