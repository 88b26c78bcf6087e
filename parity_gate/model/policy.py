"""Gate policy names, stdlib-only so the Action can validate inputs before installing."""

from __future__ import annotations

FAIL_ON = ("regressions", "any-failure", "never")
"""What blocks: regressions only, any failing case, or nothing (report only)."""
