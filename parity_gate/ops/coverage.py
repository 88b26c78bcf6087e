"""Which of torchlib's registered ATen ops a sweep exercised: measured from its results.

An op counts as reached when it appears in the exported graph of a case
that exported (the decomposed program the exporter translated, recorded per
case in `op.aten_ops`); cases that stopped before or during export carry
eager's dispatch instead and are not counted. Registered ops come from the
exporter's own registry (`ONNXRegistry.from_torchlib()`), read in a torch
process (`registered()`), so the maths here stays pure.

Names: results spell overloads `aten.add.Tensor` / `aten.abs.default`, the
registry `aten::add.Tensor` / `aten::abs`; both normalise to the registry's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import RunResult

# Outcomes of cases whose graph was never exported: their ops are eager's, not the graph's.
NOT_EXPORTED = frozenset({Outcome.SKIPPED, Outcome.CRASH, Outcome.TIMEOUT, Outcome.EAGER_ERROR,
                          Outcome.EXPORT_ERROR, Outcome.UNSUPPORTED_OP, Outcome.OUT_OF_MEMORY})


def overload_name(op: str) -> str:
    """`aten.add.Tensor` → `aten::add.Tensor`; `aten.abs.default` → `aten::abs`."""
    if "::" in op:
        return op
    namespace, _, rest = op.partition(".")
    return f"{namespace}::{rest.removesuffix('.default')}"


def op_name(overload: str) -> str:
    """The op of an overload (`aten::add.Tensor` → `aten::add`)."""
    return overload_name(overload).split(".", 1)[0]


@dataclass
class Coverage:
    registered: set[str]                    # registered ATen overloads
    reached: set[str]                       # overloads seen in exported graphs
    by_variant: dict[str, set[str]] = field(default_factory=dict)  # overload → variants

    @property
    def registered_ops(self) -> set[str]:
        return {op_name(o) for o in self.registered}

    @property
    def reached_ops(self) -> set[str]:
        return {op_name(o) for o in self.reached} & self.registered_ops

    @property
    def reached_overloads(self) -> set[str]:
        return self.reached & self.registered

    @property
    def unreached_ops(self) -> list[str]:
        return sorted(self.registered_ops - self.reached_ops)

    @property
    def unreached_overloads(self) -> list[str]:
        return sorted(self.registered - self.reached)

    def percent(self) -> float:
        return 100.0 * len(self.reached_ops) / max(1, len(self.registered_ops))

    def lines(self) -> list[str]:
        ops, overloads = self.registered_ops, self.registered
        return [f"ATen ops: {len(self.reached_ops)} of {len(ops)} registered in torchlib "
                f"reached ({self.percent():.1f}%)",
                f"ATen overloads: {len(self.reached_overloads)} of {len(overloads)} reached "
                f"({100.0 * len(self.reached_overloads) / max(1, len(overloads)):.1f}%)"]


def reached(runs: Iterable[RunResult]) -> dict[str, set[str]]:
    """Overload → the variants whose exported graph held it."""
    out: dict[str, set[str]] = {}
    for run in runs:
        for case in run.cases:
            if case.op is None or case.outcome in NOT_EXPORTED:
                continue
            for op in case.op.aten_ops:
                out.setdefault(overload_name(op), set()).add(case.op.variant)
    return out


def coverage(runs: Iterable[RunResult], registered: Iterable[str]) -> Coverage:
    seen = reached(runs)
    aten = {overload_name(o) for o in registered if str(o).startswith("aten::")}
    return Coverage(aten, set(seen), seen)


def registered() -> list[str]:
    """torchlib's registered ATen overloads, from the exporter's registry (needs torch)."""
    import logging

    logging.disable(logging.WARNING)  # "torchvision is not installed. Skipping ..."
    try:
        from torch.onnx._internal.exporter import _registration

        names = _registration.ONNXRegistry.from_torchlib().functions
    finally:
        logging.disable(logging.NOTSET)
    return sorted(str(k) for k in names if isinstance(k, str) and k.startswith("aten::"))
