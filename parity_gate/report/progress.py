"""Console progress: one line per finished case, a bar on terminals, a final table."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO

from parity_gate.model.results import CaseResult, RunResult, skip_reasons
from parity_gate.report.fmt import num, seconds

_LABEL = {"pass": "PASS", "skipped": "SKIP"}


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.start = time.monotonic()

    def skipped(self, cases: list[CaseResult]) -> None:
        """Skips known before running: one line per reason, not one per case."""
        self.done += len(cases)
        for reason, n in skip_reasons(cases).items():
            self.message(f"skipping {n} case(s): {reason}")

    def case(self, case: CaseResult) -> None:
        self.done += 1
        if self.quiet:
            return
        worst = case.worst()
        figure = f"max_abs={num(worst.max_abs)}" if worst is not None else ""
        t = case.timings
        took = t.get("run_s", 0.0) + t.get("compare_s", 0.0) + t.get("eager_s", 0.0)
        label = _LABEL.get(case.outcome.value, case.outcome.value.upper())
        note = case.reason if case.failed or case.outcome.value == "skipped" else ""
        line = f"[{self.done:>{len(str(self.total))}}/{self.total}] {label:<14} {case.id}"
        line += f"  {figure}  {seconds(took)}" if figure or took else ""
        if note:
            line += f"  — {note[:160]}"
        self._clear()
        print(line, file=self.stream, flush=True)
        self._bar()

    def message(self, text: str) -> None:
        if not self.quiet:
            self._clear()
            print(text, file=self.stream, flush=True)
            self._bar()

    def _bar(self) -> None:
        if not self.tty or not self.total:
            return
        width = 30
        filled = int(width * self.done / self.total)
        elapsed = time.monotonic() - self.start
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] "
                          f"{self.done}/{self.total} {seconds(elapsed)}")
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
