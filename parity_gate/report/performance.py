"""Performance per module, as every report shows it: the slowest measured case's ratio,
where the nodes ran, memory, and the rules broken (from the gate's decision)."""

from __future__ import annotations

from dataclasses import dataclass, field

from parity_gate.gate.performance import flags as case_flags
from parity_gate.model.gate import GateDecision
from parity_gate.model.performance import Latency, Memory, PerformanceFlag, Placement, figure
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import md_cell, md_code
from parity_gate.model.units import human_size
from parity_gate.report.fmt import num

BAR = 16  # blocks of the longer bar in a row of the markdown chart
ROWS = 30  # modules in the performance table; the rest are in the artifact


@dataclass
class ModulePerf:
    """One module's performance: its slowest measured case (highest lower bound of the
    ratio) stands for it."""

    name: str
    case: CaseResult
    latency: Latency | None
    placement: Placement | None
    memory: Memory | None
    flags: list[PerformanceFlag] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.latency.ratio if self.latency is not None else 0.0


def module_performance(run: RunResult, decision: GateDecision | None = None
                       ) -> list[ModulePerf]:
    """Modules with any measured case, slowest first (by the lower bound); flags from the
    decision when there is one (as it was made), else from the rules applied to the
    results."""
    by_module: dict[str, list[CaseResult]] = {}
    for case in run.cases:
        if case.performance is not None:
            by_module.setdefault(case.key.module, []).append(case)
    flagged = (decision.performance if decision is not None
               else [f for c in run.cases for f in case_flags(c)])
    out = []
    for name, cases in by_module.items():
        timed = [c for c in cases if c.performance and c.performance.latency is not None]
        slowest = max(timed, key=lambda c: _rank(c.performance.latency)  # type: ignore[union-attr]
                      ) if timed else cases[0]
        perf = slowest.performance
        assert perf is not None
        ids = {c.id for c in cases}
        out.append(ModulePerf(
            name, slowest, perf.latency,
            next((c.performance.placement for c in cases
                  if c.performance and c.performance.placement), None),
            next((c.performance.memory for c in cases
                  if c.performance and c.performance.memory), None),
            [f for f in flagged if f.id in ids]))
    return sorted(out, key=lambda m: (_rank(m.latency), m.name), reverse=True)


def _rank(lat: Latency | None) -> tuple[float, float]:
    """Slowest first by the interval's lower bound (then the ratio): the highest ratio of
    many noisy cases is mostly their noise, the highest lower bound is not."""
    return (lat.low, lat.ratio) if lat is not None else (-1.0, -1.0)


def ratio_text(lat: Latency | None) -> str:
    if lat is None:
        return "—"
    return (f"{figure(lat.ratio)}× ({figure(lat.low)}–{figure(lat.high)})"
            + ("" if lat.stable else " ~"))


def placement_text(p: Placement | None) -> str:
    if p is None:
        return "—"
    text = (f"{len(p.fallback)} fell back" if p.fallback else "all on "
            + p.requested.removesuffix("ExecutionProvider"))
    return text + (f", {len(p.memcpy)} memcpy" if p.memcpy else "")


def memory_text(m: Memory | None) -> str:
    if m is None:
        return "—"
    if m.eager_bytes is not None and m.onnx_bytes is not None:
        return f"{human_size(m.onnx_bytes)} vs {human_size(m.eager_bytes)} ({m.source})"
    if m.arena_bytes is not None:
        return f"arena {human_size(m.arena_bytes)}"
    return "—"


def bars(lat: Latency | None) -> str:
    """`eager ▇▇ / onnx ▇▇▇▇▇▇▇▇`: the two medians of one row, the longer one BAR wide."""
    if lat is None or max(lat.eager_ms, lat.onnx_ms) <= 0:
        return ""
    top = max(lat.eager_ms, lat.onnx_ms)
    e, o = (max(1, round(BAR * v / top)) for v in (lat.eager_ms, lat.onnx_ms))
    return f"`eager {'▇' * e}`<br>`onnx  {'▇' * o}`"


def markdown(run: RunResult, decision: GateDecision | None) -> str:
    """The performance section: a table and bar chart per module, then the flags."""
    mods = module_performance(run, decision)
    if not mods:
        return ""
    out = ["### Performance: ONNX Runtime vs eager", "",
           "Median per-pair time ratio ONNX/eager with its 95% interval (`~`: not stable "
           "within the timing budget); per module the case whose interval's lower bound is "
           "highest (the most surely slow).", "",
           "| module | eager ms | onnx ms | ratio (95%) | chart | placement | memory onnx vs "
           "eager |", "|---|---|---|---|---|---|---|"]
    for m in mods[:ROWS]:
        lat = m.latency
        ratio = ratio_text(lat)
        if any(f.rule == "slowdown" for f in m.flags):
            ratio = f"**{ratio}**"
        out.append(f"| {md_code(m.name)} | {num(lat.eager_ms) if lat else '—'} | "
                   f"{num(lat.onnx_ms) if lat else '—'} | {ratio} | {bars(lat)} | "
                   f"{md_cell(placement_text(m.placement))} | {md_cell(memory_text(m.memory))} |")
    if len(mods) > ROWS:
        out.append(f"\n_{len(mods) - ROWS} more modules in `results.json`._")
    flagged = [f for m in mods for f in m.flags]
    if flagged:
        out += ["", f"Performance rules broken ({len(flagged)}):", ""]
        out += [f"- {'**blocking**' if f.blocks else 'warning'} {md_code(f.id)} ({f.rule}): "
                f"{md_cell(f.message, 600)}" for f in flagged[:50]]
    unstable = [m for m in mods if m.latency is not None and not m.latency.stable]
    if flagged or not unstable:
        return "\n".join(out) + "\n"
    # Nothing broken and figures too noisy to mean anything: folded, saying why in one line.
    causes = sorted({m.latency.why for m in unstable if m.latency and m.latency.why})
    why = (f"{len(unstable)} of {len(mods)} modules' timings did not settle within the "
           "timing budget (a loaded machine), so no ratio here is a measurement to act on"
           + (f" ({md_cell(causes[0], 160)})" if causes else ""))
    return "\n".join([f"<details><summary>Performance: no rule broken; {why}</summary>", "",
                      *out[2:], "", "</details>"]) + "\n"
