"""Errors that map to exit codes: user mistakes (2) versus the tool's own bugs (3)."""

from __future__ import annotations

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class UserError(Exception):
    """A problem in the user's input; printed as one line per problem, exit 2, no traceback."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def ended_how(exc: BaseException) -> str:
    """How user code (a factory, a forward) ended, in words for a one-line error: `exited
    with status 0 (sys.exit; ...)`, `was interrupted (KeyboardInterrupt)`, else `raised
    Type: first line`."""
    if isinstance(exc, SystemExit):
        return f"exited with status {exc.code!r} (sys.exit; expected it to return)"
    if isinstance(exc, KeyboardInterrupt):
        return "was interrupted (KeyboardInterrupt)"
    first = next((ln for ln in str(exc).splitlines() if ln.strip()), "")
    return f"raised {type(exc).__name__}" + (f": {first[:200]}" if first else "")
