"""One upstream pass, shared by `parity-gate upstream` and the Action: search every defect
signature upstream, then draft or create the reports of those without a confident match.

Its own module so that searching (`upstream`) and drafting (`drafts`, which reads the
search's records) import in one direction only.
"""

from __future__ import annotations

from parity_gate.github import drafts, upstream
from parity_gate.github.client import GitHubClient
from parity_gate.github.upstream import UpstreamOptions
from parity_gate.model.results import RunResult


def attach(run: RunResult, client: GitHubClient, options: UpstreamOptions,
           ) -> tuple[RunResult, list[str]]:
    """`run` with `upstream` filled in (search, then draft or create), and the warnings.

    Never raises for GitHub's sake: every failure is a warning and a note on the
    signature it concerns; the gate's verdict is untouched (it is not recomputed here).
    """
    found = upstream.op_findings(run)
    reports, warnings = upstream.search(client, found, run.versions)
    if options.mode in ("draft", "create"):
        reports, drafted, more = drafts.prepare(run, reports, found, options)
        warnings += more
        if options.mode == "draft" and options.drafts is not None:
            reports = drafts.write(reports, drafted, options.drafts)
        elif options.mode == "create":
            reports, more = upstream.create_issues(client, reports, drafted, options.max_create,
                                          options.ledger)
            warnings += more
    data = run.to_dict()
    data["upstream"] = [r.to_dict() for r in reports]
    return RunResult.from_dict(data), warnings
