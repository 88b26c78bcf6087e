"""`parity-gate comment` and `parity-gate upstream`: GitHub from the command line.

Tokens come from the environment only (`GITHUB_TOKEN`; `PARITY_GATE_UPSTREAM_TOKEN`
for the upstream repositories), never from argv, which other users can read.
A GitHub failure is a warning and exit 0: it never changes the gate's answer.
Bad input (no results file, no pull request) is a one-line error, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parity_gate.errors import UserError

if TYPE_CHECKING:
    from parity_gate.model.results import RunResult

Commands = dict[str, Callable[[argparse.Namespace], int]]


def add_parsers(sub: Any, commands: Commands) -> None:
    """Register `comment` and `upstream` (called by cli.build_parser)."""
    c = sub.add_parser("comment", help="post the summary as one sticky pull-request comment")
    c.add_argument("--results", type=Path, required=True, metavar="RESULTS.json")
    c.add_argument("--mode", default="always",
                   choices=("always", "on-change", "on-failure", "off"),
                   help="when to post: always (default), on-change, on-failure, off")
    c.add_argument("--event-file", type=Path, metavar="EVENT.json",
                   help="workflow_run jobs: the pull_request run's uploaded event file")
    c.add_argument("--repo", metavar="OWNER/NAME", help="outside Actions: the repository")
    c.add_argument("--pr", type=int, metavar="N", help="outside Actions: the pull request")
    c.add_argument("--key", help="what keeps two gates' comments apart (default: the "
                   "manifest path recorded in the results)")
    c.add_argument("--api-url", default=None, help="REST API base URL (default: "
                   "$GITHUB_API_URL, else https://api.github.com; GitHub Enterprise Server: "
                   "https://HOST/api/v3)")
    commands["comment"] = _cmd_comment

    u = sub.add_parser("upstream", help="search the exporter's issues and PRs for each "
                       "finding that pins an op; draft or open reports for new ones")
    u.add_argument("--results", type=Path, required=True, metavar="RESULTS.json",
                   help="results of `parity-gate ops` (or run); updated in place with the "
                   "matches unless --out is given")
    mode = u.add_mutually_exclusive_group()
    mode.add_argument("--draft", type=Path, metavar="DIR", help="write one markdown draft "
                      "per unmatched finding here (the default: RESULTS' folder/upstream-drafts)")
    mode.add_argument("--create", action="store_true", help="open an issue per unmatched "
                      "finding (needs PARITY_GATE_UPSTREAM_TOKEN for the upstream repository)")
    mode.add_argument("--search-only", action="store_true", help="attach matches only")
    u.add_argument("--max-create", type=int, default=3, metavar="N",
                   help="--create: at most N new issues per run (default 3)")
    u.add_argument("--out", type=Path, metavar="PATH", help="write the results here instead")
    u.add_argument("--repro-dir", type=Path, metavar="DIR",
                   help="the op sweep's repro scripts (default: RESULTS' folder/repro)")
    u.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="keep search answers and repro runs between runs (default: RESULTS' "
                   "folder/upstream-cache; answers revalidated after 6 h)")
    u.add_argument("--search-budget", type=int, metavar="N",
                   help="send at most N searches this run (cached answers are free); the "
                   "defects left say so, and the next run goes on from the cache")
    u.add_argument("--api-url", default="https://api.github.com",
                   help="REST API base URL of the upstream repositories")
    commands["upstream"] = _cmd_upstream


def _load(path: Path) -> RunResult:
    from parity_gate.gate.merge import read_results

    return read_results(path)[1]


def _warn(lines: list[str]) -> None:
    for line in lines:
        print(f"parity-gate: warning: {line}", file=sys.stderr)


def _cmd_comment(args: argparse.Namespace) -> int:
    from parity_gate.github import comment
    from parity_gate.github.client import DEFAULT_API_URL, GitHubClient, GitHubError

    run = _load(args.results)
    mode = comment.Mode(args.mode)
    if mode is comment.Mode.OFF:
        return 0
    token = os.environ.get("GITHUB_TOKEN", "")
    if not token:
        raise UserError("comment: GITHUB_TOKEN is not set (expected a token that may write "
                        "pull-request comments, in the environment)")
    client = GitHubClient(args.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL,
                          token)
    try:
        if args.repo and args.pr:
            pr = comment.PullRequest(args.repo, args.pr, "")
        elif args.repo or args.pr:
            raise UserError("comment: --repo and --pr go together (expected both or neither)")
        else:
            pr = comment.pull_request(os.environ, args.event_file, client)
        posted = comment.post(client, pr, run, mode, comment.comment_key(run, args.key),
                              os.environ)
    except comment.ContextError as exc:
        raise UserError(f"comment: {exc}") from None
    except GitHubError as exc:
        _warn([f"comment not posted: {exc}"])
        return 0
    print(f"parity-gate: comment {posted.action} ({posted.why}) {posted.url}".rstrip(),
          file=sys.stderr)
    return 0


def _cmd_upstream(args: argparse.Namespace) -> int:
    from parity_gate.github import upstream, upstream_pass
    from parity_gate.github.client import ClientSettings, GitHubClient, search_rate
    from parity_gate.github.upstream import issue_url
    from parity_gate.model.text import one_line
    from parity_gate.report.write import atomic_write, run_json

    if args.max_create < 0:
        raise UserError(f"--max-create: got {args.max_create} (expected an integer >= 0)")
    if args.search_budget is not None and args.search_budget < 0:
        raise UserError(f"--search-budget: got {args.search_budget} (expected an integer >= 0)")
    run = _load(args.results)
    token = os.environ.get("PARITY_GATE_UPSTREAM_TOKEN") or os.environ.get("GITHUB_TOKEN")
    if args.create and not token:
        raise UserError("upstream --create: no token (expected PARITY_GATE_UPSTREAM_TOKEN in "
                        "the environment: one that may open issues in the upstream repository)")
    folder = args.results.parent
    cache = args.cache_dir or folder / "upstream-cache"
    mode = "create" if args.create else "search" if args.search_only else "draft"
    client = GitHubClient(args.api_url, token, ClientSettings(
        cache_dir=cache, search_per_minute=search_rate(os.environ),
        search_budget=args.search_budget))
    options = upstream.UpstreamOptions(
        mode=mode, drafts=args.draft or folder / "upstream-drafts",
        repro_dir=args.repro_dir or folder / "repro", max_create=args.max_create,
        ledger=cache / "created-issues.json", check_cache=cache / "repro-checks.json",
        results_dir=args.results.parent)
    run, warnings = upstream_pass.attach(run, client, options)
    atomic_write(args.out or args.results, run_json(run))
    if args.out is None:  # results updated in place: so is the summary beside them
        upstream_pass.rewrite_summary(run, folder / "summary.md", warnings)
    for report in run.upstream:
        sig = report.signature
        what = f"{sig.user_op} {sig.symptom.info.title}" if sig else report.op.overload
        url = issue_url(report.match.repo, report.match.number) if report.match else None
        print(one_line(f"{what}: {report.describe()}") + (f" — {url}" if url else ""))
    _warn(warnings)
    s = client.stats
    drafted = sum(1 for r in run.upstream if r.draft)
    print(f"parity-gate upstream: {len(run.upstream)} defect(s), {drafted} drafted; {s.sent} "
          f"API call(s) ({s.requests['search']} searches, {s.requests['write']} writes), "
          f"{s.disk_cache_hits} from the cache, {s.not_modified} revalidated; results: "
          f"{args.out or args.results}", file=sys.stderr)
    return 0
