"""The one sandbox for code the gate runs on a model's behalf: its workers (engine.pool) and
the crash repros it replays (localise.crash) alike.

Such a process
- leads its own process group, and at its end the group and every process below it
  (one that left the group with setsid() included) are killed: nothing it started
  outlives it;
- gets SIGKILL from the kernel when the gate dies (PR_SET_PDEATHSIG), and is watched
  by a tiny process that then kills whatever it started too (a worker forks a sentinel;
  a command run with `run` starts under `launch`, which stays its parent);
- runs under a memory limit (RLIMIT_DATA: the module's `worker_memory`, else its
  share of the machine), so an oversized allocation fails in it, not the machine;
- has a deadline: the module's timeout;
- never holds a credential of any kind (`model.secrets.is_credential`: the GitHub and
  Actions tokens, every `INPUT_*`, cloud keys, any `*_TOKEN`, `*_SECRET`, `*_KEY`, ...,
  and the names `PARITY_GATE_MASK_ENV` lists): a model, a factory or a repro script is
  code the gate did not write. A gate run downloads nothing, so a model needs none.

Stdlib only: `python -m parity_gate.engine.sandbox` is the launcher a replayed repro
starts through, before it execs the script.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from parity_gate.model.secrets import remember_secrets, without_credentials

_PR_SET_PDEATHSIG = 1


def drop_credentials() -> None:
    """Remove every credential from this process's environment (a worker, before any
    model code runs)."""
    remember_secrets()  # what it writes is still masked
    keep = without_credentials(os.environ)
    for name in [n for n in os.environ if n not in keep]:
        os.environ.pop(name, None)


def die_with(gate_pid: int) -> None:
    """Own process group; SIGKILL from the kernel when the gate dies (Linux)."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != gate_pid:  # the gate died before the death signal was armed
        os._exit(1)


def start_sentinel(gate_pid: int, folder: str | None = None) -> None:
    """Fork a watcher that, when the gate dies, removes `folder` (the pool's; None: none)
    and kills this process's group: it, the processes it started and the watcher. When
    this process dies first it kills the group too (no child outlives it)."""
    watched = os.getpid()
    if os.fork():
        return
    try:
        _close_inherited()  # the gate must see the watched process's pipes close
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # The descendants, noted every half second: one that left the group with setsid()
        # is reparented away when the watched process dies, so it is killed by its pid.
        below: list[int] = []
        gate_gone = None
        while gate_gone is None:
            below = [p for p in descendants(watched) if p != os.getpid()]
            gate_gone = _wait_either(gate_pid, watched, timeout=0.5)
        if gate_gone and folder:
            shutil.rmtree(folder, ignore_errors=True)
        for pid in below:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def _close_inherited() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2:
            with contextlib.suppress(OSError):
                os.close(fd)


def _wait_either(gate_pid: int, watched_pid: int, timeout: float) -> bool | None:
    """Wait up to `timeout` s for the gate or the watched process to end; True when the
    gate did, False when the watched one did, None when both still run."""
    try:
        gate, watched = os.pidfd_open(gate_pid), os.pidfd_open(watched_pid)
    except (AttributeError, OSError):  # no pidfd: poll (a zombie gate counts as gone)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive(gate_pid):
                return True
            if os.getppid() != watched_pid:
                return False
            time.sleep(0.1)
        return None
    try:
        ready, _, _ = select.select([gate, watched], [], [], timeout)
    finally:
        os.close(gate)
        os.close(watched)
    return (gate in ready) if ready else None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc's parent links (Linux; [] elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                    ppid = int(fh.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int, below: Sequence[int] = ()) -> None:
    """Kill the process group `pid` leads and every process below it (`below`: ones noted
    earlier, which may have been reparented away since)."""
    below = [*below, *descendants(pid)]
    with contextlib.suppress(OSError):  # not (yet) its own group leader, or gone
        os.killpg(pid, signal.SIGKILL)
    for child in below:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)


def limit_memory(limit: int | None) -> None:
    """Cap this process's data segment (RLIMIT_DATA: heap and private writable mappings,
    not shared libraries or the address space CUDA reserves), so an oversized allocation
    fails as MemoryError/bad_alloc in the case that made it instead of the kernel's OOM
    killer taking the worker and every case it had left. The hard limit stays, so a later
    job may raise it again; None lifts the soft limit to the hard one."""
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        soft = hard if limit is None else limit if hard == resource.RLIM_INFINITY \
            else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (ImportError, OSError, ValueError, AttributeError):
        pass  # not POSIX, or not allowed: the deadline and the group kill still apply


def enter(gate_pid: int, memory_limit: int | None, folder: str | None = None) -> None:
    """Put this fresh process in the sandbox (see the module docstring)."""
    die_with(gate_pid)
    start_sentinel(gate_pid, folder)
    limit_memory(memory_limit)
    drop_credentials()


@dataclass(frozen=True)
class Ended:
    """How a sandboxed command ended: its exit status (negative: the signal that killed
    it; None: it ran past its deadline) and the tail of its stderr."""

    returncode: int | None
    stderr: str


def run(argv: Sequence[str], cwd: Path, timeout_s: float, memory_limit: int | None,
        env: Mapping[str, str] | None = None, stdout: bool = False) -> Ended:
    """Run `argv` in the sandbox, from `cwd`, with no credential in its environment; when
    it ends, or at `timeout_s`, its group and everything below it are killed (a child it
    left running too). Its output goes to a file, not a pipe: a child that keeps the pipe
    open cannot hold the gate. `stdout`: its standard output is kept too, before its
    error output's tail (`Ended.stderr` holds both)."""
    launcher = [sys.executable, "-c", _LAUNCH, _package_root(), str(os.getpid()),
                str(memory_limit or 0), *argv]
    noted: list[int] = []
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(launcher, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=err if stdout else subprocess.DEVNULL, stderr=err,
                                env=without_credentials(os.environ if env is None else env),
                                start_new_session=True)
        deadline = time.monotonic() + timeout_s
        code: int | None = None
        try:
            while True:
                noted += [p for p in descendants(proc.pid) if p not in noted]
                try:
                    code = proc.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        break
        finally:
            kill_tree(proc.pid, noted)
            proc.wait()
        err.seek(0)
        tail = err.read()[-(20000 if stdout else 4000):].decode("utf-8", "replace")
    return Ended(code, tail)


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


# The launcher: the sandbox, then the command; the gate's own sys.path finds this module.
_LAUNCH = ("import sys; sys.path.insert(0, sys.argv[1]); "
           "from parity_gate.engine.sandbox import launch; launch(sys.argv[2:])")
_PR_SET_CHILD_SUBREAPER = 36


def launch(args: Sequence[str]) -> None:
    """`GATE_PID MEMORY_LIMIT ARGV...`: run ARGV in the sandbox and end as it did.

    This process watches it: a subreaper (Linux), so a process ARGV starts stays below it
    even when it leaves the group with setsid() and its parent dies; when ARGV ends, or
    the gate does, every process below is killed before this one ends. ARGV gets SIGKILL
    when this process dies."""
    gate_pid, limit, argv = int(args[0]), int(args[1]), list(args[2:])
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    with contextlib.suppress(OSError, AttributeError):
        if libc is not None:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    limit_memory(limit or None)
    drop_credentials()
    me = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            with contextlib.suppress(OSError, AttributeError):
                if libc is not None:
                    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() == me:
                os.execv(argv[0], argv)
        finally:
            os._exit(127)
    status = None
    while status is None and os.getppid() == gate_pid:  # the gate gone: reparented
        pid, found = os.waitpid(child, os.WNOHANG)
        status = found if pid else None
        if status is None:
            time.sleep(0.05)
    for _ in range(500):  # every process below, reparented to this one or not
        below = descendants(me)
        if not below:
            break
        for pid in below:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        time.sleep(0.01)
    code = os.waitstatus_to_exitcode(status) if status is not None else 1
    if code < 0:  # end by the same signal, without a core file of this process
        with contextlib.suppress(ImportError, OSError, ValueError):
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-code, signal.SIG_DFL)
        os.kill(me, -code)
        code = 128 - code
    os._exit(code)
