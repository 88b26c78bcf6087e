"""Performance and placement of one case: how fast, where and in how much memory ONNX ran.

A model can match eager to the last bit and still be a failed export: eight times
slower, half its nodes fallen back from the GPU to the CPU, dozens of inserted
copies between devices. The worker measures (engine.performance), the statistics
are pure (compare.timing), the gate rules on them (gate.performance); these are
the records in between, on `CaseResult.performance` and in `results.json`.
"""

from __future__ import annotations

from dataclasses import field

from pydantic.dataclasses import dataclass

from parity_gate.model.record import CONFIG, Real, Record
from parity_gate.model.units import human_size

# What a case's memcpy nodes do to the gate (manifest `performance.memcpy`).
MEMCPY_ACTIONS = ("fail", "warn", "off")


@dataclass(frozen=True, config=CONFIG)
class Latency(Record):
    """ONNX Runtime's time against eager's on the same inputs, both warm, timed in
    interleaved pairs (eager then ONNX, then the other way round) so that load coming
    and going hits both alike. `ratio` is the median of the per-pair ratios ONNX/eager;
    `low`..`high` its distribution-free 95% confidence interval (sign test on the
    pairs' log ratios). `stable`: the interval got narrower than the target before the
    pair or time budget ran out."""

    eager_ms: Real
    onnx_ms: Real
    ratio: Real
    low: Real
    high: Real
    pairs: int
    stable: bool
    spent_s: float = 0.0
    why: str = ""       # an unstable figure: which side's timings spread, and how far
    timed_on: str = ""  # the case whose timing this is (same module, dtype, provider, shapes)
    # ONNX Runtime's side ran through an IOBinding: inputs already on the provider's device,
    # outputs left there, so host<->device copies are not timed as compute (the eager side's
    # tensors are on its device too). False: plain `session.run`, copies included.
    io_binding: bool = False

    def describe(self) -> str:
        return (f"ONNX Runtime {self.onnx_ms:.3g} ms vs eager {self.eager_ms:.3g} ms: "
                f"{figure(self.ratio)}× (95% {figure(self.low)}–{figure(self.high)}, "
                f"{self.pairs} pairs"
                f"{'' if self.stable else ', not stable within the budget: ' + self.why}"
                f"{f'; timed on {self.timed_on}' if self.timed_on else ''}"
                f"{'; I/O bound on the device' if self.io_binding else ''})")


def figure(ratio: float) -> str:
    """A time ratio with two decimals, or two significant digits below 0.1 (0.0015×, not
    0.00×: ONNX Runtime 600 times faster than a loaded eager is still a figure)."""
    return f"{ratio:.2f}" if not 0 < abs(ratio) < 0.1 else f"{ratio:.2g}"


@dataclass(frozen=True, config=CONFIG)
class PlacedNode(Record):
    """One node of the session's (optimized) graph and the execution provider it ran on."""

    name: str
    op: str
    provider: str


@dataclass(frozen=True, config=CONFIG)
class Copy(Record):
    """One MemcpyToHost/MemcpyFromHost node ONNX Runtime inserted around nodes placed off the
    requested device, and what it costs: `bytes` copied per run (the profile's output size,
    else the tensor's static shape and dtype in the optimized graph), `time_us` its mean
    kernel time per profiled run (None when not profiled). `tensor`: the value copied;
    `nodes`: the nodes it serves on the host side (the readers of a MemcpyToHost's output,
    the writer of a MemcpyFromHost's input), read from the optimized graph."""

    name: str
    op: str
    tensor: str = ""
    nodes: list[str] = field(default_factory=list)
    bytes: int | None = None
    time_us: Real | None = None

    def describe(self) -> str:
        way = "to host" if self.op == "MemcpyToHost" else "from host"
        size = human_size(self.bytes) if self.bytes is not None else "? bytes"
        took = f" in {self.time_us:.3g} µs" if self.time_us is not None else ""
        return f"{size} {way}{took}"


@dataclass(frozen=True, config=CONFIG)
class Placement(Record):
    """Where the session's nodes ran, read from ONNX Runtime's own records (`source`:
    `profile`, the per-node `args.provider` of its JSON profile; or `log`, the
    verbose session log's node-placement lines). `fallback`: nodes on another provider
    than the requested one; `memcpy`: the MemcpyToHost/MemcpyFromHost nodes ONNX Runtime
    inserted between devices; `copies`: the same with their cost and the nodes they serve,
    where the optimized graph or the profile's sizes were read."""

    requested: str  # e.g. CUDAExecutionProvider
    by_provider: dict[str, int] = field(default_factory=dict)  # nodes per provider
    fallback: list[PlacedNode] = field(default_factory=list)
    memcpy: list[PlacedNode] = field(default_factory=list)
    source: str = "profile"
    copies: list[Copy] = field(default_factory=list)

    def copies_of(self, node: str) -> list[Copy]:
        """The inserted copies that serve `node` (a fallback node)."""
        return [c for c in self.copies if node in c.nodes]

    @property
    def nodes(self) -> int:
        return sum(self.by_provider.values())

    def describe(self) -> str:
        parts = [f"{self.nodes} node(s) on " + ", ".join(
            f"{p.removesuffix('ExecutionProvider')} {n}" for p, n in self.by_provider.items())]
        if self.fallback:
            names = ", ".join(f"{n.name} ({n.op}{self._costs(n.name)})"
                              for n in self.fallback[:5])
            more = f" and {len(self.fallback) - 5} more" if len(self.fallback) > 5 else ""
            parts.append(f"{len(self.fallback)} fell back from "
                         f"{self.requested.removesuffix('ExecutionProvider')}: {names}{more}")
        if self.memcpy:
            sizes = [c.bytes for c in self.copies if c.bytes is not None]
            times = [c.time_us for c in self.copies if c.time_us is not None]
            cost = ", ".join(([f"{human_size(sum(sizes))} per run"] if sizes else [])
                             + ([f"{sum(times):.3g} µs"] if times else []))
            parts.append(f"{len(self.memcpy)} Memcpy node(s) inserted"
                         + (f" ({cost})" if cost else ""))
        return "; ".join(parts)

    def _costs(self, node: str) -> str:
        mine = self.copies_of(node)
        return ("; copies " + ", ".join(c.describe() for c in mine)) if mine else ""


@dataclass(frozen=True, config=CONFIG)
class Memory(Record):
    """Peak memory of the case's run on each side. `source` says what was measured:
    `peak RSS` is the worker's resident-set high-water mark (Linux VmHWM, reset before
    each side), so it counts everything the process touched: for ONNX, a fresh session
    loading the model and running the first sample (weights, arena, activations); for
    eager, the module's weights plus what one forward adds. A lower bound on both sides:
    pages the process had touched before are reused unseen. On a GPU provider only ONNX
    Runtime's arena figure is kept (`source: arena`): host RSS says nothing there."""

    eager_bytes: int | None = None
    onnx_bytes: int | None = None
    arena_bytes: int | None = None  # ONNX Runtime's arena peak in use (its profile's figure)
    source: str = ""
    error: str = ""

    @property
    def ratio(self) -> float | None:
        if not self.eager_bytes or self.onnx_bytes is None:
            return None
        return self.onnx_bytes / self.eager_bytes


@dataclass(frozen=True, config=CONFIG)
class PerformanceLimits(Record):
    """The manifest's `performance` settings the case was measured under, so the gate
    (a function of the results alone) rules with them."""

    max_slowdown: float | None = None  # None: latency is reported, never gated
    max_fallback_nodes: int | None = None  # None: fallbacks reported, never gated
    memcpy: str = "warn"  # MEMCPY_ACTIONS
    gpu: bool = False  # the requested provider is not the CPU one (placement is gated)


@dataclass(frozen=True, config=CONFIG)
class Startup(Record):
    """What the first use of a provider's session cost, kept out of the latency samples:
    `session_ms` creating it, `first_run_ms` its first run (where TensorRT builds its
    engines for the shapes it meets, and CUDA allocates and tunes). `engine_cache`: for
    TensorRT, `built` (new engine files were written to the cache), `loaded` (the cache had
    them), else empty."""

    session_ms: Real
    first_run_ms: Real
    engine_cache: str = ""
    cache_path: str = ""

    def describe(self) -> str:
        cache = {"built": ", engine built and cached", "loaded": ", engine loaded from the "
                 "cache"}.get(self.engine_cache, "")
        return (f"session {_ms(self.session_ms)}, first run {_ms(self.first_run_ms)}"
                f"{cache} (not in the latency)")


def _ms(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1e3:.3g} s"


@dataclass(frozen=True, config=CONFIG)
class Performance(Record):
    """Everything measured about one case's speed, placement and memory; a part that could
    not be measured is None with the reason in `errors`."""

    limits: PerformanceLimits = field(default_factory=PerformanceLimits)
    latency: Latency | None = None
    placement: Placement | None = None
    memory: Memory | None = None
    errors: list[str] = field(default_factory=list)
    startup: Startup | None = None  # the provider's session's first use (GPU providers)


@dataclass(frozen=True, config=CONFIG)
class PerformanceFlag(Record):
    """One performance rule a case broke (gate.performance's table): `blocks` when the
    manifest makes it fail the merge, else a warning."""

    id: str  # the case id
    rule: str  # slowdown | fallback | memcpy
    message: str
    blocks: bool = False
    nodes: list[str] = field(default_factory=list)  # the nodes it names (fallback, memcpy)
