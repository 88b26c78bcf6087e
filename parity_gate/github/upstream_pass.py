"""One upstream pass, shared by `parity-gate upstream` and the Action: search every defect
signature upstream, then draft or create the reports of those without a confident match.

Its own module so that searching (`upstream`) and drafting (`drafts`, which reads the
search's records) import in one direction only.
"""

from __future__ import annotations

import os
from pathlib import Path

from parity_gate.github import drafts, run_drafts, upstream
from parity_gate.github.client import GitHubClient
from parity_gate.github.upstream import UpstreamOptions
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import run_url
from parity_gate.ops import localised
from parity_gate.report import markdown
from parity_gate.report.secrets import Masker
from parity_gate.report.write import atomic_write


def attach(run: RunResult, client: GitHubClient, options: UpstreamOptions,
           ) -> tuple[RunResult, list[str]]:
    """`run` with `upstream` filled in (search, then draft or create), and the warnings.

    Never raises for GitHub's sake: every failure is a warning and a note on the
    signature it concerns; the gate's verdict is untouched (it is not recomputed here).
    The op sweep's defects are drafted from the catalogue (`drafts`), a model run's
    localised ones from the culprit's node repro (`run_drafts`); a localised failure
    whose owner is unknown is listed as not searched.
    """
    found = upstream.op_findings(run)
    reports, warnings = upstream.search(client, found, run.versions)
    if options.mode in ("draft", "create"):
        swept = [r for r in reports if r.op.source != "localised"]
        mine = [r for r in reports if r.op.source == "localised"]
        swept, drafted, more = drafts.prepare(
            run, swept, [(s, cs) for s, cs in found if cs[0].op is not None], options)
        mine, own = run_drafts.prepare(run, mine, found, options)
        reports, warnings = swept + mine, warnings + more
        drafted.update(own)
        if options.mode == "draft" and options.drafts is not None:
            reports = drafts.write(reports, drafted, options.drafts)
            run_drafts.attach(reports, found, options.results_dir)
        elif options.mode == "create":
            reports, more = upstream.create_issues(client, reports, drafted, options.max_create,
                                                   options.ledger)
            warnings += more
    reports += run_drafts.unowned_reports(*_unowned(run))
    data = run.to_dict()
    data["upstream"] = [r.to_dict() for r in reports]
    return RunResult.from_dict(data), warnings


def _unowned(run: RunResult) -> tuple[dict[str, list[CaseResult]], dict[str, str]]:
    found = localised.unowned(run)
    return ({c.aten: cs for c, cs in found},
            {c.aten: c.owned_by or "the owner check did not run" for c, _ in found})


def rewrite_summary(run: RunResult, path: Path, warnings: list[str]) -> bool:
    """A model run's summary.md written again with the upstream status beside each failing
    case and the Upstream section (the op sweep's summary is its own table: left alone).
    Only a summary that is there is rewritten; returns whether it was."""
    if run.manifest.get("command") == "ops" or not run.upstream or not path.is_file():
        return False
    text = markdown.render(run, run_url=run_url(os.environ))
    section = upstream.markdown(run.upstream, warnings)
    atomic_write(path, Masker().text(f"{text.rstrip()}\n\n{section}"))
    return True
