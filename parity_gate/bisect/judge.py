"""Judge a probe's run against the bad run, case by case, by failure signature.

A case's signature is what a maintainer would call "the same bug": its outcome, and
for op-sweep cases the defect signature the upstream search files (op, arguments,
symptom, owner), for export failures the root exception's type and the op it names,
for wrong values the outputs that differ. Messages and numbers are left out: they
change between releases while the bug stays. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from parity_gate.model.bisect import Verdict
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.ops.signatures import signature_of

PASSING = frozenset({Outcome.PASS})


def failure_signature(case: CaseResult) -> str:
    """`outcome[: detail]`; "pass" for a passing case."""
    if case.outcome in PASSING:
        return "pass"
    parts = [case.outcome.value]
    if case.op is not None:
        sig = signature_of(case)
        parts.append(f"{sig.owner.value} {sig.symptom.value} {sig.overload}"
                     + (f" {sig.kernel}" if sig.kernel else ""))
    elif case.cause is not None:
        parts.append(f"{case.cause.kind}" + (f" at {case.cause.op}" if case.cause.op else ""))
    elif case.comparisons:
        failing = sorted(c.name for c in case.comparisons if not c.passed)
        if failing:
            parts.append("outputs " + ",".join(failing))
    return ": ".join(parts)


def judge(bad: Mapping[str, str], probe: Mapping[str, CaseResult]) -> tuple[Verdict, str, str]:
    """(verdict, the signature to show, why for a skip) of one probe over the selected cases.

    bad: each selected case's signature in the bad run. Bad when a case fails as it
    did there and none fails differently; good when every case passes; otherwise skip
    (a case that fails another way, or did not run): that version cannot be judged."""
    seen: list[tuple[str, str, str]] = []  # (case, signature, class)
    for case_id, want in bad.items():
        got = probe.get(case_id)
        if got is None:
            seen.append((case_id, "missing", "other"))
            continue
        sig = failure_signature(got)
        if got.outcome is Outcome.SKIPPED:
            seen.append((case_id, f"skipped: {got.reason}", "other"))
        elif sig == "pass":
            seen.append((case_id, sig, "pass"))
        elif sig == want:
            seen.append((case_id, sig, "bad"))
        else:
            seen.append((case_id, sig, "other"))
    other = [s for s in seen if s[2] == "other"]
    if other:
        case_id, sig, _ = other[0]
        reason = (f"{case_id}: {sig}, not the bad run's {bad[case_id]}"
                  + (f" (and {len(other) - 1} more)" if len(other) > 1 else ""))
        if sig == "missing":
            reason = f"{case_id}: no result in the probe's run"
        return Verdict.SKIP, sig, reason
    failing = [s for s in seen if s[2] == "bad"]
    if failing:
        return Verdict.BAD, failing[0][1], ""
    return Verdict.GOOD, "", ""


# What the gate's own nondeterminism check writes when a second eager run on the same inputs
# differs from the first (engine.references.nondeterministic, via the float64 referee).
NONDETERMINISTIC = "eager is not deterministic"


def nondeterminism(case: CaseResult) -> str:
    """The gate's evidence that `case` does not repeat ("" when it has none): its second
    eager run on the same inputs gave other outputs, so no release can be blamed."""
    ref = case.reference
    if ref is not None and NONDETERMINISTIC in ref.error:
        return ref.error
    return ""


def flaky_cases(bad: Mapping[str, str], probe: Mapping[str, CaseResult],
                repeat: bool) -> dict[str, str]:
    """Cases this probe shows do not repeat, with the evidence: the gate's nondeterminism
    finding on any probe; on a repeat of the bad set, also a case that passed there."""
    out: dict[str, str] = {}
    for case_id, want in bad.items():
        got = probe.get(case_id)
        if got is None:
            continue
        if nondeterminism(got):
            out[case_id] = nondeterminism(got)
        elif repeat and failure_signature(got) == "pass":
            out[case_id] = (f"the bad run failed ({want}); a probe of the same bad set "
                            "passed (or that probe differs from the bad run in a package "
                            "not bisected)")
    return out
