"""Isolate failures in a batch so one bad op never hides the others.

Pure control logic over an `attempt` (export, load or run a subset) and a
`blame` (which items an error names). Blamed items are split off first:
one retry of the rest instead of log2(n) halvings; when blame is silent or
names everything, the batch is halved. A failure that is a property of the
op itself (no translation exists for it) is `conclusive`: every blamed item
gets it without being tried alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from parity_gate.engine.stages import StageFailure

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Isolated(Generic[T, R]):
    """Subsets that went through, each with the attempt's result, and items that failed alone."""

    passed: list[tuple[list[T], R]] = field(default_factory=list)
    failed: list[tuple[T, StageFailure]] = field(default_factory=list)
    attempts: int = 0


def isolate(items: Sequence[T], attempt: Callable[[list[T]], R],
            blame: Callable[[StageFailure, list[T]], set[int]] | None = None) -> Isolated[T, R]:
    """Try `items` together; on failure split (by blame, else in halves) until each
    failing item has failed on its own and every other item has passed in some subset."""
    result: Isolated[T, R] = Isolated()
    work: list[list[T]] = [list(items)] if items else []
    while work:
        group = work.pop()
        result.attempts += 1
        try:
            result.passed.append((group, attempt(group)))
            continue
        except StageFailure as exc:
            failure = exc
        if len(group) == 1:
            result.failed.append((group[0], failure))
            continue
        guilty = _guilty(failure, group, blame)
        if guilty and failure.conclusive:
            result.failed.extend((group[i], failure.for_item(i)) for i in sorted(guilty))
            rest = [x for i, x in enumerate(group) if i not in guilty]
            if rest:
                work.append(rest)
        elif guilty and len(guilty) < len(group):
            work.append([x for i, x in enumerate(group) if i not in guilty])
            work.append([group[i] for i in sorted(guilty)])
        else:
            half = len(group) // 2
            work.append(group[half:])
            work.append(group[:half])
    return result


def _guilty(failure: StageFailure, group: list[T],
            blame: Callable[[StageFailure, list[T]], set[int]] | None) -> set[int]:
    if failure.conclusive and not failure.culprits:  # e.g. the provider did not come up
        return set(range(len(group)))
    named = set(failure.culprits)
    if blame is not None:
        try:
            named |= blame(failure, group)
        except Exception:  # blame is a heuristic; bisection is always correct
            named = set(failure.culprits)
    return {i for i in named if 0 <= i < len(group)}
