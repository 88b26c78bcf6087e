"""Warm worker processes that survive modules and are replaced only when they die.

A fresh interpreter per export pays the torch import and the exporter's
first-call warm-up every time, so workers are reused. Each job (one module)
has a deadline; a worker that misses it, segfaults, aborts or is OOM-killed is
replaced, and the cases it never reported become timeout/crash results.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from parity_gate.engine.protocol import Done, Fatal, Job, Ready, entry_point
from parity_gate.model.findings import Finding, Lost, Stage, Step
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult

_CTX = mp.get_context("spawn")


def _worker_main(conn: Connection, log_path: str, threads: int, warm: Sequence[str]) -> None:
    """Worker loop: import the heavy stack once, then serve jobs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    try:
        import logging

        logging.disable(logging.WARNING)
        import torch

        torch.set_num_threads(threads)
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401

        for name in warm:  # the caller's job code, imported once per worker
            importlib.import_module(name)
    except BaseException:
        conn.send(Fatal(traceback.format_exc()))
        return
    conn.send(Ready(os.getpid()))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        job: Job = message
        try:
            entry_point(job)(job, conn.send)
        except BaseException:  # an entry point must not raise; its cases become crashes
            traceback.print_exc()
        conn.send(Done(job.name))


@dataclass
class _Worker:
    process: Any
    conn: Connection
    log_path: str
    job: Job | None = None
    deadline: float = 0.0
    step: Step = field(default_factory=lambda: Step(Stage.STARTING))
    pending: list[CaseKey] = field(default_factory=list)
    started: float = 0.0


Event = CaseResult | Finding


class WorkerPool:
    """Runs module jobs on `size` warm workers and yields results as they arrive."""

    def __init__(self, size: int = 1, threads: int | None = None,
                 warm: Sequence[str] = ()) -> None:
        self.size = max(1, size)
        self.warm = tuple(warm)
        cpus = os.cpu_count() or 1
        self.threads = threads or max(1, cpus // self.size)
        self._logdir = tempfile.mkdtemp(prefix="parity-gate-workers-")
        self._workers: list[_Worker] = []
        self._spawned = 0

    def _spawn(self) -> _Worker:
        self._spawned += 1
        log_path = str(Path(self._logdir) / f"worker-{self._spawned}.log")
        parent, child = _CTX.Pipe()
        process = _CTX.Process(target=_worker_main, args=(child, log_path, self.threads, self.warm),
                               daemon=True, name=f"parity-gate-worker-{self._spawned}")
        process.start()
        child.close()
        return _Worker(process, parent, log_path)

    @property
    def spawned(self) -> int:
        return self._spawned

    def run(self, jobs: Sequence[Job]) -> Iterator[Event]:
        """Yield CaseResults and Findings until every job is done."""
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
            now = time.monotonic()
            timeout = max(0.0, min(w.deadline for w in busy) - now)
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy],
                         timeout=min(timeout, 1.0))
            for worker in list(busy):
                finished: bool | None = False
                if worker.conn in ready or worker.process.sentinel in ready:
                    finished, events = self._drain(worker)
                    yield from events
                    if finished is None:  # died
                        yield from self._lost(worker, Outcome.CRASH, *self._death(worker))
                        busy.remove(worker)
                        idle.append(self._replace(worker))
                        continue
                if finished:
                    busy.remove(worker)
                    idle.append(worker)
                elif time.monotonic() > worker.deadline:
                    _, events = self._drain(worker)
                    yield from events
                    limit = worker.job.timeout_s if worker.job else 0
                    yield from self._lost(worker, Outcome.TIMEOUT,
                                          f"module exceeded its timeout of {limit:g}s "
                                          f"while {worker.step.describe()}", Lost(worker.step))
                    busy.remove(worker)
                    idle.append(self._replace(worker))

    def _assign(self, worker: _Worker, job: Job) -> None:
        worker.job = job
        worker.pending = list(job.cases)
        worker.step = Step(Stage.STARTING)
        worker.started = time.monotonic()
        # The first job also pays the worker's torch import; give it that time.
        worker.deadline = worker.started + job.timeout_s
        worker.conn.send(job)

    def _drain(self, worker: _Worker) -> tuple[bool | None, list[Event]]:
        """Read everything available; (True, ...) when the job is done, None if the worker died."""
        events: list[Event] = []
        while True:
            try:
                if not worker.conn.poll(0):
                    break
                message = worker.conn.recv()
            except (EOFError, OSError):
                return None, events
            if isinstance(message, CaseResult):
                if message.key in worker.pending:
                    worker.pending.remove(message.key)
                    events.append(message)
            elif isinstance(message, Finding):
                events.append(message)
            elif isinstance(message, Step):
                worker.step = message
            elif isinstance(message, Ready):
                worker.deadline = time.monotonic() + (worker.job.timeout_s if worker.job else 0)
            elif isinstance(message, Fatal):
                last = message.traceback.strip().splitlines()[-1]
                worker.step = Step(Stage.STARTING, detail=f"(import failed: {last})")
                return None, events
            elif isinstance(message, Done):
                return True, events
        if not worker.process.is_alive():
            return None, events
        return False, events

    def _lost(self, worker: _Worker, outcome: Outcome, reason: str,
              lost: Lost) -> Iterator[Event]:
        detail = self._log_tail(worker)
        for key in worker.pending:
            yield CaseResult(key, outcome, reason=reason, detail=detail, lost=lost)
        worker.pending = []

    def _death(self, worker: _Worker) -> tuple[str, Lost]:
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        where = f"while {worker.step.describe()}"
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            extra = " (likely out of memory)" if name == "SIGKILL" else ""
            return (f"worker killed by {name}{extra} {where}",
                    Lost(worker.step, signal=name))
        return f"worker exited with code {code} {where}", Lost(worker.step, exit_code=code)

    def _log_tail(self, worker: _Worker, limit: int = 3000) -> str:
        try:
            data = Path(worker.log_path).read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", "replace")

    def _replace(self, worker: _Worker) -> _Worker:
        self._kill(worker)
        fresh = self._spawn()
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    @staticmethod
    def _kill(worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=10)
        worker.conn.close()

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
                worker.process.join(timeout=2)
            except OSError:
                pass
            self._kill(worker)
        self._workers = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
