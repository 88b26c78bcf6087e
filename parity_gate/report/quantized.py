"""The quantized cases' section (issue 52) of summary.md and report.html: per case the
verdict in steps (pt2e) or SQNR (runtime), each output's step histogram, the first node
beyond one step with its owner, the worst layers' SQNR, the hazards, and the cost of the
quantized check against the float export of the same module."""

from __future__ import annotations

import math

from parity_gate.model.quantized import QuantizedResult
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import escape_html as esc
from parity_gate.model.text import md_cell, md_code

NODE_ROWS = 8  # worst layers listed per case


def _cases(run: RunResult) -> list[CaseResult]:
    return [c for c in run.cases if c.quantized is not None]


def _db(x: float | None) -> str:
    if x is None:
        return "—"
    return "identical" if math.isinf(x) and x > 0 else f"{x:.1f} dB"


def _hist(h: dict[str, int]) -> str:
    return " ".join(f"{k}:{v}" for k, v in h.items() if v) or "—"


def _verdict(q: QuantizedResult) -> str:
    parts = []
    for o in q.outputs:
        if o.max_steps is not None:
            parts.append(f"{o.name}: {o.max_steps:.3g} step(s) max ({o.verdict})")
        else:
            parts.append(f"{o.name}: {_db(o.sqnr_db)} ({o.verdict})")
    return "; ".join(parts)


def _worst(q: QuantizedResult) -> list[str]:
    if q.flow == "runtime":
        nodes = sorted((n for n in q.nodes if n.sqnr_db is not None),
                       key=lambda n: n.sqnr_db if n.sqnr_db is not None else 0.0)
        return [f"{n.name} ({n.op}) {_db(n.sqnr_db)}" for n in nodes[:NODE_ROWS]]
    nodes = sorted(q.nodes, key=lambda n: -(n.max_steps or 0.0))
    return [f"{n.name} ({n.op}) {n.max_steps or 0:.3g} step(s) fused, "
            f"{n.literal_steps if n.literal_steps is not None else '—'} op by op"
            for n in nodes[:NODE_ROWS]]


def _cost(q: QuantizedResult) -> str:
    return (f"{q.quantize_s:.1f} s to quantize and export vs {q.float_s:.1f} s for the float "
            "export" if q.float_s else f"{q.quantize_s:.1f} s to quantize")


def markdown(run: RunResult) -> str:
    cases = _cases(run)
    if not cases:
        return ""
    rows = ["### Quantized models", "",
            "| case | flow | outputs | first bad node (owner) | verdict |",
            "|---|---|---|---|---|"]
    notes = []
    for c in cases:
        q = c.quantized
        assert q is not None
        bad = f"{md_code(q.first_bad)} ({q.owner})" if q.first_bad else "—"
        rows.append(f"| {md_code(c.id)} | {q.flow} | {md_cell(_verdict(q), 300)} | {bad} | "
                    f"{'**fail**' if c.failed else 'pass'} |")
        lines = [f"- {md_code(c.id)}: {md_cell(q.summary, 400)}"]
        for o in q.outputs:
            if o.histogram:
                lines.append(f"  - {md_code(o.name)} steps histogram: "
                             f"{md_cell(_hist(o.histogram))}")
        worst = _worst(q)
        if worst:
            lines.append(f"  - {'worst layers (SQNR)' if q.flow == 'runtime' else 'nodes'}: "
                         f"{md_cell('; '.join(worst), 600)}")
        if q.repro:
            lines.append(f"  - repro folder of {md_code(q.first_bad)}: {md_code(q.repro)} "
                         "(`python repro.py`)")
        for h in q.hazards[:5]:
            lines.append(f"  - hazard: {md_cell(h, 300)}")
        lines.append(f"  - cost: {_cost(q)}")
        notes += lines
    return "\n".join([*rows, "", *notes, ""]) + "\n"


def html(run: RunResult) -> str:
    cases = _cases(run)
    if not cases:
        return ""
    out = ['<section id="quantized"><h2>Quantized models</h2><table><tr><th>case</th>'
           "<th>flow</th><th>outputs</th><th>step histogram</th><th>first bad node (owner)"
           "</th><th>worst layers</th><th>hazards</th><th>cost</th></tr>"]
    for c in cases:
        q = c.quantized
        assert q is not None
        hist = "<br>".join(f"{esc(o.name)}: {esc(_hist(o.histogram))}" for o in q.outputs
                           if o.histogram) or "—"
        bad = f"<code>{esc(q.first_bad)}</code> ({esc(q.owner)}): {esc(q.why)}" \
            if q.first_bad else "—"
        if q.repro:
            bad += f"<br>repro: <code>{esc(q.repro)}</code>"
        colour = "#b00" if c.failed else "#060"
        out.append(f"<tr><td><code>{esc(c.id)}</code></td><td>{esc(q.flow)}</td>"
                   f'<td style="color:{colour}">{esc(_verdict(q))}</td><td>{hist}</td>'
                   f"<td>{bad}</td><td>{'<br>'.join(esc(w) for w in _worst(q)) or '—'}</td>"
                   f"<td>{'<br>'.join(esc(h) for h in q.hazards[:5]) or '—'}</td>"
                   f"<td>{esc(_cost(q))}</td></tr>")
    return "".join(out) + "</table></section>"
