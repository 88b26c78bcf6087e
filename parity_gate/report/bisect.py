"""`parity-gate bisect`'s answer in markdown: the line a user reads, then the probes table.

Its own block in the summary and the PR comment (`markdown.render` appends it)."""

from __future__ import annotations

from parity_gate.model.bisect import Bisection, Phase
from parity_gate.model.text import md_text


def markdown(found: list[Bisection]) -> str:
    """One block per bisected failure (cases with one signature are bisected together)."""
    return "\n".join(_one(b) for b in found)


def _one(b: Bisection) -> str:
    out = ["### Which version broke it", "", f"**{md_text(b.answer())}**", ""]
    ranges = [f"{md_text(r.package)} {md_text(r.good)} → {md_text(r.bad)}: "
              f"{len(r.candidates)} release(s), {r.probes} probe(s) (bound {r.bound})"
              for r in b.packages if r.involved is not None]
    if ranges:
        out += ["; ".join(ranges), ""]
    if b.flaky:
        out += ["Flaky cases (not bisected):", ""]
        out += [f"- `{md_text(c)}`: {md_text(why)}" for c, why in b.flaky.items()]
        out.append("")
    if b.repeat and not b.flaky:
        out += [f"Repeat: {md_text(b.repeat)}", ""]
    for rec in b.packages:
        if rec.package != b.culprit:
            continue
        fix = rec.upstream_looks_for == "fix"
        window = (f"between {md_text(rec.last_good)} and {md_text(rec.first_bad)}, looking "
                  f"for {'the fix' if fix else 'the regression'}")
        if rec.upstream:
            out.append(f"{'Likely fixed by' if fix else 'Likely introduced by'} ({window}):")
            out.append("")
            out += [f"- [{md_text(c.repo.split('/')[-1])}#{c.number}]({c.url}) "
                    f"{md_text(c.title)} (merged {md_text(c.merged_at[:10] or '?')}; "
                    f"mentions {md_text(c.touches)})" for c in rec.upstream[:5]]
            out.append("")
        elif rec.upstream_note:
            out += [f"Upstream ({window}): {md_text(rec.upstream_note)}", ""]
    probes = "probe" if len(b.probes) == 1 else "probes"
    out += [f"<details><summary>{len(b.probes)} {probes}, {b.wall_s:g} s "
            f"({md_text(', '.join(b.cases[:3]))}{' …' if len(b.cases) > 3 else ''})</summary>",
            "", "| package | version | step | outcome | signature or cause | seconds |",
            "|---|---|---|---|---|---|"]
    for p in b.probes:
        seen = p.why or p.signature or "all pass"
        label = p.package or ("bad set" if p.phase in (Phase.TOGETHER, Phase.REPEAT)
                              else "good set")
        seen += " (the run made for the first failure)" if p.reused else ""
        out.append(f"| {md_text(label)} | {md_text(p.version or '-')} "
                   f"| {p.phase.value} | {p.verdict.value} | {md_text(seen[:160])} "
                   f"| {p.seconds:g} |")
    out += ["", "</details>"]
    return "\n".join(out) + "\n"
