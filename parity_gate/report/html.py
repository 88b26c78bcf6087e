"""`report.html`: one self-contained page (inline CSS and SVG, no script, no network) for
people who would rather look than read: the verdict, a module × dtype × provider grid
coloured by outcome, and for each failing case its error histogram, its worst error
against the tolerance and the error by batch size of its group.

Pure: a function of the result model (and where its modules are declared).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

from parity_gate.model.comparison import Comparison
from parity_gate.model.gate import KNOWN, GateDecision
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import escape_html as esc
from parity_gate.model.text import html_code_ticks, strip_control
from parity_gate.report import performance as perf
from parity_gate.report import quantized as quant_report
from parity_gate.report.fmt import num, seconds
from parity_gate.report.locate import Located
from parity_gate.report.markdown import decision_of, headline
from parity_gate.report.modules import (
    ModuleView,
    gate_text,
    module_views,
    needed_text,
    short_diagnosis,
    tail_lines,
    upstream_status,
    worst_error_text,
)

CASE_SECTIONS = 100  # failing cases drawn in full; the others are listed in a table
OUTPUTS_PER_CASE = 4
W, H = 360, 170  # chart size (px)


def colour(outcome: Outcome) -> str:
    """Green pass, grey skip, orange wrong values, red errors, dark red crash/timeout."""
    info = outcome.info
    if not info.failed:
        return "#1a7f37" if outcome is Outcome.PASS else "#8c959f"
    if info.junit == "failure":
        return "#e16f24" if info.severity <= 10 else "#bc4c00"
    return "#cf222e" if info.severity < 70 else "#82071e"


def layer_curve(case: CaseResult) -> Sequence[tuple[str, float | None, bool]] | None:
    """Per-layer (module, max |error|, within tolerance) of a localised case, in execution
    order (`Localisation.curve`); None when localisation did not run or drew no curve."""
    loc = case.localisation
    if loc is None or not loc.curve:
        return None
    return [(p.module, p.max_abs, p.passed) for p in loc.curve]


# ---------------------------------------------------------------- SVG primitives


def _log_scale(values: Sequence[float], lo: float, hi: float) -> tuple[float, float]:
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if not finite:
        return (math.log10(lo), math.log10(hi))
    a, b = math.log10(min(finite)) - 0.5, math.log10(max(finite)) + 0.5
    return (a, b) if b > a else (a - 1, b + 1)


def _svg(body: str, title: str, width: int = W, height: int = H) -> str:
    return (f'<svg class="chart" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{esc(title)}</title>{body}</svg>")


def histogram_svg(c: Comparison) -> str:
    """Bars of how many elements fell in each |error| decade (Comparison.histogram)."""
    items = list(c.histogram.items())
    nonzero = [i for i, (_, n) in enumerate(items) if n]
    if not nonzero:
        return ""
    items = items[nonzero[0]: nonzero[-1] + 1]
    top = max(n for _, n in items) or 1
    left, bottom = 34, 40
    plot_h = H - bottom - 36
    step = (W - left - 8) / len(items)
    bars = []
    for i, (label, n) in enumerate(items):
        h = plot_h * n / top
        x = left + i * step
        bars.append(f'<rect class="bar" x="{x + 2:.1f}" y="{H - bottom - h:.1f}" '
                    f'width="{max(step - 4, 1):.1f}" height="{h:.1f}" fill="#e16f24">'
                    f"<title>{esc(label)}: {n}</title></rect>")
        if n:
            bars.append(f'<text x="{x + step / 2:.1f}" y="{H - bottom - h - 3:.1f}" '
                        f'text-anchor="middle" class="v">{n}</text>')
        bars.append(f'<text x="{x + step / 2:.1f}" y="{H - bottom + 12:.1f}" '
                    f'text-anchor="end" class="t" transform="rotate(-35 {x + step / 2:.1f} '
                    f'{H - bottom + 12:.1f})">{esc(label)}</text>')
    axis = (f'<line x1="{left}" y1="{H - bottom}" x2="{W - 8}" y2="{H - bottom}" '
            f'class="axis"/><text x="4" y="14" class="t">elements per |error| decade '
            f"({c.mismatch_count}/{c.total} out of tolerance)</text>")
    return _svg(axis + "".join(bars), f"error histogram of {c.name}")


def tolerance_svg(c: Comparison) -> str:
    """The worst error beside what the tolerance allowed there (log scale)."""
    rows: list[tuple[str, float | None, str]] = [("worst |error|", c.max_abs, "#cf222e")]
    if c.ref_value is not None and math.isfinite(c.ref_value):
        rows.append(("allowed there", c.atol + c.rtol * abs(c.ref_value), "#1a7f37"))
    rows.append(("atol", c.atol, "#8c959f"))
    if c.needed_atol is not None:
        rows.append((f"needed atol (rtol {c.rtol:g})", c.needed_atol, "#bc4c00"))
    values = [v for _, v, _ in rows if v is not None]
    a, b = _log_scale(values, 1e-9, 1.0)
    left, right, row_h = 150, 60, 26
    height = 30 + row_h * len(rows)
    parts = ['<text x="4" y="14" class="t">worst error against the tolerance '
             "(log scale)</text>"]
    for i, (label, value, fill) in enumerate(rows):
        y = 26 + i * row_h
        parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end" '
                     f'class="t">{esc(label)}</text>')
        if value is None or not math.isfinite(value):
            parts.append(f'<text x="{left}" y="{y + 13}" class="v">'
                         f"{esc(num(value))} (not finite)</text>")
            continue
        frac = 0.02 if value <= 0 else min(1.0, max(0.02, (math.log10(value) - a) / (b - a)))
        width = frac * (W - left - right)
        parts.append(f'<rect class="bar" x="{left}" y="{y}" width="{width:.1f}" '
                     f'height="{row_h - 8}" fill="{fill}"><title>{esc(label)}: '
                     f"{esc(num(value))}</title></rect>"
                     f'<text x="{left + width + 4:.1f}" y="{y + 13}" class="v">'
                     f"{esc(num(value))}</text>")
    return _svg("".join(parts), f"worst error of {c.name} against the tolerance",
                height=height)


def _points_svg(points: Sequence[tuple[str, float | None, Outcome]], title: str,
                threshold: float | None, caption: str) -> str:
    """A log-y line over categorical x: errors by batch size, or by layer."""
    values = [v for _, v, _ in points if v is not None] + ([threshold] if threshold else [])
    a, b = _log_scale([v for v in values if v is not None], 1e-9, 1.0)
    # A case with no error value (it raised, or its shape differs) is not a large error: it
    # is drawn in a band of its own above the axis, labelled, never on the error scale.
    band = any(v is None for _, v, _ in points)
    left, bottom, top = 52, 28, 40 if band else 22
    plot_w, plot_h = W - left - 10, H - bottom - top
    step = plot_w / max(len(points), 1)

    def y_of(v: float | None) -> float:
        if v is None:
            return 27.0
        if not math.isfinite(v):
            return top
        if v <= 0:
            return top + plot_h
        return top + plot_h * (1 - min(1.0, max(0.0, (math.log10(v) - a) / (b - a))))

    parts = [f'<text x="4" y="14" class="t">{esc(caption)}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{W - 10}" y2="{top + plot_h}" '
             'class="axis"/>']
    if band:
        parts.append(f'<text x="{left - 4}" y="30" text-anchor="end" class="t">no value</text>'
                     f'<line x1="{left}" y1="{top - 4}" x2="{W - 10}" y2="{top - 4}" '
                     'class="grid"/>')
    for exp in range(math.ceil(a), math.floor(b) + 1):
        y = y_of(10.0 ** exp)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{W - 10}" y2="{y:.1f}" '
                     f'class="grid"/><text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end" '
                     f'class="t">1e{exp}</text>')
    if threshold is not None and threshold > 0:
        y = y_of(threshold)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{W - 10}" y2="{y:.1f}" '
                     f'class="tol"/><text x="{W - 12}" y="{y - 3:.1f}" text-anchor="end" '
                     f'class="t">atol {num(threshold)}</text>')
    xy = [(left + step * (i + 0.5), y_of(v)) for i, (_, v, _) in enumerate(points)]
    measured = [p for p, (_, v, _) in zip(xy, points, strict=True) if v is not None]
    if len(measured) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in measured)
        parts.append(f'<polyline class="line" points="{path}"/>')
    longest = max((len(label[-14:]) for label, _, _ in points), default=1)
    every = max(1, math.ceil(len(points) * (6 * longest + 8) / plot_w))  # labels never overlap
    for i, ((x, y), (label, v, outcome)) in enumerate(zip(xy, points, strict=True)):
        mark = (f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="4.5" '
                f'fill="{colour(outcome)}">' if v is not None else
                f'<rect class="point" x="{x - 4:.1f}" y="{y - 4:.1f}" width="9" height="9" '
                f'fill="{colour(outcome)}">')
        tag = "circle" if v is not None else "rect"
        said = f"max |error| {num(v)}" if v is not None else \
            f"no error value: {outcome.info.description}"
        parts.append(f"{mark}<title>{esc(label)}: {esc(outcome.value)}, "
                     f"{esc(said)}</title></{tag}>")
        if i % every == 0:
            parts.append(f'<text x="{x:.1f}" y="{H - 10}" text-anchor="middle" '
                         f'class="t">{esc(label[-14:])}</text>')
    return _svg("".join(parts), title)


def batch_svg(cases: list[CaseResult]) -> str:
    """max |error| by batch size for one module/dtype/fixture/provider group."""
    ordered = sorted(cases, key=lambda c: c.key.sort_key)
    points = []
    for c in ordered:
        worst = c.worst()
        value = worst.max_abs if worst is not None else None
        points.append((f"b{c.key.batch_size}", value, c.outcome))
    tolerances = [w.atol for c in ordered if (w := c.worst()) is not None]
    key = ordered[0].key
    group = f"{key.dtype}/{key.inputs}/{key.provider}"
    return _points_svg(points, f"error by batch size: {key.module}/{group}",
                       min(tolerances) if tolerances else None,
                       f"max |error| by batch size — {group}")


def curve_svg(case: CaseResult, points: Sequence[tuple[str, float | None, bool]]) -> str:
    marks = [(name, err, Outcome.PASS if ok else Outcome.MISMATCH) for name, err, ok in points]
    return _points_svg(marks, f"per-layer error of {case.id}", None,
                       "max |error| per layer, in execution order")


def steps_svg(case: CaseResult) -> str:
    """A generation case's max |logits error| by step, against its atol."""
    g = case.generation
    assert g is not None
    marks = [(f"step {s.step}", s.max_abs,
              Outcome.PASS if s.passed and (s.tokens_agree or s.tie) else Outcome.MISMATCH)
             for s in g.per_step]
    return _points_svg(marks, f"per-step error of {case.id}", g.atol,
                       "max |logits error| per generation step")


# ---------------------------------------------------------------- page sections


CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1f2328;
max-width:1180px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;border-bottom:1px solid #d1d9e0;
padding-bottom:4px;margin-top:32px}h3{font-size:15px;margin:18px 0 6px}
.verdict{padding:12px 16px;border-radius:8px;border:1px solid #d1d9e0}
.verdict.pass{background:#dafbe1}.verdict.fail{background:#ffebe9}
.verdict.interrupted{background:#fff8c5}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d1d9e0;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}
td.cell{color:#fff;font-weight:600;text-align:center;min-width:80px}
td.cell a{color:#fff;text-decoration:none}
.legend span{display:inline-block;color:#fff;padding:1px 8px;margin:2px;border-radius:4px}
.judged{outline:3px dotted #fff;outline-offset:-6px}
.known{text-shadow:0 0 2px rgba(0,0,0,.6);
background-image:repeating-linear-gradient(135deg,rgba(255,255,255,.16) 0 6px,
transparent 6px 12px)}
code,pre{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:#f6f8fa;padding:10px;overflow:auto;max-height:360px;white-space:pre-wrap}
.case{border:1px solid #d1d9e0;border-radius:8px;padding:8px 14px;margin:10px 0}
.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fff;border:1px solid #eaeef2;border-radius:6px}
svg .t{font-size:10px;fill:#57606a}svg .v{font-size:10px;fill:#1f2328}
svg .axis{stroke:#8c959f}svg .grid{stroke:#eaeef2}svg .tol{stroke:#1a7f37;
stroke-dasharray:5 3}svg .line{fill:none;stroke:#57606a;stroke-width:1.5}
.muted{color:#57606a}
"""


def _verdict(run: RunResult, views: list[ModuleView]) -> str:
    v = run.verdict
    title = _plain(headline(run, views))
    counts = " · ".join(f"{k} {n}" for k, n in v.by_outcome.items()) or "no cases"
    return (f'<header class="verdict {esc(v.result)}"><h1>{esc(title)}</h1>'
            f"<p><b>Verdict: {esc(v.result)}</b> — {esc(v.why)}</p>"
            f"<p>{esc(counts)} · {esc(seconds(run.duration_s))}"
            + (f" · started {esc(run.started_at)}" if run.started_at else "") + "</p></header>")


def _causes(run: RunResult, views: list[ModuleView], anchors: dict[str, str]) -> str:
    """Per failing module, its cause as the summary leads with it: the culprit's line and
    code, the op, the owner, the fix, upstream's answer and the repro."""
    items = []
    for v in views:
        cause = v.cause
        if cause is None:
            continue
        head = (f'<a href="#{anchors[v.name]}"><code>{esc(v.name)}</code></a> — '
                f"{esc(cause.counted)} ({esc(cause.outcome.value)})")
        if not cause.located:
            items.append(f"<li>{head}: {esc(cause.reason)}</li>")
            continue
        code = f" <code>{esc(cause.code)}</code>" if cause.code else ""
        parts = [f"{head}: <code>{esc(cause.source or 'in the model')}</code>{code}: "
                 f"<code>{esc(cause.op)}</code>",
                 f"owner: <b>{esc(cause.owner)}</b>"
                 + (f" ({esc(cause.owned_by)})" if cause.owned_by else "")]
        if cause.fix:
            parts.append(f'<span class="fix">fix: {html_code_ticks(cause.fix)}</span>')
        upstream = upstream_status(v, run.upstream)
        if upstream:
            parts.append(f"upstream: {esc(upstream)}")
        if cause.repro:
            parts.append(f"repro <code>{esc(cause.repro)}</code>")
        items.append(f"<li>{' · '.join(parts)}</li>")
    if not items:
        return ""
    return f'<section id="causes"><h2>Why it fails</h2><ul>{"".join(items)}</ul></section>'


def _plain(title: str) -> str:
    """The markdown headline without its `##` and icon (the page colours the verdict)."""
    return title.lstrip("# ").split(" ", 1)[1] if " " in title.lstrip("# ") else title


def _anchor(index: int) -> str:
    return f"module-{index}"


def _grid(run: RunResult, views: list[ModuleView], anchors: dict[str, str],
          decision: GateDecision) -> str:
    """One cell per module, dtype and provider, coloured by its worst outcome; a cell whose
    failing cases the baseline knows (none blocking) is striped and says `known`."""
    category = {r.id: r.category for r in decision.rulings}
    any_known = any_judged = False
    columns = sorted({(c.key.dtype, c.key.provider) for c in run.cases})
    cells: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    for c in run.cases:
        cells[(c.key.module, c.key.dtype, c.key.provider)].append(c)
    head = "".join(f"<th>{esc(d)}<br>{esc(p)}</th>" for d, p in columns)
    rows = []
    for v in views:
        tds = []
        for d, p in columns:
            group = cells.get((v.name, d, p), [])
            if not group:
                tds.append('<td class="muted">—</td>')
                continue
            worst = max(group, key=lambda c: (c.outcome.failed, c.outcome.severity,
                                              c.outcome is Outcome.PASS))
            count = Counter(c.outcome.value for c in group)
            failing = sum(1 for c in group if c.failed)
            known = bool(failing) and all(category.get(c.id) == KNOWN
                                          for c in group if c.failed)
            any_known |= known
            judged = sum(1 for c in group if c.judged_pass)
            any_judged |= bool(judged) and not failing
            text = (f"{worst.outcome.value} {failing}/{len(group)}" if failing
                    else f"{worst.outcome.value} {len(group)}") + (" known" if known else "")
            if judged and not failing:
                text += f" ({judged} by float64)"
            tip = ", ".join(f"{k}: {n}" for k, n in count.items()) + (
                " (known failures in the baseline, not blocking)" if known else "") + (
                f"; {judged} passed by the float64 check: eager and ONNX differ, and ONNX "
                "is as close to a float64 run as float rounding allows" if judged else "")
            marks = " known" if known else " judged" if judged and not failing else ""
            link = anchors.get(v.name)
            inner = f'<a href="#{link}">{esc(text)}</a>' if link else esc(text)
            tds.append(f'<td class="cell{marks}" '
                       f'style="background-color:{colour(worst.outcome)}" '
                       f'data-outcome="{esc(worst.outcome.value)}" title="{esc(tip)}">'
                       f"{inner}</td>")
        rows.append(f"<tr><th><code>{esc(v.name)}</code></th>{''.join(tds)}</tr>")
    legend = "".join(f'<span style="background:{colour(o)}">{esc(o.value)}</span>'
                     for o in sorted({c.outcome for c in run.cases}, key=lambda o: o.severity))
    if any_judged:
        legend += (f'<span class="judged" style="background-color:{colour(Outcome.PASS)}">'
                   "dotted: passed by the float64 check (eager and ONNX differ within "
                   "float rounding)</span>")
    if any_known:
        legend += ('<span class="known" style="background-color:#8c959f">striped: known '
                   "failures (baseline), not blocking</span>")
    return (f'<section id="grid"><h2>Outcomes by module, dtype and provider</h2>'
            f'<table class="grid"><tr><th>module</th>{head}</tr>{"".join(rows)}</table>'
            f'<p class="legend">{legend}</p></section>')


def _module_table(views: list[ModuleView], where: Located, decision: GateDecision) -> str:
    """The markdown summary's module table (the same cells), with where each module is
    written."""
    gate = decision.baseline is not None
    rows = []
    for v in views:
        line = where.line(v.name)
        place = f"{where.file}:{line}" if where.file and line else ""
        rows.append(f'<tr><td><code>{esc(v.name)}</code><br><span class="muted">'
                    f"{esc(place)}</span></td>"
                    f'<td style="color:{colour(v.outcome)}"><b>{esc(v.outcome.value)}</b></td>'
                    f"<td>{len(v.failing)}/{v.ran}</td><td>{esc(worst_error_text(v))}</td>"
                    f"<td>{esc(needed_text(v))}</td><td>{esc(short_diagnosis(v))}</td>"
                    + (f"<td>{esc(gate_text(v, decision))}</td>" if gate else "") + "</tr>")
    return ('<section id="modules"><h2>Modules</h2><table><tr><th>module</th><th>outcome</th>'
            "<th>failing</th><th>worst error</th><th>needed tolerance</th><th>diagnosis</th>"
            + ("<th>baseline</th>" if gate else "") + f"</tr>{''.join(rows)}</table></section>")


def _case_section(case: CaseResult) -> str:
    parts = [f'<article class="case" id="case-{esc(case.id)}">'
             f'<h3><code>{esc(case.id)}</code> — <span style="color:{colour(case.outcome)}">'
             f"{esc(case.outcome.value)}</span></h3>"]
    loc = case.localisation
    if loc is not None and loc.culprit is not None:  # the culprit line first, then the fix
        parts.append(f'<p class="culprit"><b>{esc(loc.culprit.describe())}</b></p>')
        if loc.culprit.fix:
            parts.append(f'<p class="fix">fix: {html_code_ticks(loc.culprit.fix)}</p>')
    parts.append(f"<p>{esc(case.explanation)}</p>")
    bad = [c for c in case.comparisons if not c.passed][:OUTPUTS_PER_CASE]
    for c in bad:
        charts = [histogram_svg(c)] + ([tolerance_svg(c)] if c.max_abs is not None else [])
        charts = [s for s in charts if s]
        parts.append(f"<p>{esc(c.headline())}</p>")
        if charts:
            parts.append(f'<div class="charts">{"".join(charts)}</div>')
    curve = layer_curve(case)
    if curve:
        parts.append(f'<div class="layers"><h4>Error by layer</h4>'
                     f"{curve_svg(case, curve)}</div>")
    if case.detail.strip():
        parts.append("<details><summary>last lines of the worker's output</summary>"
                     f"<pre>{esc(tail_lines(case.detail, 40))}</pre></details>")
    parts.append("</article>")
    return "".join(parts)


def _failures(views: list[ModuleView], anchors: dict[str, str]) -> str:
    failing = [v for v in views if v.worst is not None]
    if not failing:
        return ""
    out = ['<section id="failures"><h2>Failing cases</h2>']
    drawn = 0
    listed: list[CaseResult] = []
    for v in failing:
        out.append(f'<h3 id="{anchors[v.name]}">Module <code>{esc(v.name)}</code>: '
                   f"{len(v.failing)} of {v.ran} cases fail</h3>")
        groups: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
        for c in v.cases:
            if c.outcome is not Outcome.SKIPPED:
                groups[(c.key.dtype, c.key.inputs, c.key.provider)].append(c)
        charts = [batch_svg(cases) for cases in groups.values()
                  if any(c.failed for c in cases) and len(cases) > 1
                  and any((w := c.worst()) is not None and w.max_abs is not None
                          for c in cases)]
        if charts:
            out.append(f'<div class="charts batch">{"".join(charts)}</div>')
        for case in v.failing:
            if drawn < CASE_SECTIONS:
                out.append(_case_section(case))
                drawn += 1
            else:
                listed.append(case)
    if listed:
        rows = "".join(f"<tr><td><code>{esc(c.id)}</code></td><td>{esc(c.outcome.value)}</td>"
                       f"<td>{esc(c.explanation[:300])}</td></tr>" for c in listed)
        out.append(f"<h3>{len(listed)} more failing cases</h3><p class=muted>Drawn in full: "
                   f"the first {CASE_SECTIONS}; every figure is in results.json.</p>"
                   f"<table><tr><th>case</th><th>outcome</th><th>reason</th></tr>{rows}"
                   "</table>")
    out.append("</section>")
    return "".join(out)


def _generation(run: RunResult) -> str:
    """Every generation case with its per-step error chart and tokens."""
    cases = [c for c in run.cases if c.generation is not None]
    if not cases:
        return ""
    out = ['<section id="generation"><h2>Generation parity</h2>']
    for c in cases[:CASE_SECTIONS]:
        g = c.generation
        assert g is not None
        tokens = "".join(f"<tr><td>{r}</td><td><code>{esc(' '.join(map(str, e)))}</code></td>"
                         f"<td><code>{esc(' '.join(map(str, o)))}</code></td></tr>"
                         for r, (e, o) in enumerate(zip(g.eager_tokens, g.onnx_tokens,
                                                        strict=False)))
        out.append(f'<article class="case"><h3><code>{esc(c.id)}</code> — <span style="color:'
                   f'{colour(c.outcome)}">{esc(c.outcome.value)}</span></h3>'
                   f"<p>{esc(c.reason)} (prompt length {g.prompt_length}, {g.steps} steps)</p>"
                   f'<div class="charts">{steps_svg(c)}</div>'
                   f"<table><tr><th>row</th><th>eager tokens</th><th>ONNX Runtime tokens</th>"
                   f"</tr>{tokens}</table></article>")
    out.append("</section>")
    return "".join(out)


def _tasks(run: RunResult) -> str:
    """Task metrics: per case the paired figures, then the flips per true class as a bar
    pair (eager-only right, ONNX-only right), the samples that flipped listed."""
    cases = [c for c in run.cases if c.task is not None]
    if not cases:
        return ""
    out = ['<section id="tasks"><h2>Task metrics</h2><table><tr><th>case</th><th>metric</th>'
           "<th>eager</th><th>onnx</th><th>Δ (interval)</th><th>eager-only / onnx-only right"
           "</th><th>verdict</th></tr>"]
    details = []
    for c in cases:
        t = c.task
        assert t is not None
        disc = f"{t.eager_only} / {t.onnx_only} (McNemar p={t.p_value:.2g})" \
            if t.p_value is not None else "—"
        out.append(f"<tr><td><code>{esc(c.id)}</code></td><td>{esc(t.metric)}</td>"
                   f"<td>{t.eager:.4g}</td><td>{t.onnx:.4g}</td><td>{t.delta:+.3g} "
                   f"({t.low:+.3g} to {t.high:+.3g}, {t.level:.0%})</td><td>{esc(disc)}</td>"
                   f'<td style="color:{colour(c.outcome)}"><b>{esc(t.verdict)}</b></td></tr>')
        if t.flips:
            top = max(max(f.eager_only, f.onnx_only) for f in t.flips) or 1
            bars = "".join(
                f'<text x="0" y="{14 + 16 * i}" class="t">class {f.label}</text>'
                f'<rect x="60" y="{5 + 16 * i}" width="{120 * f.eager_only / top:.1f}" '
                f'height="6" fill="#c63"><title>eager right, ONNX wrong: {f.eager_only}'
                f'</title></rect><rect x="60" y="{11 + 16 * i}" '
                f'width="{120 * f.onnx_only / top:.1f}" height="6" fill="#6a8"><title>ONNX '
                f"right, eager wrong: {f.onnx_only}</title></rect>"
                for i, f in enumerate(t.flips[:20]))
            chart = _svg(bars, f"flips per class of {c.id}", width=200,
                         height=16 * min(len(t.flips), 20) + 8)
            ids = ", ".join(str(i) for i in t.flipped[:100])
            details.append(f"<h3><code>{esc(c.id)}</code>: flips per true class</h3>"
                           f'<p class="legend"><span style="color:#c63">eager right, ONNX '
                           f'wrong</span> · <span style="color:#6a8">ONNX right, eager '
                           f"wrong</span></p>{chart}<p>{esc(t.summary)}</p>"
                           f"<p>flipped samples: {esc(ids)}</p>")
    out.append("</table>")
    return "".join([*out, *details, "</section>"])


def _findings(run: RunResult) -> str:
    if not run.findings:
        return ""
    items = "".join(f"<li><b>{esc(f.severity)}</b> <code>{esc(f.module)}</code> "
                    f"<b>{esc(f.kind)}</b>: {esc(f.message)}"
                    + (f" — fix: {html_code_ticks(f.hazard.fix)}" if f.hazard and f.hazard.fix
                       else "")
                    + "</li>" for f in run.findings)
    return f'<section id="findings"><h2>Findings</h2><ul>{items}</ul></section>'


def _run_details(run: RunResult) -> str:
    versions = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>"
                       for k, v in sorted(run.versions.items()) if isinstance(v, (str, int)))
    skips = "".join(f"<li>{n} case{'s' if n != 1 else ''}: {esc(reason)}</li>"
                    for reason, n in run.skip_reasons().items())
    return ('<section id="run"><h2>Run</h2>'
            + (f"<h3>Skipped</h3><ul>{skips}</ul>" if skips else "")
            + f"<table>{versions}</table></section>")


def _performance(run: RunResult, decision: GateDecision) -> str:
    """Eager vs ONNX Runtime time per module (a bar pair each, the longer one full width),
    the ratio with its interval, placement, memory and the performance rules broken."""
    mods = perf.module_performance(run, decision)
    if not mods:
        return ""
    rows = []
    for m in mods:
        lat = m.latency
        chart = ""
        if lat is not None and max(lat.eager_ms, lat.onnx_ms) > 0:
            top = max(lat.eager_ms, lat.onnx_ms)
            we, wo = (max(1.0, 200 * v / top) for v in (lat.eager_ms, lat.onnx_ms))
            chart = _svg(f'<rect x="0" y="2" width="{we:.1f}" height="9" fill="#6a8"/>'
                         f'<rect x="0" y="14" width="{wo:.1f}" height="9" fill="#c63"/>',
                         f"eager {lat.eager_ms:.3g} ms, ONNX Runtime {lat.onnx_ms:.3g} ms",
                         width=204, height=25)
        slow = any(f.rule == "slowdown" for f in m.flags)
        ratio = esc(perf.ratio_text(lat))
        mark = (f' <span class="muted" title="{esc(lat.why)}">~</span>'
                if lat is not None and not lat.stable else "")
        rows.append(f"<tr><td><code>{esc(m.name)}</code></td>"
                    f"<td>{esc(f'{lat.eager_ms:.3g}') + mark if lat else '—'}</td>"
                    f"<td>{esc(f'{lat.onnx_ms:.3g}') + mark if lat else '—'}</td>"
                    f"<td>{f'<b>{ratio}</b>' if slow else ratio}</td><td>{chart}</td>"
                    f"<td>{esc(perf.placement_text(m.placement))}</td>"
                    f"<td>{esc(perf.memory_text(m.memory))}</td></tr>")
    flagged = [f for m in mods for f in m.flags]
    items = "".join(f"<li>{'<b>blocking</b>' if f.blocks else 'warning'} <code>{esc(f.id)}"
                    f"</code> ({esc(f.rule)}): {esc(f.message)}</li>" for f in flagged)
    return ('<section id="performance"><h2>Performance: ONNX Runtime vs eager</h2>'
            '<p class="legend">median per-pair time ratio ONNX/eager with its 95% interval, '
            "per module the case whose interval's lower bound is highest; bars: "
            '<span style="color:#6a8">eager</span> and '
            '<span style="color:#c63">ONNX Runtime</span>; <b>~</b>: not stable within the '
            "timing budget (a warm-up or noisy figure: do not act on it)</p>"
            "<table><tr><th>module</th><th>eager ms</th><th>onnx ms</th><th>ratio (95%)</th>"
            "<th>chart</th><th>placement</th><th>memory onnx vs eager</th></tr>"
            + "".join(rows) + "</table>" + (f"<ul>{items}</ul>" if items else "")
            + "</section>")


def render(run: RunResult, where: Located | None = None) -> str:
    where = where or Located()
    views = module_views(run)
    anchors = {v.name: _anchor(i) for i, v in enumerate(views) if v.worst is not None}
    title = _plain(headline(run, views))
    decision = decision_of(run)
    body = "".join([_verdict(run, views), _causes(run, views, anchors),
                    _grid(run, views, anchors, decision),
                    _module_table(views, where, decision), _tasks(run),
                    quant_report.html(run),
                    _performance(run, decision),
                    _failures(views, anchors),
                    _generation(run), _findings(run), _run_details(run)])
    # The whole page once more: no bidi override or line separator from any text reaches
    # the reader, whichever helper wrote it (the markup itself has none).
    return strip_control(f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
                         f'<meta name="viewport" content="width=device-width, '
                         f'initial-scale=1"><title>{esc(title)}</title><style>{CSS}</style>'
                         f"</head><body>{body}</body></html>\n")
