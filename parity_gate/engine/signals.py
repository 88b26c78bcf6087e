"""The gate's SIGINT/SIGTERM rule, shared by `parity-gate run` and `parity-gate ops`.

The first signal stops the work (it raises `Interrupted` where the gate is);
every further one, and any that arrives while the gate shuts down, is noted
and ignored until the reports are on disk: a second Ctrl-C, or CI's SIGTERM
followed by another, must not lose them. The exit status is then 128 + the
first signal (`Signals.stopped`). Workers are not affected: they lead their
own process groups and ignore SIGINT (engine.pool), the gate closes them.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def notice(self, prog: str, finished: int, planned: int | None) -> str:
        """The line `run` and `ops` print when a signal stops them."""
        return (f"{prog}: {self} received; writing the reports of the {finished} of "
                f"{planned} planned cases that finished (further signals are ignored until "
                "they are written)")


class Signals:
    """SIGINT/SIGTERM stop the run once; every further one, and any during shutdown, is
    noted and ignored until the reports are on disk (a second Ctrl-C must not lose them)."""

    def __init__(self, armed: bool = True) -> None:
        self.first: int | None = None
        self.running = True
        self.armed = armed  # False: a first signal is noted, and raised by arm()
        self.later: list[int] = []

    def __call__(self, signum: int, _frame: Any) -> None:
        if self.running and self.first is None:
            self.first = signum
            if self.armed:
                raise Interrupted(signum)
            return
        self.later.append(signum)

    def arm(self) -> None:
        """From here a signal stops the work; one that came before stops it now (a run
        that is still being set up has no reports to write yet)."""
        self.armed = True
        if self.first is not None and self.running:
            raise Interrupted(self.first)

    def shutting_down(self) -> None:
        self.running = False

    @property
    def stopped(self) -> int | None:
        """The signal that stopped the run, or arrived while it shut down (None: none)."""
        return self.first if self.first is not None else (self.later[0] if self.later else None)


@contextmanager
def interruptible(armed: bool = True) -> Iterator[Signals]:
    """Installed for the whole run, reports included; restored after, unless a signal
    stopped the run: then the process is on its way out with that signal's exit code, and
    a later signal (the user pressing Ctrl-C again) is ignored rather than killing it with
    another code between here and its exit. Not `armed`: a signal waits for
    `Signals.arm()`."""
    state = Signals(armed)
    previous = {s: signal.signal(s, state) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield state
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if state.stopped is not None else h)
