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
