"""The markdown summary: verdict first, failing cases as a table, passes folded away."""

from __future__ import annotations

from parity_gate.model.gate import (
    FIXED,
    KNOWN,
    REGRESSION,
    Deltas,
    GateDecision,
    Ruling,
    counts_line,
)
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import md_cell as _cell
from parity_gate.report.fmt import num, seconds

STEP_SUMMARY_LIMIT = 1024 * 1024 - 4096  # GitHub rejects step summaries over 1 MiB


def decision_of(run: RunResult) -> GateDecision:
    """The run's recorded decision, or the plain any-failure one when it has none."""
    return run.gate or GateDecision(blocking=[c.id for c in run.failures])


def _headline(run: RunResult, decision: GateDecision) -> str:
    total = len(run.cases)
    failed = len(run.failures)
    skipped = sum(1 for c in run.cases if c.outcome.value == "skipped")
    ran = total - skipped
    tail = f"; {skipped} skipped" if skipped else ""
    if run.interrupted:
        return f"## ⚠️ parity-gate: interrupted after {ran} of {total} cases{tail}"
    if decision.baseline is not None:
        return _gate_headline(decision, ran, tail)
    if failed == 0:
        return f"## ✅ parity-gate: all {ran} cases match eager{tail}"
    word = "blocking" if not decision.passed else "not blocking"
    return f"## ❌ parity-gate: {failed} of {ran} cases differ from eager — {word}{tail}"


def _failure_row(case: CaseResult) -> str:
    worst = case.worst()
    if worst is not None and not worst.passed:
        figures = (f"{num(worst.max_abs)} | {num(worst.max_rel)} | "
                   f"{worst.ulp if worst.ulp is not None else 'n/a'}")
        why = f"{worst.name}: {worst.reason}"
    else:
        figures = "n/a | n/a | n/a"
        why = case.explanation
    return f"| `{case.id}` | **{case.outcome.value}** | {figures} | {_cell(why)} |"


def _passing_row(case: CaseResult) -> str:
    worst = case.worst()
    abs_err = num(worst.max_abs) if worst is not None else "n/a"
    rel_err = num(worst.max_rel) if worst is not None else "n/a"
    return f"| `{case.id}` | {case.outcome.value} | {abs_err} | {rel_err} | {_cell(case.reason)} |"


def _skip_lines(run: RunResult) -> list[str]:
    """One line per distinct skip reason, instead of the same reason on every row."""
    return [f"**Skipped {n}:** {_cell(reason, 300)}"
            for reason, n in run.skip_reasons().items()]


def render(run: RunResult) -> str:
    """The summary of a run and of the gate decision it carries."""
    decision = decision_of(run)
    lines = [_headline(run, decision), ""]
    counts = ", ".join(f"{k}: {v}" for k, v in run.counts().items())
    versions = ", ".join(f"{k} {run.versions[k]}" for k in ("torch", "onnx", "onnxscript",
                                                           "onnxruntime", "onnxruntime-gpu")
                         if k in run.versions)
    lines.append(f"**Outcomes:** {counts or 'no cases'} · **Time:** {seconds(run.duration_s)}")
    if versions:
        lines.append(f"**Versions:** {versions}")
    gpu = run.versions.get("gpu")
    if isinstance(gpu, dict):
        lines.append(f"**GPU:** {gpu.get('name')} (driver {gpu.get('driver')}, "
                     f"CUDA {gpu.get('cuda')})")
    lines += _skip_lines(run)
    lines.append("")
    lines += _gate_sections(decision)
    lines += _delta_section(decision.compare_to)
    failures = run.failures
    if failures:
        lines += ["### Failing cases", "",
                  "| case | outcome | max abs | max rel | ULP | why |",
                  "|---|---|---|---|---|---|"]
        lines += [_failure_row(c) for c in failures]
        lines.append("")
        lines += _failure_details(failures)
    if run.findings:
        lines += ["### Findings", ""]
        for f in run.findings:
            icon = "❗" if f.severity == "error" else "⚠️"
            lines.append(f"- {icon} `{f.module}` **{f.kind}**: {_cell(f.message, 400)}")
        lines.append("")
    others = [c for c in sorted(run.cases, key=lambda c: c.key.sort_key) if not c.failed]
    if others:
        lines += [f"<details><summary>{len(others)} passing or skipped cases</summary>", "",
                  "| case | outcome | max abs | max rel | note |", "|---|---|---|---|---|"]
        lines += [_passing_row(c) for c in others]
        lines += ["", "</details>", ""]
    return "\n".join(lines)


def _failure_details(failures: list[CaseResult]) -> list[str]:
    """One compact block per failing comparison: the evidence a reviewer reads first."""
    out: list[str] = []
    for case in failures[:50]:
        bad = [c for c in case.comparisons if not c.passed]
        if not bad:
            continue
        out.append(f"<details><summary><code>{case.id}</code>: {case.outcome.value}"
                   "</summary>\n")
        for c in bad:
            out.append(f"- {_cell(c.headline(), 400)}")
            hist = getattr(c, "histogram", None)
            if hist:
                out.append("  - error histogram: " + ", ".join(f"{k}: {v}"
                                                               for k, v in hist.items() if v))
        out += ["", "</details>", ""]
    return out


def _gate_headline(decision: GateDecision, ran: int, tail: str) -> str:
    counts = f"{counts_line(decision)}; {ran} cases run{tail}"
    if not decision.blocking:
        return f"## ✅ parity-gate: nothing blocking — {counts}"
    if decision.passed:
        return f"## ⚠️ parity-gate: {len(decision.blocking)} failing, not blocking " \
               f"(--fail-on never) — {counts}"
    return f"## ❌ parity-gate: {len(decision.blocking)} blocking — {counts}"


def _gate_sections(decision: GateDecision) -> list[str]:
    """With a baseline: regressions, then fixed, then known, then stale entries."""
    if decision.baseline is None:
        return []
    out: list[str] = []
    blocking = set(decision.blocking) if not decision.passed else set()
    regressions = decision.of(REGRESSION)
    if regressions:
        out += [f"### Regressions ({len(regressions)})", "",
                "| case | outcome | max abs (recorded) | max rel (recorded) | why |",
                "|---|---|---|---|---|"]
        out += [_ruling_row(r, r.why) for r in regressions]
        out.append("")
    fixed = decision.of(FIXED)
    if fixed:
        word = " — blocking under --strict" if fixed[0].id in blocking else ""
        out += [f"### Fixed ({len(fixed)}): remove from the baseline{word}", ""]
        out += [f"- `{r.id}` now passes: remove baseline entry `{r.entry}` ({r.where})"
                for r in fixed]
        out.append("")
    known = decision.of(KNOWN)
    if known:
        word = "blocking: --fail-on any-failure" if known[0].id in blocking else "not blocking"
        out += [f"### Known failures ({len(known)}, {word})", "",
                "| case | outcome | max abs (recorded) | max rel (recorded) | reason |",
                "|---|---|---|---|---|"]
        out += [_ruling_row(r, r.why.removeprefix("known failure within its record: "))
                for r in known]
        out.append("")
    if decision.stale:
        out += [f"### Stale baseline entries ({len(decision.stale)})", ""]
        out += [f"- `{s.entry}` ({s.where}) matches no case: remove it" for s in decision.stale]
        out.append("")
    return out


def _ruling_row(r: Ruling, why: str) -> str:
    def pair(name: str) -> str:
        now, was = getattr(r.figures, name), getattr(r.recorded, name)
        return num(now) + (f" ({num(was)})" if r.entry is not None else "")

    return f"| `{r.id}` | {r.outcome} | {pair('max_abs')} | {pair('max_rel')} | {_cell(why)} |"


DELTA_ROWS = 30


def _delta_section(deltas: Deltas | None) -> list[str]:
    """What changed against `--compare-to`: outcome changes first, then error growth."""
    if deltas is None:
        return []
    head = f"### Changes since `{deltas.path}`"
    if not deltas.changes:
        return [head, "", f"No case changed ({deltas.unchanged} compared).", ""]
    out = [head, "", f"{len(deltas.changes)} changed, {deltas.unchanged} unchanged.", "",
           "| case | outcome | max abs | max rel | growth |", "|---|---|---|---|---|"]
    for d in deltas.changes[:DELTA_ROWS]:
        outcome = (f"{d.old_outcome or '(new case)'} → **{d.new_outcome or '(gone)'}**"
                   if d.outcome_changed else str(d.new_outcome))
        growth = "n/a" if d.growth is None else f"{num(d.growth)}×"
        out.append(f"| `{d.id}` | {outcome} | {num(d.old.max_abs)} → {num(d.new.max_abs)} | "
                   f"{num(d.old.max_rel)} → {num(d.new.max_rel)} | {growth} |")
    if len(deltas.changes) > DELTA_ROWS:
        out.append(f"\n_{len(deltas.changes) - DELTA_ROWS} more changes in the JSON report "
                   "(`gate.compare_to`)._")
    out.append("")
    return out


def trim(text: str, limit: int = STEP_SUMMARY_LIMIT) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[:limit].decode("utf-8", "ignore")
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    return cut + "\n\n_(summary trimmed to fit GitHub's 1 MiB step-summary limit; the full " \
                 "report is in the JSON artifact)_\n"
