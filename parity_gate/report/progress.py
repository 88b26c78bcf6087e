"""Console progress a person can trust: what is being done right now (one line per module
step), one line per finished case counted against the cases that will run (skips are
counted apart, never as progress), a bar on terminals, a final table. Everything it prints
is masked (report.secrets): a module's error message may quote a token."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO

from parity_gate.model.findings import Stage, Step
from parity_gate.model.results import CaseResult, RunResult, skip_reasons
from parity_gate.report.fmt import num, seconds
from parity_gate.report.secrets import MaskedStream

_LABEL = {"pass": "PASS", "skipped": "SKIP"}
# Steps that repeat per case (its line follows at once) or take no time: on the bar only.
_PER_CASE = (Stage.CASTING, Stage.RUNNING, Stage.RECHECKING)


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, quiet: bool = False,
                 skipped: int = 0) -> None:
        self.total = total  # cases that will run
        self.skipped_count = skipped
        self.done = 0
        self.stream = MaskedStream(stream or sys.stderr)
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.now = ""  # what is being done, shown on the bar
        self._last_step: dict[str, Stage] = {}
        self._last_bar = 0.0

    def skipped(self, cases: list[CaseResult]) -> None:
        """Skips known before running: one line per reason, not one per case."""
        for reason, n in skip_reasons(cases).items():
            self.message(f"skipping {n} case(s): {reason}")

    def started(self, modules: int, workers: int) -> None:
        skip = f"; {self.skipped_count} skipped (not counted below)" if self.skipped_count \
            else ""
        self.message(f"parity-gate: {self.total} cases to run in {modules} module(s) on "
                     f"{workers} worker(s){skip}; starting workers (importing torch and "
                     "onnxruntime takes a few seconds)")

    def step(self, module: str, step: Step) -> None:
        """A worker reported a step: a line when a module enters a new stage."""
        self.now = f"{module}: {step.describe()}"
        if self.quiet:
            return
        if step.stage not in _PER_CASE and self._last_step.get(module) != step.stage:
            self._last_step[module] = step.stage
            self._clear()
            print(f"[{module}] {step.describe()} ({seconds(self.elapsed)})", file=self.stream,
                  flush=True)
            self._bar(force=True)
        else:
            self._bar()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def case(self, case: CaseResult) -> None:
        self.done += 0 if case.probe else 1  # a probe is an extra case, chosen after export
        if self.quiet:
            return
        worst = case.worst()
        figure = f"max_abs={num(worst.max_abs)}" if worst is not None else ""
        t = case.timings
        took = t.get("run_s", 0.0) + t.get("compare_s", 0.0) + t.get("eager_s", 0.0)
        label = _LABEL.get(case.outcome.value, case.outcome.value.upper())
        note = case.reason if case.failed or case.outcome.value == "skipped" else ""
        count = f"{self.done:>{len(str(self.total))}}/{self.total}"
        line = f"[{'probe' if case.probe else count}] {label:<14} {case.id}"
        line += f"  {figure}  {seconds(took)}" if figure or took else ""
        if note:
            line += f"  — {note[:160]}"
        self._clear()
        print(line, file=self.stream, flush=True)
        self._bar(force=True)

    def message(self, text: str) -> None:
        if not self.quiet:
            self._clear()
            print(text, file=self.stream, flush=True)
            self._bar(force=True)

    def _bar(self, force: bool = False) -> None:
        if not self.tty or not self.total:
            return
        now = time.monotonic()
        if not force and now - self._last_bar < 0.2:  # throttled
            return
        self._last_bar = now
        width = 30
        filled = int(width * self.done / self.total)
        doing = f"  {self.now}"[:60] if self.now else ""
        self.stream.write(f"\r\033[K[{'#' * filled}{'.' * (width - filled)}] "
                          f"{self.done}/{self.total} {seconds(self.elapsed)}{doing}")
        self.stream.flush()

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")

    def final(self, run: RunResult) -> None:
        if self.quiet:
            return
        self._clear()
        rows: dict[str, Counter[str]] = {}
        for case in run.cases:
            rows.setdefault(case.key.module, Counter())[case.outcome.value] += 1
        names = sorted({o for c in rows.values() for o in c})
        width = max([len(m) for m in rows] + [6])
        header = f"{'module':<{width}}  " + "  ".join(f"{n:>9}" for n in names)
        print("\n" + header, file=self.stream)
        print("-" * len(header), file=self.stream)
        for module, counter in rows.items():
            print(f"{module:<{width}}  " + "  ".join(f"{counter.get(n, 0):>9}" for n in names),
                  file=self.stream)
        print(file=self.stream, flush=True)
