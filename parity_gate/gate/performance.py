"""The performance rules: one record each, applied to every case's measured figures.

A pure function of the results (the limits the case was measured under travel on its
`performance.limits`), so shard merging re-decides it. Latency is flagged only on the
ratio's 95% lower bound (compare.timing.slower): a noisy run can leave a slow export
unflagged for a round, but it cannot flag a fast one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from parity_gate.compare.timing import order_bounds, regressed, slower
from parity_gate.gate.baseline import Baseline, Recorded
from parity_gate.model.performance import Performance, PerformanceFlag, PlacedNode
from parity_gate.model.results import CaseResult, RunResult

# (message, blocks, nodes named) or None when the case keeps the rule
Verdict = tuple[str, bool, list[PlacedNode]] | None


@dataclass(frozen=True)
class Context:
    """What a rule reads besides the case: its baseline record, and where that is."""

    recorded: Recorded | None = None
    where: str = ""


def _slowdown(p: Performance, _: Context) -> Verdict:
    lat, limit = p.latency, p.limits.max_slowdown
    if lat is None or limit is None or not slower(lat.low, limit):
        return None
    if order_bounds(lat.pairs) is None:  # no 95% interval: not a decision to block on
        return (f"ONNX Runtime took {lat.ratio:.2f}× eager's time over only "
                f"{lat.pairs} timed pair(s) (too few for a 95% interval within the timing "
                f"budget; raise performance.budget_s to decide against max_slowdown "
                f"{limit:g})", False, [])
    return (f"ONNX Runtime is {lat.ratio:.2f}× eager's time (95% interval "
            f"{lat.low:.2f}–{lat.high:.2f}, above max_slowdown {limit:g}): "
            f"{lat.onnx_ms:.3g} ms vs {lat.eager_ms:.3g} ms", True, [])


def _regression(p: Performance, ctx: Context) -> Verdict:
    lat, rec = p.latency, ctx.recorded
    if lat is None or rec is None or order_bounds(lat.pairs) is None \
            or not regressed(rec.figures, (lat.ratio, lat.low, lat.high)):
        return None  # (too few pairs for an interval: no claim beyond the noise)
    gated = p.limits.max_slowdown is not None
    return (f"slower than the baseline beyond the noise of both runs: ONNX/eager "
            f"{lat.ratio:.2f}× (95% {lat.low:.2f}–{lat.high:.2f}), recorded {rec.ratio:.2f}× "
            f"({rec.low:.2f}–{rec.high:.2f}) at {ctx.where}"
            + ("" if gated else " (not blocking: set performance.max_slowdown to gate "
               "latency)"), gated, [])


def _fallback(p: Performance, _: Context) -> Verdict:
    placed, limit = p.placement, p.limits.max_fallback_nodes
    if placed is None or not placed.fallback or not p.limits.gpu:
        return None
    over = limit is not None and len(placed.fallback) > limit
    names = ", ".join(f"{n.name} ({n.op} on {n.provider.removesuffix('ExecutionProvider')}"
                      + "".join(f"; copy {c.describe()}" for c in placed.copies_of(n.name))
                      + ")" for n in placed.fallback[:10])
    more = f" and {len(placed.fallback) - 10} more" if len(placed.fallback) > 10 else ""
    bound = f", more than max_fallback_nodes {limit}" if over else ""
    return (f"{len(placed.fallback)} of {placed.nodes} node(s) fell back from "
            f"{placed.requested}{bound}: {names}{more}", over, list(placed.fallback))


def _memcpy(p: Performance, _: Context) -> Verdict:
    placed, action = p.placement, p.limits.memcpy
    if placed is None or not placed.memcpy or action == "off":
        return None
    cost = {c.name: f": {c.describe()}" for c in placed.copies}
    names = ", ".join(f"{n.name} ({n.op}{cost.get(n.name, '')})" for n in placed.memcpy[:10])
    return (f"ONNX Runtime inserted {len(placed.memcpy)} Memcpy node(s) between devices "
            f"(memcpy: {action}): {names}", action == "fail", list(placed.memcpy))


@dataclass(frozen=True)
class Rule:
    id: str
    check: Callable[[Performance, Context], Verdict]


RULES = (Rule("slowdown", _slowdown), Rule("latency-regression", _regression),
         Rule("fallback", _fallback), Rule("memcpy", _memcpy))


def flags(case: CaseResult, baseline: Baseline | None = None) -> list[PerformanceFlag]:
    """The rules the case broke, in the table's order."""
    if case.performance is None:
        return []
    recorded = baseline.recorded_for(case.id) if baseline is not None else None
    ctx = Context(recorded, baseline.where(recorded) if baseline and recorded else "")
    out = []
    for rule in RULES:
        verdict = rule.check(case.performance, ctx)
        if verdict is not None:
            message, blocks, nodes = verdict
            out.append(PerformanceFlag(case.id, rule.id, message, blocks,
                                       [n.name for n in nodes]))
    return out


def run_flags(run: RunResult, baseline: Baseline | None = None) -> list[PerformanceFlag]:
    """Every case's flags, blocking ones first."""
    found = [f for case in sorted(run.cases, key=lambda c: c.key)
             for f in flags(case, baseline)]
    return sorted(found, key=lambda f: (not f.blocks, f.id, f.rule))
