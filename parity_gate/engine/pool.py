"""Warm worker processes that survive modules and are replaced only when they die.

A fresh interpreter per export pays the torch import and the exporter's
first-call warm-up every time, so workers are reused. Each job (one module)
has a deadline; a worker that misses it, segfaults, aborts or is OOM-killed is
replaced, and the cases it never reported become timeout/crash results.

Nothing outlives the gate. Each worker leads its own process group (a kill
takes the module's own child processes with it), gets SIGKILL from the kernel
when the gate dies (PR_SET_PDEATHSIG), and forks a tiny sentinel before its
heavy imports that, when the gate dies, removes the pool's temporary folder and
kills the whole group, so even a grandchild a module started goes. Workers'
temporary files (TMPDIR) live in the pool's folder; a folder left by a gate
that died anyway is removed by the next pool.

Each worker runs under a memory limit (RLIMIT_DATA: its share of the machine, or the
module's `worker_memory`), so a case too big for the machine fails its own allocation
(`out_of_memory`) instead of drawing the kernel's OOM killer onto the whole worker.
These rules (and no GitHub token in a worker's environment) are engine.sandbox's, the one
sandbox for model code, shared with the crash repros the gate replays.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import faulthandler
import importlib
import multiprocessing as mp
import os
import re
import shutil
import signal
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from parity_gate.engine.environment import usable_cores
from parity_gate.engine.protocol import (
    PROBE_STEP,
    Corrupted,
    Done,
    Fatal,
    Job,
    Ready,
    Receiver,
    Sender,
    ended_by,
    entry_point,
    new_key,
)
from parity_gate.engine.runtime import set_thread_budget
from parity_gate.engine.sandbox import alive as _alive
from parity_gate.engine.sandbox import enter, kill_tree, limit_memory
from parity_gate.model.findings import Finding, Lost, Stage, Step
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult

_CTX = mp.get_context("spawn")


FOLDER_PREFIX = "parity-gate-workers-"


def remove_stale_folders(root: str | None = None) -> list[str]:
    """Remove the worker folders of gates that died without cleaning up (SIGKILL)."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    for folder in base.glob(f"{FOLDER_PREFIX}*"):
        m = re.match(re.escape(FOLDER_PREFIX) + r"(\d+)-", folder.name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def _exit_now() -> None:
    """End a worker that finished its jobs without the interpreter's teardown: unloading
    torch and a model library took about a second per worker, on every run's critical
    path. Every job's files are written and renamed into place before its Done."""
    _flush_output()
    os._exit(0)


def _flush_output() -> None:
    """Push this job's output into the log before the next job's output begins, so a
    crash record holds only its own module's output (C stdio too)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


# A worker the pool kills (a timeout, an interrupt) leaves its semaphores registered with
# multiprocessing's resource tracker, which frees them at exit but warns after the verdict
# line; the tracker inherits this process's warning options, so they carry the filter.
_TRACKER_NOISE = "ignore::UserWarning:multiprocessing.resource_tracker"
if _TRACKER_NOISE not in sys.warnoptions:
    sys.warnoptions.append(_TRACKER_NOISE)

GiB = 1 << 30
MIN_WORKER_MEMORY = 2 * GiB


def machine_memory() -> int | None:
    """Bytes of memory this process may use: physical RAM, or the container's cgroup limit
    when that is lower (a CI runner in a container sees the host's RAM otherwise)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def default_worker_memory(workers: int) -> int:
    """Each worker's share of 80% of the memory (the gate and the OS keep the rest), at
    least 2 GiB: torch and onnxruntime alone need a few hundred MiB."""
    total = machine_memory()
    if total is None:
        return MIN_WORKER_MEMORY
    return max(MIN_WORKER_MEMORY, int(total * 0.8) // max(1, workers))


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker process is started with (pickled into the spawned process): the
    results channel's key, its log, its thread share, the modules to import once, the
    gate's pid for the sandbox (0: none) and the memory limit."""

    key: bytes
    log_path: str
    threads: int
    warm: Sequence[str]
    gate_pid: int = 0
    memory_limit: int | None = None


def _worker_main(jobs: Connection, results: Connection, setup: WorkerSetup) -> None:
    """Worker loop: import the heavy stack once, then serve jobs until told to stop.

    Jobs arrive pickled on `jobs`; everything goes back as authenticated frames on
    `results` (protocol.Sender). Both stay out of the processes a module starts."""
    # The gate spawned this process with SIGINT blocked (a Ctrl-C reaches the whole
    # terminal's process group, this one too until _die_with): ignore it, then unblock,
    # which drops one that came in between, so an early Ctrl-C prints no traceback here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    os.set_inheritable(jobs.fileno(), False)
    send = Sender(results.fileno(), setup.key)
    _leave_resource_tracker()
    if setup.gate_pid:  # engine.sandbox: the one rule for code run on a model's behalf
        enter(setup.gate_pid, setup.memory_limit, str(Path(setup.log_path).parent))
    else:
        limit_memory(setup.memory_limit)
    _redirect_output(setup.log_path)
    try:
        _import_stack(setup.threads, setup.warm)
    except BaseException:
        send(Fatal(traceback.format_exc()))
        return
    send(Ready(os.getpid()))
    _serve(jobs, send, setup.memory_limit)


def _redirect_output(log_path: str) -> None:
    """The worker's (and its modules') temporary files under the log's scratch folder;
    stdout and stderr into the log, line-buffered, with crash and hang stacks."""
    scratch = f"{log_path}.tmp"
    os.makedirs(scratch, exist_ok=True)
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = None
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):  # a crash loses no buffer
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    # A segfault or abort prints the Python stack into the log (the crash's evidence);
    # SIGUSR1 makes a hung worker print where it hangs before the pool kills it.
    faulthandler.enable(all_threads=True)
    if hasattr(signal, "SIGUSR1"):  # POSIX only
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def _import_stack(threads: int, warm: Sequence[str]) -> None:
    """Import torch, dynamo, onnx and onnxruntime once per worker, with its thread share."""
    import logging

    logging.disable(logging.WARNING)
    import torch

    # Every export and hazard check imports dynamo on first use: 2-5 s that are this
    # worker's start-up, not the first module's time limit (a run whose exports all come
    # from the cache would not need it, but which will is known only in the job).
    import torch._dynamo

    torch.set_num_threads(threads)
    set_thread_budget(threads)  # ONNX Runtime sessions get the same share
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401

    for name in warm:  # the caller's job code, imported once per worker
        importlib.import_module(name)


def _serve(jobs: Connection, send: Sender, memory_limit: int | None) -> None:
    """Run jobs until the gate closes the pipe or sends None."""
    while True:
        try:
            message = jobs.recv()
        except EOFError:
            message = None
        if message is None:
            _exit_now()
        job: Job = message
        limit_memory(getattr(job, "memory_limit", None) or memory_limit)  # the module's own
        done = Done(job.name)
        try:
            entry_point(job)(job, send)
        except BaseException as exc:  # sys.exit or KeyboardInterrupt in model code (entry
            traceback.print_exc()     # points catch the rest): the pool fails what is left
            done = dataclasses.replace(ended_by(exc), job=job.name)
        _flush_output()
        _release_memory()
        send(done)


def _leave_resource_tracker() -> None:
    """Close the pipe to the gate's multiprocessing resource tracker that spawning hands
    every worker: model code writing into every descriptor it holds would feed that
    tracker lines it prints tracebacks for (or acts on). The worker registers nothing;
    should a module use multiprocessing, it starts a tracker of its own."""
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    fd = getattr(tracker, "_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(AttributeError):
            tracker._fd = None  # type: ignore[union-attr]
            tracker._pid = None  # type: ignore[union-attr]


def _release_memory() -> None:
    """Between jobs: free the last module's graphs, sessions and references, and hand the
    pages back to the OS, so a worker's peak is one module's, not the sum of all it ran."""
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc keeps freed heap pages otherwise


# A worker that has not reported ready by then never will: its imports hang. The module's
# own timeout starts when it is ready, so a loaded machine's slow start costs it nothing.
STARTUP_S = 120.0


def _accept(worker: _Worker, result: CaseResult) -> bool:
    """A planned case still pending, or a probe (`shapes: auto`, chosen by the worker after
    its export, so not planned) of this job reported for the first time."""
    if result.key in worker.pending:
        worker.pending.remove(result.key)
        return True
    job = worker.job
    if result.probe and job is not None and result.key.module == job.name \
            and result.key not in worker.probed:
        worker.probed.add(result.key)
        return True
    return False


def _probe_in_flight(worker: _Worker) -> CaseKey | None:
    """The probe case the worker was running when it stopped, when it was one."""
    step, job = worker.step, worker.job
    if job is None or step.stage is not Stage.RUNNING or not step.detail.startswith(PROBE_STEP):
        return None
    parts = step.subject.split("/")
    if len(parts) != 5 or parts[0] != job.name or not parts[3][1:].isdigit():
        return None
    key = CaseKey(parts[0], parts[1], parts[2], int(parts[3][1:]), parts[4])
    return None if key in worker.probed else key


class _End(enum.Enum):
    """How a worker's job stopped, when it did (see WorkerPool._end)."""

    DONE = "done"
    DIED = "died"
    CORRUPTED = "corrupted"
    TIMED_OUT = "timed_out"


CORRUPTED = "the worker's result channel was corrupted (a stray write from model code?)"


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Start a worker with SIGINT held back, in it and here.

    A Ctrl-C reaches the terminal's whole process group: a worker born with SIGINT
    blocked (it ignores it once it runs) prints no KeyboardInterrupt traceback from its
    imports. Here, one that arrives meanwhile is handed to the gate's handler only once
    the worker is on record (close() finds it), not in the middle of process.start(),
    which would leave a half-started child reading its spawn data from a closed pipe."""
    # Spawning starts multiprocessing's resource tracker the first time, and that
    # unblocks SIGINT after it; started first, it leaves the mask alone.
    resource_tracker.ensure_running()
    held: list[int] = []
    main = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not None)  # None: not set from Python
    previous = signal.signal(signal.SIGINT, lambda signum, _: held.append(signum)) \
        if main else None
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if main:
            signal.signal(signal.SIGINT, previous)
            if held and callable(previous):
                previous(held[0], None)
            elif held and previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)', re.M)
_STDLIB = sysconfig.get_paths()["stdlib"]


def crash_site(log: str) -> str:
    """Whose code a signal killed the worker in, from faulthandler's stack of the crashing
    thread (innermost frame first): the model's own code (`models.py:19, forward`) when
    the innermost frame outside Python's standard library is neither an installed package
    nor parity-gate; "" when the stack is missing or a library's, where the step names it.
    A native crash inside user code under the exporter is the model's, not torch.onnx's."""
    start = log.rfind("Current thread ")
    if start < 0:
        start = log.rfind("Fatal Python error")
    if start < 0:
        return ""
    for match in _FRAME.finditer(log, start):
        path = match["path"]
        if path.startswith(_STDLIB) and "-packages" not in path:
            continue  # ctypes, importlib, threading: the caller is what matters
        if "-packages" in path or "/parity_gate/" in path or path.startswith("<"):
            return ""
        return f"the model's own code ({Path(path).name}:{match['line']}, in {match['func']})"
    return ""


@dataclass
class _Worker:
    process: Any
    conn: Connection  # jobs to the worker (pickled: the gate writes them)
    results: Connection  # the read end of its result channel, waited on, read raw
    receiver: Receiver
    log_path: str
    spawned_at: float = 0.0
    job: Job | None = None
    sent: bool = False  # the job went to the worker (it does once the worker is ready)
    deadline: float = 0.0
    step: Step = field(default_factory=lambda: Step(Stage.STARTING))
    pending: list[CaseKey] = field(default_factory=list)
    probed: set[CaseKey] = field(default_factory=set)  # `shapes: auto` cases it reported
    log_start: int = 0  # where this job's output begins in the worker's log
    mark: float = 0.0  # when the worker last reported (a step or a result)
    untimed: list[CaseResult] = field(default_factory=list)
    ready: bool = False  # imports done (a warm worker starts the next job at once)
    done: Done | None = None  # how the job ended, as the worker said
    problem: str = ""  # why the channel was judged corrupted


@dataclass(frozen=True)
class Activity:
    """What a worker is doing now, for progress lines: `module` is the job's name."""

    module: str
    step: Step


Event = CaseResult | Finding | Activity


class WorkerPool:
    """Runs module jobs on `size` warm workers and yields results as they arrive."""

    def __init__(self, size: int = 1, threads: int | None = None,
                 warm: Sequence[str] = (), memory_limit: int | None = None,
                 start_timeout_s: float = STARTUP_S) -> None:
        """`memory_limit`: bytes each worker may allocate (default: its share of the
        machine's memory, see default_worker_memory); a job with a `memory_limit` of its
        own (a module's `worker_memory`) runs under that instead. `start_timeout_s`: how
        long a new worker may take to import its stack before its job fails."""
        self.size = max(1, size)
        self.warm = tuple(warm)
        self.memory_limit = memory_limit or default_worker_memory(self.size)
        self.threads = threads or max(1, usable_cores() // self.size)  # no oversubscription
        self.start_timeout_s = start_timeout_s
        remove_stale_folders()
        self._logdir = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
        self._workers: list[_Worker] = []
        self._live: list[_Worker] = []  # every worker started and not yet killed
        self._spawned = 0
        self._prepare: Callable[[Job], Job] | None = None

    def _spawn(self) -> _Worker:
        self._spawned += 1
        log_path = str(Path(self._logdir) / f"worker-{self._spawned}.log")
        job_reader, job_writer = _CTX.Pipe(duplex=False)
        result_reader, result_writer = _CTX.Pipe(duplex=False)
        key = new_key()
        process = _CTX.Process(target=_worker_main,
                               args=(job_reader, result_writer,
                                     WorkerSetup(key, log_path, self.threads, self.warm,
                                                 os.getpid(), self.memory_limit)),
                               daemon=True, name=f"parity-gate-worker-{self._spawned}")
        with _sigint_held():
            try:
                process.start()
                worker = _Worker(process, job_writer, result_reader,
                                 Receiver(result_reader.fileno(), key), log_path,
                                 spawned_at=time.monotonic())
                self._live.append(worker)
            finally:
                job_reader.close()
                result_writer.close()
        return worker

    @property
    def spawned(self) -> int:
        return self._spawned

    def run(self, jobs: Sequence[Job],
            prepare: Callable[[Job], Job] | None = None) -> Iterator[Event]:
        """Yield CaseResults, Findings and Activity (each step a worker reports) until
        every job is done. `prepare` turns a job into what is sent, at the moment it is
        sent: what the run learnt meanwhile can travel with it."""
        self._prepare = prepare
        queue = list(jobs)
        while len(self._workers) < min(self.size, len(queue)):
            self._workers.append(self._spawn())
        idle = list(self._workers)
        busy: list[_Worker] = []
        while queue or busy:
            while queue and idle:
                worker = idle.pop()
                if not worker.process.is_alive():
                    worker = self._replace(worker)
                self._assign(worker, queue.pop(0))
                busy.append(worker)
                if worker.job is not None and not worker.ready:
                    yield Activity(worker.job.name, worker.step)
            now = time.monotonic()
            timeout = max(0.0, min(w.deadline for w in busy) - now)
            ready = wait([w.results for w in busy] + [w.process.sentinel for w in busy],
                         timeout=min(timeout, 1.0))
            for worker in list(busy):
                end: _End | None = None
                if worker.results in ready or worker.process.sentinel in ready:
                    end, events = self._drain(worker)
                    yield from events
                if end is None and time.monotonic() > worker.deadline:
                    end, events = self._drain(worker)  # its last words first
                    yield from events
                    end = end or _End.TIMED_OUT
                if end is None:
                    continue
                busy.remove(worker)
                yield from self._end(worker, end)
                healthy = end is _End.DONE and worker.done is not None and not worker.done.ended
                idle.append(worker if healthy else self._replace(worker))

    def _end(self, worker: _Worker, end: _End) -> Iterator[Event]:
        """The cases a stopped job left unreported, each with why; nothing is dropped."""
        step = worker.step
        where = f"while {step.describe()}"
        if end is _End.DIED:
            yield from self._lost(worker, Outcome.CRASH, *self._death(worker))
        elif end is _End.CORRUPTED:
            yield from self._lost(worker, Outcome.CRASH, f"{CORRUPTED} {where}: {worker.problem}",
                                  Lost(step))
        elif end is _End.TIMED_OUT:
            self._dump_stacks(worker)
            if not worker.ready:
                limit = worker.job.timeout_s if worker.job else 0
                reason = (f"worker did not become ready within {self.start_timeout_s:g}s "
                          "(importing torch, onnxruntime and the job's code); the module's "
                          f"timeout of {limit:g}s starts when it is")
            else:
                limit = worker.job.timeout_s if worker.job else 0
                reason = f"module exceeded its timeout of {limit:g}s {where}"
            yield from self._lost(worker, Outcome.TIMEOUT, reason, Lost(step))
        elif worker.pending:  # Done, yet cases are left: model code ended the job early
            done = worker.done or Done("")
            reason = (f"{done.ended} {where}" if done.ended else
                      f"the worker ended its job without reporting this case {where}")
            yield from self._lost(worker, Outcome.CRASH, reason,
                                  Lost(step, exit_code=done.exit_code))
        else:
            yield from self._timed(worker)

    def _assign(self, worker: _Worker, job: Job) -> None:
        worker.job = job
        worker.pending = list(job.cases)
        worker.probed = set()
        worker.step = Step(Stage.STARTING)
        worker.untimed = []
        worker.done = None
        worker.sent = False
        worker.log_start = self._log_size(worker)
        if worker.ready:
            self._send(worker)
        else:  # the job goes when the worker is ready; until then, only the start-up bound
            worker.deadline = worker.spawned_at + self.start_timeout_s
            worker.mark = time.monotonic()

    def _send(self, worker: _Worker) -> None:
        """Hand the job to a ready worker: the module's time limit starts now."""
        assert worker.job is not None
        worker.sent = True
        worker.mark = time.monotonic()
        worker.deadline = worker.mark + worker.job.timeout_s
        worker.conn.send(self._prepare(worker.job) if self._prepare else worker.job)

    def _drain(self, worker: _Worker) -> tuple[_End | None, list[Event]]:
        """Handle every whole message there is; the job's end when it ended (None: still
        running)."""
        events: list[Event] = []
        worker.receiver.fill()
        while True:
            try:
                message = worker.receiver.next()
            except Corrupted as bad:
                worker.problem = str(bad)
                return _End.CORRUPTED, events + self._timed(worker)
            if message is None:
                break
            if isinstance(message, CaseResult) and not message.timings:
                if _accept(worker, message):  # timed when its batch is complete
                    worker.untimed.append(message)
                continue
            events += self._timed(worker)
            if isinstance(message, CaseResult):
                if _accept(worker, message):
                    events.append(message)
                worker.mark = time.monotonic()
            elif isinstance(message, Finding):
                events.append(message)
            elif isinstance(message, Step):
                worker.step = message
                worker.mark = time.monotonic()
                if worker.job is not None:
                    events.append(Activity(worker.job.name, message))
            elif isinstance(message, Ready):
                worker.ready = True
                if worker.job is not None and not worker.sent:
                    self._send(worker)
            elif isinstance(message, Fatal):
                last = message.traceback.strip().splitlines()[-1]
                worker.step = Step(Stage.STARTING, detail=f"(import failed: {last})")
                return _End.DIED, events
            elif isinstance(message, Done):
                worker.done = message
                return _End.DONE, events
        if worker.receiver.closed or not worker.process.is_alive():
            return _End.DIED, events + self._timed(worker)
        return None, events

    @staticmethod
    def _timed(worker: _Worker) -> list[Event]:
        """Results that failed before any timing (a build, export or session error) share
        the wall time since the step they failed in began, so none reads as 0 s."""
        batch, worker.untimed = worker.untimed, []
        if batch:
            share = max(time.monotonic() - worker.mark, 0.0) / len(batch)
            for case in batch:
                case.timings = {"wall_s": share}
            worker.mark = time.monotonic()
        return list(batch)

    def _lost(self, worker: _Worker, outcome: Outcome, reason: str,
              lost: Lost) -> Iterator[Event]:
        yield from self._timed(worker)
        detail = self._log_tail(worker)
        share = {"wall_s": max(time.monotonic() - worker.mark, 0.0) / max(len(worker.pending), 1)}
        for key in worker.pending:
            yield CaseResult(key, outcome, reason=reason, detail=detail, lost=lost,
                             timings=dict(share))
        worker.pending = []
        probe = _probe_in_flight(worker)
        if probe is not None:  # not planned, so not pending: said here or lost unseen
            yield CaseResult(probe, outcome, reason=reason, detail=detail, lost=lost,
                             timings=dict(share), probe=worker.step.detail[len(PROBE_STEP):-1])

    def _dump_stacks(self, worker: _Worker, wait_s: float = 2.0) -> None:
        """Ask a hung worker for its Python stacks (faulthandler, SIGUSR1) before the kill,
        so the timeout's evidence says where it hung."""
        if (not hasattr(signal, "SIGUSR1") or not worker.process.is_alive()
                or worker.process.pid is None):
            return
        before = self._log_size(worker)
        try:
            os.kill(worker.process.pid, signal.SIGUSR1)
        except OSError:
            return
        deadline = time.monotonic() + wait_s
        size = before
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = self._log_size(worker)
            if now > before and now == size:  # written, and no longer growing
                return
            size = now

    @staticmethod
    def _log_size(worker: _Worker) -> int:
        try:
            return Path(worker.log_path).stat().st_size
        except OSError:
            return 0

    def _death(self, worker: _Worker) -> tuple[str, Lost]:
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        where = f"while {worker.step.describe()}"
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            library = (crash_site(self._log_tail(worker, 64_000)) or worker.step.stage.library
                       if name != "SIGKILL" else "")
            extra = (" (likely out of memory)" if name == "SIGKILL" else
                     f" in {library}" if library else "")
            return (f"worker killed by {name}{extra} {where}",
                    Lost(worker.step, signal=name))
        if code is None:  # alive, but its result channel is closed (model code closed it)
            return f"worker stopped reporting: its result channel closed {where}", Lost(worker.step)
        return f"worker exited with code {code} {where}", Lost(worker.step, exit_code=code)

    def _log_tail(self, worker: _Worker, limit: int = 3000) -> str:
        """The end of what this job printed (not the output of earlier jobs on the worker)."""
        try:
            with open(worker.log_path, "rb") as fh:
                fh.seek(worker.log_start)
                data = fh.read()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", "replace")

    def _replace(self, worker: _Worker) -> _Worker:
        self._kill(worker)
        fresh = self._spawn()
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def _kill(self, worker: _Worker) -> None:
        """Kill the worker's process group and every process below it: the worker and any
        process its module started, one that left the group with setsid() included."""
        if worker in self._live:
            self._live.remove(worker)
        pid = worker.process.pid
        if pid is not None:
            kill_tree(pid)
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=10)
        worker.conn.close()
        worker.results.close()

    @property
    def pids(self) -> list[int]:
        """The current workers' process ids (tests check none outlives the pool)."""
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    @property
    def folder(self) -> str:
        return self._logdir

    def close(self) -> None:
        """Tell every worker to stop at once, give them one shared 2 s, then kill the rest
        (an interrupted run's reports wait 2 s, not 2 s per worker)."""
        workers = list(self._live)
        for worker in workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(None)
        deadline = time.monotonic() + 2.0
        for worker in workers:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
            self._kill(worker)
        self._workers = []
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
