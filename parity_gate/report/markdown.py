"""The markdown summary (step summary and PR comment body): verdict first, one row per
module, per-case detail and evidence folded under each module, trimmed whole blocks at a
time so the verdict, the module table and a visible "trimmed" note always survive.

Every piece of user, exporter or runtime text goes through `model.text` (HTML escaped,
`|` escaped, mentions, references and autolinks broken), so what GitHub renders is what
the run said and nothing in it is live: results.json may come from an untrusted fork.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass

from parity_gate.compare.task import PERCENT
from parity_gate.model.findings import Finding
from parity_gate.model.gate import FIXED, Deltas, GateDecision, counts_line
from parity_gate.model.localisation import Localisation
from parity_gate.model.outcomes import Outcome
from parity_gate.model.performance import Latency
from parity_gate.model.results import CaseResult, RunResult, absent_provider
from parity_gate.model.text import (
    clip,
    code_span,
    escape_html,
    html_line,
    md_cell,
    md_code,
    md_link,
    md_text,
)
from parity_gate.report import bisect as bisect_md
from parity_gate.report import performance as perf
from parity_gate.report import quantized as quant_report
from parity_gate.report.fmt import num, plural, seconds
from parity_gate.report.modules import (
    Cause,
    ModuleView,
    artifact_path,
    gate_text,
    module_views,
    needed_text,
    short_diagnosis,
    tail_lines,
    upstream_status,
    worst_error_text,
)

STEP_SUMMARY_LIMIT = 1024 * 1024 - 4096  # GitHub rejects step summaries over 1 MiB
CASE_ROWS = 25  # per failing module; the rest are in the artifact
FINDING_ROWS = 50
PASSING_ROWS = 400
EVIDENCE_LINES = 30
DELTA_ROWS = 30
ARTIFACT = "`results.json` and `report.html` in the reports artifact"


def decision_of(run: RunResult) -> GateDecision:
    """The run's recorded decision, or the plain any-failure one when it has none."""
    return run.gate or GateDecision(blocking=[c.id for c in run.failures])


@dataclass(frozen=True)
class _Block:
    text: str
    label: str = ""  # what the trimmed note says was left out; "" = always kept


# ---------------------------------------------------------------- headline and verdict


def what_happened(views: list[ModuleView]) -> str:
    """`2 modules crash, 1 times out, 1 mismatches`: modules by each failing outcome they
    have (a module whose float16 eager run fails and whose float32 export fails is counted
    under both: by its worst alone, the export error went unsaid)."""
    counts = Counter(o for v in views for o in {c.outcome for c in v.failing})
    parts = []
    for i, (outcome, n) in enumerate(sorted(counts.items(), key=lambda p: -p[0].severity)):
        verb = outcome.info.verbs[0 if n == 1 else 1]
        parts.append(f"{plural(n, 'module')} {verb}" if i == 0 else f"{n} {verb}")
    return ", ".join(parts)


def headline(run: RunResult, views: list[ModuleView] | None = None) -> str:
    views = module_views(run) if views is None else views
    decision = decision_of(run)
    skipped = sum(1 for c in run.cases if c.outcome is Outcome.SKIPPED)
    ran = len(run.cases) - skipped
    # an optional provider this machine lacks is said once, under Run, not in every headline
    skipped -= sum(1 for c in run.cases if absent_provider(c))
    tail = f" ({skipped} skipped)" if skipped else ""
    failing = len(run.failures)
    if run.interrupted:
        verdict = run.verdict
        planned = "?" if verdict.planned is None else verdict.planned
        return (f"## ⚠️ parity-gate: interrupted — {verdict.finished} of {planned} "
                f"planned cases finished{tail}")
    if decision.baseline is not None:
        blocking = set(decision.blocking)
        new = [v for v in views if any(c.id in blocking for c in v.failing)]
        counts = counts_line(decision)
        if not decision.blocking:
            return f"## ✅ parity-gate: nothing blocking — {counts}{tail}"
        word = "not blocking (--fail-on never)" if decision.passed else "blocking"
        icon = "⚠️" if decision.passed else "❌"
        return f"## {icon} parity-gate: {what_happened(new)} — {word}; {counts}{tail}"
    if failing == 0:
        if not ran:
            icon, word = ("✅", "allowed") if decision.passed else ("❌", "blocking")
            return f"## {icon} parity-gate: no case ran — {word}{tail}"
        return f"## ✅ parity-gate: all {ran} cases match eager{tail}"
    word = "blocking" if not decision.passed else "not blocking (--fail-on never)"
    icon = "❌" if not decision.passed else "⚠️"
    skip = f"; {skipped} skipped" if skipped else ""
    return (f"## {icon} parity-gate: {what_happened(views)} — {word} "
            f"({failing} of {ran} cases fail{skip})")


def _verdict(run: RunResult) -> str:
    v = run.verdict
    return (f"**Verdict: {md_text(v.result)}** — {md_cell(v.why, 300)} · "
            f"{seconds(run.duration_s)}")


# ---------------------------------------------------------------- the cause, first


def cause_line(cause: Cause, upstream: str = "", run_url: str | None = None) -> str:
    """One failing module as a reviewer needs it first: where (`file:line` and the code),
    which op, whose defect, what upstream says, and where the repro is. Code is shown in code
    spans, as typed, so a path or an op can be copied."""
    head = f"**{md_text(cause.module)}** — {md_text(cause.counted)} ({cause.outcome.value})"
    if not cause.located:
        return f"- {head}: {md_text(clip(cause.reason, 300))}"
    where = (f"{code_span(cause.source)} {code_span(clip(cause.code, 120))}"
             if cause.code else code_span(cause.source)) if cause.source else "in the model"
    onnx = f" → ONNX {md_text(cause.onnx)}" if cause.onnx else ""
    by = f" ({code_span(cause.owned_by)})" if cause.owned_by else ""
    parts = [f"{head}: {where}: {code_span(cause.op)}{onnx}",
             f"owner: **{md_text(cause.owner)}**{by}"]
    if cause.fix:
        parts.append(f"fix: {md_text(clip(cause.fix, 400))}")
    if upstream:
        parts.append(f"upstream: {md_text(clip(upstream, 200))}")
    elif cause.known:
        parts.append(f"known exporter defect {code_span(cause.known)}")
    if cause.repro:
        found = md_link("the reports of this run", run_url) if run_url else "the reports artifact"
        parts.append(f"repro {code_span(cause.repro)} in {found}")
    return "- " + " · ".join(parts)


def _causes(run: RunResult, views: list[ModuleView], decision: GateDecision,
            run_url: str | None) -> str:
    """The failing modules' causes, blocking ones first and open; the rest (known under the
    baseline, or `--fail-on never`) folded, since they do not decide the merge."""
    failing = [v for v in views if v.worst is not None]
    if not failing:
        return ""
    blocking = set(decision.blocking) if not decision.passed else set()
    first = [v for v in failing if any(c.id in blocking for c in v.failing)]
    rest = [v for v in failing if v not in first]

    def line(view: ModuleView) -> str:
        cause = view.cause
        assert cause is not None
        return cause_line(cause, upstream_status(view, run.upstream), run_url)

    out: list[str] = []
    if first:
        out += ["### Why it blocks", "", *(line(v) for v in first[:CASE_ROWS])]
        if len(first) > CASE_ROWS:
            out.append(f"- _{len(first) - CASE_ROWS} more modules in {ARTIFACT}._")
        out.append("")
    if rest:
        out += [f"<details><summary>{plural(len(rest), 'failing module')} that "
                f"{'does' if len(rest) == 1 else 'do'} not block</summary>", "",
                *(line(v) for v in rest[:CASE_ROWS]), "", "</details>", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- the module table


def _module_table(views: list[ModuleView], decision: GateDecision, cap: int) -> str:
    """One row per module. The diagnosis of a located failure is its culprit in short (the
    cause line above says it in full, the raw error is in the module's fold); the time
    column appears only when some module's ratio is stable enough to act on."""
    gate = decision.baseline is not None
    timed = any(lat is not None and lat.stable for v in views[:cap] for lat in [slowest(v)])
    head = "| module | outcome | failing | worst error | needed tolerance | diagnosis |"
    rule = "|---|---|---|---|---|---|"
    if timed:
        head, rule = head + " onnx/eager time |", rule + "---|"
    if gate:
        head, rule = head + " baseline |", rule + "---|"
    rows = [head, rule]
    for v in views[:cap]:
        outcome = f"**{v.outcome.value}**" if v.worst is not None else v.outcome.value
        row = (f"| {md_code(v.name)} | {outcome} | {len(v.failing)}/{v.ran} | "
               f"{md_cell(worst_error_text(v))} | {md_cell(needed_text(v), 200)} | "
               f"{md_cell(short_diagnosis(v), 300)} |")
        if timed:
            row += f" {_time_cell(slowest(v))} |"
        rows.append(row + (f" {md_cell(gate_text(v, decision))} |" if gate else ""))
    text = "\n".join(rows) + "\n"
    if len(views) > cap:
        text += (f"\n_{len(views) - cap} more modules in {ARTIFACT}._\n")
    return text


def task_table(run: RunResult) -> str:
    """Task metrics beside the tensor checks: per task case, both sides' metric, the
    paired delta with its interval, the discordant samples and the verdict; and whether
    the same module's tensors matched, since a model whose tensors differ while its task
    holds (float16, quantized) is judged by this table."""
    cases = [c for c in run.cases if c.task is not None]
    if not cases:
        return ""
    rows = ["### Task metrics", "",
            "| case | metric | eager | onnx | Δ (interval) | discordant | tensors | verdict |",
            "|---|---|---|---|---|---|---|---|"]
    for c in cases[:CASE_ROWS]:
        t = c.task
        assert t is not None
        unit = " pt" if t.metric in PERCENT else ""
        tensors = [o for o in run.cases if o.task is None and o.key.module == c.key.module
                   and o.key.dtype == c.key.dtype and o.key.provider == c.key.provider
                   and o.outcome is not Outcome.SKIPPED]
        bad = [o for o in tensors if o.failed]
        said = "—" if not tensors else f"{len(bad)}/{len(tensors)} fail" if bad else "match"
        if bad and t.verdict == "pass":
            said += " (the task holds)"
        disc = (f"{t.eager_only} / {t.onnx_only} (p={t.p_value:.2g})"
                if t.p_value is not None else "—")
        verdict = {"pass": "pass", "drop": "**drop**", "inconclusive": "**inconclusive**"}
        rows.append(f"| {md_code(c.id)} | {md_text(t.metric)} | {t.eager:.4g} | {t.onnx:.4g} | "
                    f"{t.delta:+.3g}{unit} ({t.low:+.3g} to {t.high:+.3g}, "
                    f"{t.level:.0%}) | {disc} | {md_text(said)} | "
                    f"{verdict.get(t.verdict, t.verdict)} (budget {t.budget:g}{unit}) |")
    notes = [f"- {md_code(c.id)}: {md_cell(c.task.summary, 400)}"
             + (f"; flipped samples: {', '.join(str(i) for i in c.task.flipped[:30])}"
                + (" …" if len(c.task.flipped) > 30 else "") if c.task.flipped else "")
             for c in cases[:CASE_ROWS] if c.task is not None and c.task.verdict != "pass"]
    return "\n".join([*rows, "", *notes, ""]) + "\n"


def _time_cell(lat: Latency | None) -> str:
    """The module's time ratio where it was measured well enough to read, else why not."""
    return perf.ratio_text(lat) if lat is None or lat.stable else "not stable"


def slowest(view: ModuleView) -> Latency | None:
    """The module's surest slowdown: the ONNX/eager time ratio whose interval has the
    highest lower bound (None when nothing was timed)."""
    timed = [c.performance.latency for c in view.cases
             if c.performance is not None and c.performance.latency is not None]
    return max(timed, key=lambda t: (t.low, t.ratio)) if timed else None


# ---------------------------------------------------------------- per-module folds


def _case_row(case: CaseResult, view: ModuleView, gate: bool) -> str:
    worst = case.worst()
    bad = worst is not None and not worst.passed
    figures = (f"{num(worst.max_abs)} | {num(worst.max_rel)} | "
               f"{worst.ulp if worst.ulp is not None else '—'}" if bad and worst is not None
               else "— | — | —")
    why = (" — ".join([f"{worst.name}: {worst.reason}", *case.notes])
           if bad and worst is not None else case.explanation)
    ruling = view.rulings.get(case.id) if gate else None
    cell = f" {md_cell(f'{ruling.category}: {ruling.why}', 200)} |" if ruling else (
        " — |" if gate else "")
    return (f"| {md_code(case.id)} | **{case.outcome.value}** | {figures} | "
            f"{md_cell(why, 400)} |" + cell)


def _evidence(view: ModuleView) -> list[str]:
    out: list[str] = []
    for detail, cases in view.evidence():
        ids = ", ".join(c.key.junit_name for c in cases[:3])
        more = f" and {len(cases) - 3} more" if len(cases) > 3 else ""
        out += [f"<details><summary>Evidence: last lines of the worker's output "
                f"({html_line(cases[0].outcome.value)}: {html_line(ids)}{more})</summary>",
                "", f"<pre>{escape_html(tail_lines(detail, EVIDENCE_LINES))}</pre>", "",
                "</details>", ""]
    silent = [c for c in view.failing if not c.detail.strip()
              and c.outcome in (Outcome.CRASH, Outcome.TIMEOUT)]
    if silent and not out:
        killed = silent[0].lost is not None and silent[0].lost.signal == "SIGKILL"
        out += ["_The worker printed nothing before it "
                + ("was killed (SIGKILL leaves no trace)._" if killed else "stopped._"), ""]
    return out


def _module_fold(view: ModuleView, gate: bool) -> str:
    counts = ", ".join(f"{n} {o.value}" for o, n in
                       sorted(Counter(c.outcome for c in view.failing).items(),
                              key=lambda p: -p[0].severity))
    culprit = next((c.localisation.culprit for c in view.failing
                    if c.localisation is not None and c.localisation.culprit is not None), None)
    lines = [f"<details><summary><b>{html_line(view.name)}</b>: {counts} "
             f"of {plural(view.ran, 'case')}</summary>", "",
             *([f"**{md_cell(culprit.describe(), 400)}**", ""] if culprit else []),
             "| case | outcome | max abs | max rel | ULP | why |" + (" baseline |" if gate else ""),
             "|---|---|---|---|---|---|" + ("---|" if gate else "")]
    lines += [_case_row(c, view, gate) for c in view.failing[:CASE_ROWS]]
    if len(view.failing) > CASE_ROWS:
        lines += ["", f"_{len(view.failing) - CASE_ROWS} more in the artifact "
                  f"({ARTIFACT})._"]
    lines.append("")
    lines += _evidence(view)
    for case in view.failing[:CASE_ROWS]:
        lines += _localisation(case)
    lines += ["</details>", ""]
    return "\n".join(lines)


def _localisation(case: CaseResult) -> list[str]:
    """What the follow-up checks found: findings first, every check's status, the curve."""
    loc = case.localisation
    if loc is None:
        return []
    out = [f"<details><summary>Localisation of {html_line(case.key.junit_name)}: "
           f"{html_line('; '.join(loc.summary()[:2]) or 'no cause found')}</summary>", ""]
    out += [f"- {md_cell(line, 400)}" for line in loc.summary()]
    if loc.known_op is not None:
        out.append(f"- known op-sweep finding {md_code(loc.known_op.finding)}: "
                   f"{md_cell(loc.known_op.reason, 300)}")
    if loc.node_repro:
        out.append(f"- culprit's nodes alone: "
                   f"{code_span(artifact_path(loc.node_repro + '/repro.py'))} in the reports "
                   "(needs torch, numpy and onnxruntime; exits 1: it reproduces)")
    if loc.repro:
        out.append(f"- repro: {code_span(artifact_path(loc.repro + '/repro.py'))} in the "
                   "reports (needs numpy and onnxruntime)")
    out += ["", "| check | status | seconds | note |", "|---|---|---|---|"]
    out += [f"| {s.check.value} | {s.status.value} | {s.seconds:.2f} | "
            f"{md_cell(_in_reports(s.note, loc), 240)} |" for s in loc.steps]
    if loc.curve:
        out += ["", "| layer | class | max abs | needed atol | within tolerance |",
                "|---|---|---|---|---|"]
        out += [f"| {md_code(p.module)} | {md_cell(p.kind, 60)} | {num(p.max_abs)} | "
                f"{num(p.needed_atol)} | {'yes' if p.passed else '**no**'} |" for p in loc.curve]
        out += ["", *_curve_chart(case)]
    out += ["", "</details>", ""]
    return out


def _in_reports(note: str, loc: Localisation) -> str:
    """A step's note with the runner's artifact folders written as the reports name them."""
    for folder in sorted({f for f in (loc.node_repro, loc.repro) if f}, key=len, reverse=True):
        note = note.replace(folder, artifact_path(folder))
    return note


def _curve_chart(case: CaseResult) -> list[str]:
    """The per-layer error curve as a mermaid xychart (GitHub renders mermaid blocks)."""
    loc = case.localisation
    assert loc is not None
    points = [(p.module, p.max_abs) for p in loc.curve]
    logs = [round(math.log10(v), 2) if v and v > 0 else -12.0 for _, v in points]
    names = ", ".join(json.dumps(_label(m)) for m, _ in points)
    return ["```mermaid", "xychart-beta",
            f'    title "log10 max |error| by layer ({_label(case.key.dtype)})"',
            f"    x-axis [{names}]",
            f'    y-axis "log10 max abs error" {min([*logs, -8.0]):.0f} --> '
            f"{max([*logs, 0.0]) + 0.5:.1f}",
            f"    line [{', '.join(f'{v:g}' for v in logs)}]", "```"]


def _label(name: str) -> str:
    """A layer or dtype name as a mermaid label: what a module path holds (`h.0.attn`), the
    rest replaced, so no backtick run can close the block and no quote end the label."""
    return _LABEL.sub("_", name)[:80]


_LABEL = re.compile(r"[^A-Za-z0-9_.:/-]")


def _generation(run: RunResult) -> str:
    """Every generation case (those that raised or were skipped too, so the count is
    results.json's): prompt, steps, where the sequences part, the two tokens there and the
    culprit; per failing case (and the first passing one) the step table and a mermaid
    chart of the per-step error."""
    cases = [c for c in run.cases if c.generation is not None or "@generate=" in c.key.inputs]
    if not cases:
        return ""
    lines = ["<details><summary><b>Generation parity</b>: "
             f"{sum(c.outcome is not Outcome.PASS for c in cases)} of "
             f"{plural(len(cases), 'case')} do not pass</summary>",
             "", "| case | outcome | prompt length | steps | first divergent step | tokens "
             "(eager → ONNX) | first failing step | worst step error | culprit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in cases[:CASE_ROWS]:
        lines.append(_generation_row(c))
    shown = [c for c in cases if c.generation is not None and c.failed][:3] or [
        c for c in cases if c.generation is not None][:1]
    for c in shown:
        g = c.generation
        assert g is not None
        lines += ["", f"{md_code(c.id)}: {md_cell(c.reason, 400)}", "",
                  "| step | past length | max abs | needed atol | within tolerance | tokens |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {s.step} | {s.past_length} | {num(s.max_abs)} | {num(s.needed_atol)} | "
                  f"{'yes' if s.passed else '**no**'} | "
                  f"{'agree' if s.tokens_agree else 'tie' if s.tie else '**differ**'} |"
                  for s in g.per_step]
        if g.error_step is not None:
            lines.append(f"| {g.error_step} | {g.error_past_length} | — | — | "
                         "**ONNX Runtime raised** | — |")
        culprit = c.localisation.culprit if c.localisation is not None else None
        if culprit is not None:
            lines += ["", f"**{md_cell(culprit.describe(), 400)}**"]
        lines += ["", *_step_chart(c)]
    lines += ["</details>", ""]
    return "\n".join(lines)


def _generation_row(c: CaseResult) -> str:
    """One generation case's row; a case with no record (an error before its first step,
    or skipped) says why in its outcome and leaves the step columns empty."""
    g = c.generation
    culprit = c.localisation.culprit if c.localisation is not None else None
    where = md_cell(f"{culprit.source or culprit.scope}: {culprit.aten}", 80) \
        if culprit is not None else "—"
    if g is None:
        return (f"| {md_code(c.id)} | {c.outcome.value} | — | — | — | — | — | — | "
                f"{md_cell(c.reason, 120)} |")
    worst = max((s.max_abs for s in g.per_step if s.max_abs is not None), default=None)
    diverged = "—" if g.first_divergent_step is None else \
        f"{g.first_divergent_step}" + (" (tie)" if g.parted_after_tie else "")
    pair = g.tokens
    tokens = f"{pair[0]} → {pair[1]}" if pair else "—"
    failing = (f"{g.first_failing_step}" if g.first_failing_step is not None else
               f"{g.error_step} (ONNX Runtime error)" if g.error_step is not None else "—")
    return (f"| {md_code(c.id)} | {c.outcome.value} | {g.prompt_length} | {g.steps} | "
            f"{diverged} | {tokens} | {failing} | {num(worst)} | {where} |")


def _step_chart(case: CaseResult) -> list[str]:
    """The per-step error of one generation case as a mermaid xychart."""
    g = case.generation
    assert g is not None
    logs = [round(math.log10(s.max_abs), 2) if s.max_abs and s.max_abs > 0 else -12.0
            for s in g.per_step]
    return ["```mermaid", "xychart-beta",
            f'    title "log10 max |logits error| by step ({_label(case.key.dtype)})"',
            f"    x-axis [{', '.join(str(s.step) for s in g.per_step)}]",
            f'    y-axis "log10 max abs error" {min([*logs, -8.0]):.0f} --> '
            f"{max([*logs, 0.0]) + 0.5:.1f}",
            f"    line [{', '.join(f'{v:g}' for v in logs)}]", "```"]


# ---------------------------------------------------------------- the rest


def _findings(run: RunResult) -> str:
    """Errors, then warnings about a failing module, open; warnings that bear on no failing
    case (a passing module's training mode, an all-NaN fixture) folded under one fold, so
    the cause of a failure is not one line among many of equal weight."""
    if not run.findings:
        return ""
    failing = {c.key.module for c in run.failures}
    ordered = sorted(run.findings, key=lambda f: (f.severity != "error", f.module, f.kind))
    shown = [f for f in ordered if f.severity == "error" or f.module in failing]
    folded = [f for f in ordered if f not in shown]

    def item(f: Finding) -> str:
        icon = "❗" if f.severity == "error" else "⚠️"
        fix = f" — fix: {md_cell(f.hazard.fix, 300)}" if f.hazard is not None and f.hazard.fix \
            else ""
        return (f"- {icon} {md_code(f.module)} **{md_cell(f.kind, 60)}**: "
                f"{md_cell(f.message, 400)}{fix}")

    lines = ["### Findings", ""] if shown else []
    lines += [item(f) for f in shown[:FINDING_ROWS]]
    if folded:
        room = max(0, FINDING_ROWS - len(shown))
        lines += ["", f"<details><summary>{plural(len(folded), 'warning')} on modules that "
                  "pass (none bears on a failing case)</summary>", "",
                  *(item(f) for f in folded[:room]), "", "</details>"]
    if len(ordered) > FINDING_ROWS:
        lines.append(f"\n_{len(ordered) - FINDING_ROWS} more findings in {ARTIFACT}._")
    return "\n".join(lines) + "\n"


def _skip_reasons(run: RunResult) -> list[tuple[str, int]]:
    return list(run.skip_reasons().items())


def _run_section(run: RunResult) -> str:
    counts = " · ".join(f"{k} {v}" for k, v in run.counts().items()) or "no cases"
    lines = ["### Run", "", f"- **Outcomes:** {counts}",
             f"- **Time:** {seconds(run.duration_s)}"]
    versions = ", ".join(f"{k} {run.versions[k]}" for k in ("torch", "onnx", "onnxscript",
                                                           "onnxruntime", "onnxruntime-gpu")
                         if k in run.versions)
    if versions:
        lines.append(f"- **Versions:** {md_cell(versions, 300)}")
    gpu = run.versions.get("gpu")
    if isinstance(gpu, dict):
        lines.append(f"- **GPU:** {md_cell(gpu.get('name'))} (driver "
                     f"{md_cell(gpu.get('driver'))}, CUDA {md_cell(gpu.get('cuda'))})")
    if run.shard:
        lines.append(f"- **Shard:** {md_cell(run.shard)}")
    reasons = _skip_reasons(run)
    if reasons:
        total = sum(n for _, n in reasons)
        lines.append(f"- **Skipped:** {plural(total, 'case')}")
        lines += [f"  {i}. {plural(n, 'case')}: {md_cell(reason, 400)}"
                  for i, (reason, n) in enumerate(reasons, 1)]
    return "\n".join(lines) + "\n"


def _passing_fold(run: RunResult) -> str:
    others = [c for c in sorted(run.cases, key=lambda c: c.key.sort_key) if not c.failed]
    if not others:
        return ""
    number = {reason: i for i, (reason, _) in enumerate(_skip_reasons(run), 1)}
    lines = [f"<details><summary>{len(others)} passing or skipped cases</summary>", "",
             "| case | outcome | max abs | max rel |", "|---|---|---|---|"]
    for c in others[:PASSING_ROWS]:
        worst = c.worst()
        figures = (f"{num(worst.max_abs)} | {num(worst.max_rel)}" if worst is not None
                   else "— | —")
        outcome = (f"skipped (reason {number[c.reason]})" if c.outcome is Outcome.SKIPPED
                   and c.reason in number else c.outcome.value)
        lines.append(f"| {md_code(c.id)} | {outcome} | {figures} |")
    if len(others) > PASSING_ROWS:
        lines += ["", f"_{len(others) - PASSING_ROWS} more in {ARTIFACT}._"]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _gate_sections(decision: GateDecision) -> str:
    """With a baseline: what the reader must act on besides failures (fixed, stale)."""
    if decision.baseline is None:
        return ""
    out: list[str] = []
    blocking = set(decision.blocking) if not decision.passed else set()
    fixed = decision.of(FIXED)
    if fixed:
        word = " — blocking under --strict" if fixed[0].id in blocking else ""
        out += [f"### Fixed ({len(fixed)}): remove from the baseline{word}", ""]
        out += [f"- {md_code(r.id)} now passes: remove baseline entry "
                f"{md_code(r.entry or r.id)} ({md_cell(r.where)})" for r in fixed[:100]]
        if len(fixed) > 100:
            out.append(f"- _{len(fixed) - 100} more in {ARTIFACT}._")
        out.append("")
    if decision.stale:
        out += [f"### Stale baseline entries ({len(decision.stale)})", ""]
        out += [f"- {md_code(s.entry)} ({md_cell(s.where)}) matches no case: remove it"
                for s in decision.stale[:100]]
        out.append("")
    return "\n".join(out)


def _delta_section(deltas: Deltas | None) -> str:
    """What changed against `--compare-to`: outcome changes first, then error growth."""
    if deltas is None:
        return ""
    head = f"### Changes since {md_code(deltas.path)}"
    if not deltas.changes:
        return f"{head}\n\nNo case changed ({deltas.unchanged} compared).\n"
    out = [head, "", f"{len(deltas.changes)} changed, {deltas.unchanged} unchanged.", "",
           "| case | outcome | max abs | max rel | growth |", "|---|---|---|---|---|"]
    for d in deltas.changes[:DELTA_ROWS]:
        outcome = (f"{md_text(d.old_outcome or '(new case)')} → "
                   f"**{md_text(d.new_outcome or '(gone)')}**"
                   if d.outcome_changed else md_text(d.new_outcome))
        growth = "n/a" if d.growth is None else f"{num(d.growth)}×"
        out.append(f"| {md_code(d.id)} | {outcome} | {num(d.old.max_abs)} → "
                   f"{num(d.new.max_abs)} | {num(d.old.max_rel)} → {num(d.new.max_rel)} | "
                   f"{growth} |")
    if len(deltas.changes) > DELTA_ROWS:
        out.append(f"\n_{len(deltas.changes) - DELTA_ROWS} more changes in the JSON report "
                   "(`gate.compare_to`)._")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- assembly and trimming


def render(run: RunResult, limit: int = STEP_SUMMARY_LIMIT, run_url: str | None = None) -> str:
    """The summary of a run and its gate decision, at most `limit` UTF-8 bytes.

    The cause of each failing module leads (culprit line, op, owner, upstream), then the
    module table. Blocks are kept or left out whole (never cut inside a `<details>` fold);
    the verdict, the causes, the module table and, when anything was left out, a note saying
    what always stay. `limit`: 1 MiB for a step summary, less for a PR comment. `run_url`:
    the Actions run whose artifact holds the reports (the job summary and the comment link
    the same one).
    """
    views = module_views(run)
    decision = decision_of(run)
    failing = [v for v in views if v.worst is not None]

    def essential(cap: int) -> list[str]:
        return [headline(run, views) + "\n", _verdict(run) + "\n",
                _causes(run, views, decision, run_url),
                _module_table(views, decision, cap), task_table(run),
                quant_report.markdown(run), _gate_sections(decision),
                _delta_section(decision.compare_to), perf.markdown(run, run.gate),
                bisect_md.markdown(run.bisect)]  # `parity-gate bisect`: which version broke it

    gate = decision.baseline is not None
    optional = ([_Block(_module_fold(v, gate), "case detail") for v in failing]
                + [_Block(_generation(run), "generation"),
                   _Block(_findings(run), "findings"), _Block(_run_section(run), "run details"),
                   _Block(_passing_fold(run), "passing and skipped cases")])
    reserve = 1024  # room for the trimmed note
    cap = len(views)
    kept = [t for t in essential(cap) if t]
    while _size(kept) > limit - reserve and cap > 1:
        cap = max(1, cap // 2)
        kept = [t for t in essential(cap) if t]
    used = _size(kept)
    tail: list[str] = []
    left: Counter[str] = Counter()
    for block in optional:
        if not block.text:
            continue
        size = len(block.text.encode("utf-8")) + 1
        if used + size <= limit - reserve:
            tail.append(block.text)
            used += size
        else:
            left[block.label] += 1
    if left or cap < len(views):
        kept.append(_trimmed_note(left, len(views) - cap, limit))
    return "\n".join(kept + tail)


def _trimmed_note(left: Counter[str], modules_left: int, limit: int) -> str:
    parts = [f"{n} module" + ("s'" if n > 1 else "'") + " case detail"
             if label == "case detail" else label for label, n in left.items()]
    if modules_left:
        parts.insert(0, f"{modules_left} rows of the module table")
    return (f"> **Summary trimmed** to fit the {limit // 1024} KiB limit: left out "
            f"{', '.join(parts)}. Everything is in {ARTIFACT}.\n")


def _size(parts: list[str]) -> int:
    return len("\n".join(parts).encode("utf-8"))


def trim(text: str, limit: int = STEP_SUMMARY_LIMIT) -> str:
    """Cut a summary written elsewhere (the op sweep's) to `limit` bytes at a line break,
    closing any fold the cut left open so the trimmed note stays visible."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[: limit - 512].decode("utf-8", "ignore")
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    open_folds = cut.count("<details") - cut.count("</details>")
    closing = "\n\n</details>" * max(0, open_folds)
    return (cut + closing + "\n\n> **Summary trimmed** to fit GitHub's 1 MiB step-summary "
            "limit; the full report is in the JSON artifact.\n")
