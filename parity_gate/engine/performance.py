"""The performance check of one case, in the worker: latency, placement, memory.

Uses what the worker already has open (the ORT session the case ran on, the eager
module in its dtype, the case's first sample) and the worker's thread budget (both
torch and ONNX Runtime were given the same share at worker start). Latency is
timed in interleaved pairs until `compare.timing` says the ratio is known well
enough or the case's budget is spent. A profiled session is slower than a plain
one, so placement and memory come from one separate, short profiled session per
module, dtype and provider (one run), never from the timed session.

ONNX Runtime's side is timed through an IOBinding (`bound_call`): inputs uploaded to the
provider's device once, outputs left there, as eager's tensors are on its device, so a
host-device copy is never timed as compute. What the first use of a GPU provider's
session costs (creating it, the first run: TensorRT's engine build) is its own record
(`first_run`, a `Startup`), never a latency sample; TensorRT keeps its engines in a cache
folder (`runtime.engine_cache`), so the build is paid once.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from parity_gate.compare import timing
from parity_gate.engine import placement as parse
from parity_gate.engine import stages
from parity_gate.engine.runtime import create_session, engine_cache, first_line
from parity_gate.model.performance import (
    Latency,
    Memory,
    Performance,
    PerformanceLimits,
    Placement,
    Startup,
)
from parity_gate.plan.providers import EXECUTION_PROVIDERS

WARMUP = 2  # untimed calls per side first: lazy initialisation, caches, the arena
# (the later ones size the calls per timed sample; the first, which may build a TensorRT
# engine or tune a kernel, never counts)
# Blocks per timed sample, the fastest kept: a block the scheduler preempted (another
# job on a shared runner) is slower, never faster, so the minimum drops it.
BEST_OF = 3


def limits_for(settings: Any, provider: str) -> PerformanceLimits:
    """The manifest's `performance` settings as the case's record (`settings`: the
    resolved PerformanceSettings)."""
    gpu = provider != "cpu"
    return PerformanceLimits(max_slowdown=settings.max_slowdown,
                             max_fallback_nodes=settings.max_fallback_nodes if gpu else None,
                             memcpy=settings.memcpy, gpu=gpu)


def latency(eager: Callable[[], Any], onnx: Callable[[], Any], budget_s: float,
            limit: float | None = None,
            clock: Callable[[], float] = time.perf_counter) -> Latency:
    """`_latency` with Python's garbage collector held off while timing, as `timeit` does:
    right after an export the heap holds the exporter's garbage, and one full collection
    inside a timed call (hundreds of ms on a large heap) would be charged to whichever side
    it fell on. Only the youngest generation is collected first: a full collection here
    cost 0.1-0.2 s per case on a heap holding torch and transformers (most of a warm run's
    timing), and garbage left uncollected costs no timed call while the collector is off."""
    enabled = gc.isenabled()
    gc.collect(0)
    gc.disable()
    try:
        return _latency(eager, onnx, budget_s, limit, clock)
    finally:
        if enabled:
            gc.enable()


def _latency(eager: Callable[[], Any], onnx: Callable[[], Any], budget_s: float,
             limit: float | None, clock: Callable[[], float]) -> Latency:
    """Time `eager` and `onnx` (each one call on the case's inputs) in interleaved pairs,
    alternating which goes first, until the ratio's interval is narrow or the budget is
    spent (`limit`: the gate's max_slowdown, see compare.timing.enough). One sample of a
    side is the fastest of BEST_OF blocks of calls (one block for a model too slow for
    that to fit the budget), a block being as many calls as last a millisecond. Where
    latency is not gated and two pairs would already overrun the budget, the warm-up's
    fastest calls are the one pair (an unstable figure: the cost stays bounded by four
    calls a side)."""
    t0 = clock()
    once = []
    for call in (eager, onnx):
        took = []
        for _ in range(WARMUP):
            s = clock()
            call()
            took.append(clock() - s)
        once.append(min(took[1:]))  # never the first: lazy set-up, an engine build
    repeats = [timing.inner_repeats(t) for t in once]
    pair_s = sum(n * t for n, t in zip(repeats, once, strict=True))
    # As many best-of blocks (up to BEST_OF) as let eight pairs fit the budget: the budget
    # bounds the cost, and a large model's calls get fewer.
    blocks = max(1, min(BEST_OF, int(budget_s / (pair_s * timing.MIN_PAIRS or 1e-9))))
    eager_s: list[float] = []
    onnx_s: list[float] = []
    large = limit is None and 2 * pair_s > budget_s
    if large:  # a large model, latency not gated: the warm-up pair is the figure
        eager_s, onnx_s = [once[0]], [once[1]]
    start = clock()
    while not large and not timing.enough(eager_s, onnx_s, clock() - start, budget_s, limit):
        order = ((eager, repeats[0], eager_s), (onnx, repeats[1], onnx_s))
        for call, n, out in (order if len(eager_s) % 2 == 0 else order[::-1]):
            best = math.inf
            for _ in range(blocks):
                s = clock()
                for _ in range(n):
                    call()
                best = min(best, (clock() - s) / n)
            out.append(best)
    r = timing.paired_ratio(eager_s, onnx_s)
    return Latency(eager_ms=r.eager_s * 1e3, onnx_ms=r.onnx_s * 1e3, ratio=r.ratio,
                   low=r.low, high=r.high, pairs=r.pairs, stable=r.narrow,
                   spent_s=clock() - t0,
                   why="" if r.narrow else timing.instability(eager_s, onnx_s),
                   io_binding=bool(getattr(onnx, "io_binding", False)))


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_peak() -> bool:
    """Reset the process's resident-set high-water mark (Linux: clear_refs 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_increase(work: Callable[[], Any]) -> tuple[int | None, Any]:
    """Bytes the resident set peaked above where it stood, while `work` ran (None where
    the kernel cannot reset or report the peak), and what `work` returned."""
    if not _reset_peak():
        return None, work()
    before = _status_kib("VmRSS")
    result = work()
    peak = _status_kib("VmHWM")
    if before is None or peak is None:
        return None, result
    return max(0, peak - before) * 1024, result


class BoundCall:
    """One ONNX Runtime run through an IOBinding: the inputs uploaded to the provider's
    device once (`OrtValue.ortvalue_from_numpy(array, device, id)`), the outputs bound to
    that device, and `run_with_iobinding` the call, so the timed call is the session's
    compute (ONNX Runtime synchronises the provider's stream at the end of a run) and not
    the host-device copies `session.run` makes on every call. `outputs()` copies them back
    (untimed)."""

    io_binding = True

    def __init__(self, session: Any, feeds: dict[str, np.ndarray], device: str,
                 device_id: int = 0) -> None:
        import onnxruntime as ort

        self.session = session
        self.binding = session.io_binding()
        self.inputs = {n: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a), device,
                                                            device_id)
                       for n, a in feeds.items()}  # kept alive as long as the binding
        for name, value in self.inputs.items():
            self.binding.bind_ortvalue_input(name, value)
        for out in session.get_outputs():
            self.binding.bind_output(out.name, device, device_id)
        self.binding.synchronize_inputs()

    def __call__(self) -> Any:
        self.session.run_with_iobinding(self.binding)
        return self.binding

    def outputs(self) -> list[np.ndarray]:
        return list(self.binding.copy_outputs_to_cpu())


def device_of(provider: str) -> str:
    """The OrtValue device a provider's kernels read: ONNX Runtime's CUDA memory for CUDA
    and TensorRT (TensorRT's subgraphs take CUDA buffers), the host for the CPU."""
    return "cpu" if provider == "cpu" else "cuda"


def bound_call(session: Any, feeds: dict[str, np.ndarray], provider: str,
               options: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    """The ONNX side's timed call: a BoundCall where the binding works (one trial run),
    else plain `session.run` (its copies timed too), with why, e.g. a bfloat16 input numpy
    cannot hand to an OrtValue."""
    try:
        call = BoundCall(session, feeds, device_of(provider), int(options.get("device_id", 0)))
        call()
        return call, ""
    except Exception as exc:  # the copies are then timed with the compute, and it says so
        return (lambda: stages.run(session, feeds)), \
            f"IOBinding not used ({first_line(repr(exc), 160)}): host-device copies are timed"


def cache_files(provider: str) -> set[str]:
    """The files in TensorRT's engine cache (none for another provider): taken before a
    session opens, so that `first_run` can tell a build from a load."""
    if provider != "tensorrt":
        return set()
    return {str(p) for p in engine_cache().rglob("*") if p.is_file()}


def first_run(session: Any, feeds: dict[str, np.ndarray], session_s: float, provider: str,
              before: set[str], clock: Callable[[], float] = time.perf_counter
              ) -> Startup | None:
    """Time a fresh session's first run, apart from every latency sample (`session_s`: what
    opening it took). None when the run fails: the cases then run and fail with the cause.
    For TensorRT, files in the engine cache that were not in `before` mean the engine was
    built, none that it was loaded."""
    try:
        t0 = clock()
        stages.run(session, feeds)
        first_s = clock() - t0
    except Exception:  # the cases report it
        return None
    trt = provider == "tensorrt"
    return Startup(session_ms=session_s * 1e3, first_run_ms=first_s * 1e3,
                   engine_cache=("built" if cache_files(provider) - before else "loaded")
                   if trt else "", cache_path=str(engine_cache()) if trt else "")


def shapes_of(feeds: dict[str, np.ndarray]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """What a call's time depends on besides the model: its inputs' shapes and dtypes."""
    return tuple(sorted((k, tuple(v.shape), str(v.dtype)) for k, v in feeds.items()))


class Measurer:
    """Per (module, dtype, provider): the profiled session's placement and memory, made
    on the first case measured and shared by the others; latency once per input shape
    (the fixture sets' cases of one batch size share one timing: the same work)."""

    def __init__(self, model: bytes | str, provider: str, options: dict[str, Any],
                 settings: Any, weights_bytes: int) -> None:
        self.model, self.provider, self.options = model, provider, options
        self.settings = settings
        self.weights_bytes = weights_bytes
        self.placement: Placement | None = None
        self.memory: Memory | None = None
        self.errors: list[str] = []
        self.profiled = False
        self.timed: dict[Any, tuple[str, Latency]] = {}  # input shapes → (case, its timing)
        self.startup: Startup | None = None  # first_run's, on the first case measured
        # Write the profiled session's optimized graph (which nodes each copy serves): on the
        # CUDA provider (TensorRT's compiled nodes cannot be written), off on the CPU.
        self.graph = provider == "cuda"

    def measure(self, session: Any, eager: Callable[[], Any], feeds: dict[str, np.ndarray],
                case: str = "") -> Performance:
        """One case's record; never raises (what failed is in `errors`). A case whose
        inputs have the shapes of one timed before reuses that timing."""
        errors: list[str] = []
        first = not self.profiled
        if first:
            self.profiled = True
            self._profile(eager, feeds)
        lat = None
        shapes = shapes_of(feeds)
        if shapes in self.timed:
            timed_on, done = self.timed[shapes]
            lat = dataclasses.replace(done, timed_on=timed_on, spent_s=0.0)
        else:
            try:
                call, why = bound_call(session, feeds, self.provider, self.options)
                if why:
                    errors.append(why)
                lat = latency(eager, call, self.settings.budget_s, self.settings.max_slowdown)
                self.timed[shapes] = case, lat
            except Exception as exc:  # advisory: the case keeps its outcome
                errors.append(f"latency not measured: {first_line(repr(exc))}")
        return Performance(limits=limits_for(self.settings, self.provider), latency=lat,
                           placement=self.placement, memory=self.memory if first else None,
                           errors=[*(self.errors if first else []), *errors],
                           startup=self.startup if first else None)

    def _profile(self, eager: Callable[[], Any], feeds: dict[str, np.ndarray]) -> None:
        requested = EXECUTION_PROVIDERS[self.provider]
        folder = tempfile.mkdtemp(prefix="parity-profile-")
        prefix = os.path.join(folder, "ort")

        optimized = os.path.join(folder, "optimized.onnx") if self.graph else None
        graph: Any = None

        def profiled_run() -> list[dict[str, Any]]:
            session = create_session(self.model, self.provider, self.options,
                                     profile_prefix=prefix, optimized_path=optimized)
            stages.run(session, feeds)
            path = session.end_profiling()
            return list(json.loads(Path(path).read_text()))

        try:
            eager_peak, _ = peak_rss_increase(eager)
            onnx_peak, events = peak_rss_increase(profiled_run)
            if optimized is not None and Path(optimized).is_file():
                import onnx

                graph = onnx.load(optimized, load_external_data=False)
        except Exception as exc:  # advisory: the case keeps its outcome
            self.errors.append(f"placement and memory not measured: {first_line(repr(exc))}")
            return
        finally:
            for f in Path(folder).glob("*"):
                f.unlink(missing_ok=True)
            Path(folder).rmdir()
        self.placement = parse.from_profile(events, requested, graph)
        arena = parse.arena_peak(events)
        if self.provider != "cpu":
            self.memory = Memory(arena_bytes=arena, source="arena",
                                 error="peak RSS counts host memory only: eager and ONNX "
                                 "Runtime are not compared on a GPU provider")
        elif eager_peak is not None and onnx_peak is not None:
            self.memory = Memory(eager_bytes=self.weights_bytes + eager_peak,
                                 onnx_bytes=onnx_peak, arena_bytes=arena,
                                 source="peak RSS")
        else:
            self.memory = Memory(arena_bytes=arena, source="arena" if arena else "",
                                 error="the kernel does not report a resettable peak RSS "
                                 "(/proc/self/clear_refs, VmHWM)")


def eager_call(binding: Any, module: Any, inputs: dict[str, np.ndarray], device: str
               ) -> Callable[[], Any]:
    """One eager forward on the case's inputs, as the reference ran it (inference mode;
    on CUDA synchronised, so the time is the work's, not the launch's)."""
    import torch

    from parity_gate.engine.tensors import to_torch

    tensors = {n: to_torch(inputs[n], device) for n in binding.order}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def call() -> Any:
        with torch.inference_mode():
            out = binding.call(module, tensors)
        sync()
        return out

    return call


def weights_bytes(module: Any) -> int:
    """Bytes of the module's parameters and buffers (eager's share of the memory figure)."""
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


# Timing may take this share of what each case already cost the module (its share of the
# export, check and session), when that is more than `budget_s`: a model whose export
# took a minute can afford a steadier figure than the budget's few pairs.
SHARE = 0.1


def measurer(job: Any, model: bytes | str, provider: str, module: Any,
             case_cost_s: float = 0.0) -> Measurer | None:
    """The job's measurer for one provider's session, or None when the manifest turned the
    check off. `case_cost_s`: the export, check and session time per case of this
    provider (SHARE of it is the timing budget where that exceeds `budget_s`)."""
    settings = job.settings.performance
    if settings is None or not settings.measure:
        return None
    budget = max(settings.budget_s, SHARE * case_cost_s)
    return Measurer(model, provider, job.providers[provider].options,
                    settings.model_copy(update={"budget_s": budget}), weights_bytes(module))
