"""What a worker and the pool say to each other: typed messages, no torch.

A job is data (what to run, its planned cases, its deadline) plus `entry`,
the dotted name of the function a worker calls with it, so the pool never
imports the code it runs and no module imports the pool's caller back.

Jobs go to a worker pickled (the gate writes them). What comes back is never
unpickled: model code runs in the worker and can write into any file
descriptor it holds, so each message is a record's JSON in a frame the gate
authenticates with a key it gave that worker alone (`Channel`); a frame that
does not check out costs that worker's job, not the run.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import os
import struct
from collections.abc import Callable
from typing import Any, Protocol

from pydantic.dataclasses import dataclass

from parity_gate.model.findings import Finding, Stage, Step
from parity_gate.model.keys import CaseKey
from parity_gate.model.record import CONFIG, Record
from parity_gate.model.results import CaseResult


class Job(Protocol):
    """A picklable unit a worker runs (a module, or a batch of ops) and its cases."""

    @property
    def name(self) -> str: ...

    @property
    def entry(self) -> str:
        """`package.module:function`, called in the worker as function(job, emit)."""
        ...

    @property
    def cases(self) -> list[CaseKey]: ...

    @property
    def timeout_s(self) -> float: ...


@dataclass(frozen=True, config=CONFIG)
class Ready(Record):
    """The worker imported its stack and waits for jobs."""

    pid: int


@dataclass(frozen=True, config=CONFIG)
class Fatal(Record):
    """The worker could not start (its imports failed)."""

    traceback: str


@dataclass(frozen=True, config=CONFIG)
class Done(Record):
    """The worker finished the job named. `ended`: how the job ended early when it did
    (model code called sys.exit, raised KeyboardInterrupt), for the cases it left."""

    job: str
    ended: str = ""
    exit_code: int | None = None


Message = Ready | Fatal | Done | Step | CaseResult | Finding
Emit = Callable[[Message], None]

# Every message a worker may send, by the tag its frame carries: one record each.
KINDS: dict[str, type[Any]] = {"ready": Ready, "fatal": Fatal, "done": Done, "step": Step,
                               "case": CaseResult, "finding": Finding}
_TAGS = {cls: tag for tag, cls in KINDS.items()}


def ended_by(exc: BaseException) -> Done:
    """What a job's exception says about how it ended (the job name is filled by the caller).

    Entry points report every case and never raise an Exception; what gets past them is
    model code ending the process its own way (SystemExit, KeyboardInterrupt)."""
    if isinstance(exc, SystemExit):
        code = exc.code
        return Done("", "model code called sys.exit(" + ("" if code is None else repr(code))
                    + ")", code if isinstance(code, int) else None)
    if isinstance(exc, Exception):
        return Done("", f"internal error in the worker: {type(exc).__name__}: "
                        f"{str(exc)[:200]} (please report)")
    return Done("", f"model code raised {type(exc).__name__}"
                    + (f"({str(exc)[:200]!r})" if str(exc) else ""))


def entry_point(job: Job) -> Callable[[Any, Emit], None]:
    module, _, name = job.entry.partition(":")
    fn: Callable[[Any, Emit], None] = getattr(importlib.import_module(module), name)
    return fn


PROBE_STEP = "(probe "  # starts the detail of the step a probe case runs under


class CaseStream:
    """Worker side: each planned case is reported exactly once, as it ends.

    The pool turns whatever is still pending when a worker dies into
    crash/timeout results, so reporting each case the moment it is known is
    what keeps a crash from losing finished work.
    """

    def __init__(self, job: Any, emit: Emit) -> None:
        self.job = job
        self.emit = emit
        self.pending: list[CaseKey] = list(job.cases)
        self.probed: set[CaseKey] = set()  # `shapes: auto` cases, chosen after the export

    def step(self, stage: Stage, subject: str = "", detail: str = "",
             evidence: dict[str, str] | None = None) -> None:
        self.emit(Step(stage, subject, detail, evidence or {}))

    def result(self, result: CaseResult) -> None:
        if result.key in self.pending:
            self.pending.remove(result.key)
            self.emit(result)
        elif result.probe and result.key not in self.probed:  # not planned: once each
            self.probed.add(result.key)
            self.emit(result)

    def finding(self, finding: Finding) -> None:
        self.emit(finding)


# A frame: magic, payload length, HMAC-SHA256 over both and the payload, the payload
# (UTF-8 JSON: {"kind": tag, "body": the record's to_dict()}).
MAGIC = b"PGW\x01"
_HEAD = struct.Struct(">4sI")
_MAC_SIZE = hashlib.sha256().digest_size
MAX_FRAME = 64 * 1024 * 1024  # far above any result; a wild length is corruption, not a wait
KEY_SIZE = 32


class Corrupted(Exception):
    """A frame on a worker's result channel that is not one the worker wrote."""


def new_key() -> bytes:
    return os.urandom(KEY_SIZE)


def encode(message: Message, key: bytes) -> bytes:
    payload = json.dumps({"kind": _TAGS[type(message)], "body": message.to_dict()},
                         separators=(",", ":")).encode()
    head = _HEAD.pack(MAGIC, len(payload))
    return head + hmac.new(key, head + payload, hashlib.sha256).digest() + payload


class Sender:
    """Worker side of the result channel: whole frames, written to a pipe the worker
    keeps non-inheritable (a process the module starts does not get it)."""

    def __init__(self, fd: int, key: bytes) -> None:
        os.set_inheritable(fd, False)
        self.fd = fd
        self.key = key

    def __call__(self, message: Message) -> None:
        view = memoryview(encode(message, self.key))
        while view:
            view = view[os.write(self.fd, view):]


class Receiver:
    """Gate side: reads what is there without blocking and decodes frames as data."""

    def __init__(self, fd: int, key: bytes) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.key = key
        self.buffer = bytearray()
        self.closed = False  # the writing end is gone (the worker died)

    def fill(self) -> None:
        """Read everything available now."""
        while not self.closed:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
            self.buffer += chunk

    def next(self) -> Message | None:
        """The next whole message, None when none is complete; raises Corrupted."""
        buf = self.buffer
        if len(buf) < _HEAD.size:
            if buf and not MAGIC.startswith(bytes(buf[:len(MAGIC)])):
                raise Corrupted(f"bad frame magic {bytes(buf[:len(MAGIC)])!r}")
            return None
        magic, size = _HEAD.unpack_from(buf)
        if magic != MAGIC:
            raise Corrupted(f"bad frame magic {magic!r}")
        if size > MAX_FRAME:
            raise Corrupted(f"frame of {size} bytes (the bound is {MAX_FRAME})")
        end = _HEAD.size + _MAC_SIZE + size
        if len(buf) < end:
            return None
        head, mac = bytes(buf[:_HEAD.size]), bytes(buf[_HEAD.size:_HEAD.size + _MAC_SIZE])
        payload = bytes(buf[_HEAD.size + _MAC_SIZE:end])
        if not hmac.compare_digest(mac, hmac.new(self.key, head + payload,
                                                 hashlib.sha256).digest()):
            raise Corrupted("a frame failed authentication")
        del buf[:end]
        try:
            data = json.loads(payload)
            message: Message = KINDS[data["kind"]].from_dict(data["body"])
            return message
        except Exception as exc:  # authentic but unreadable: still not trusted further
            raise Corrupted(f"undecodable message: {type(exc).__name__}") from None
