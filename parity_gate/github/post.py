"""The Action's post step: the upstream search and the pull-request comment.

It runs after the gate, in a process (and in docker mode a container) of its
own: the only one that gets the tokens, so neither `install` nor the models nor
the gate's container ever see them. It never changes the gate's verdict or exit
code: whatever GitHub does, it exits 0 and says what failed as warnings, in the
log and in the job summary.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from parity_gate.errors import UserError
from parity_gate.gate.merge import read_results
from parity_gate.github import comment, upstream, upstream_pass
from parity_gate.github.client import (
    DEFAULT_API_URL,
    ClientSettings,
    GitHubClient,
    GitHubError,
    search_rate,
)
from parity_gate.github.commands import Annotation, escape_data, write_outputs
from parity_gate.model.files import append_step_summary
from parity_gate.model.results import RunResult
from parity_gate.model.text import log_url, md_text, one_line
from parity_gate.report.write import atomic_write, run_json

if TYPE_CHECKING:
    from parity_gate.github.paths import Paths

CACHE_SUBDIR = "github-api"


def mask(tokens: list[str]) -> None:
    """Tell the runner to hide the tokens in the log (a line the runner swallows)."""
    for token in tokens:
        if token:
            print(f"::add-mask::{escape_data(token)}", flush=True)


def upstream_token(inputs: Mapping[str, str], env: Mapping[str, str]) -> str | None:
    """The upstream token; the workflow's own only when upstream is this same host."""
    if inputs["upstream_token"]:
        return inputs["upstream_token"]
    same_host = inputs["upstream_api_url"].rstrip("/") == env.get(
        "GITHUB_API_URL", DEFAULT_API_URL).rstrip("/")
    return inputs["github_token"] or None if same_host else None


def report_only(inputs: Mapping[str, str], paths: Paths, github_output: str | None) -> int:
    """`results:` given (a workflow_run job): no install, no gate; outputs from that file."""
    from parity_gate.github.annotations import outputs

    path = paths.workspace / inputs["results"]
    try:
        run = read_results(path)[1]
    except UserError as err:
        print(Annotation("error", "parity-gate: invalid input", f"results: {err}").render())
        write_outputs(github_output, {"result": "error"})
        return 2
    result = "fail" if run.verdict.blocks else "pass"
    write_outputs(github_output, outputs(result, run, dataclasses.replace(
        paths, out_dir=path.parent)))
    # One line: the results may be a fork's, and a line of their text starting with `::`
    # would be a workflow command in this trusted job.
    print(one_line(f"parity-gate: results {path}: {run.verdict.result} ({run.verdict.why}); "
                   "the gate ran in the earlier job, nothing is run here"))
    return 0


def main(inputs: Mapping[str, str], paths: Paths, env: Mapping[str, str]) -> int:
    """Upstream search, then the comment; every GitHub failure a warning, exit 0."""
    mask([inputs["github_token"], inputs["upstream_token"]])
    if inputs["comment"] == "off" and inputs["upstream"] == "off":
        return 0
    return _post(inputs, paths.workspace, paths.out_dir, paths.cache_dir, env)


def _post(inputs: Mapping[str, str], workspace: Path, out_dir: Path, cache_dir: Path | None,
          env: Mapping[str, str]) -> int:
    results = workspace / inputs["results"] if inputs["results"] else out_dir / "results.json"
    warnings: list[str] = []
    try:
        run = read_results(results)[1]
    except UserError as err:
        _warn(env, [f"no results to comment on or search for: {err}"])
        return 0
    cache = cache_dir / CACHE_SUBDIR if cache_dir else None
    if inputs["upstream"] != "off":
        client = GitHubClient(inputs["upstream_api_url"], upstream_token(inputs, env),
                              ClientSettings(cache_dir=cache, search_per_minute=search_rate(env)))
        run, warnings = _upstream(run, client, inputs, out_dir, results, cache)
        if run.upstream:
            atomic_write(results, run_json(run))
            upstream_pass.rewrite_summary(run, results.parent / "summary.md", warnings)
            _summary(env, upstream.markdown(run.upstream, warnings))
            print(f"parity-gate: upstream: {len(run.upstream)} op(s) searched; "
                  f"{client.stats.sent} API call(s)")
    if inputs["comment"] != "off":
        event_file = workspace / inputs["event_file"] if inputs["event_file"] else None
        warnings += _comment(run, inputs, env, event_file)
    _warn(env, warnings)
    return 0


def upstream_options(inputs: Mapping[str, str], out_dir: Path, results: Path,
                     cache: Path | None) -> upstream.UpstreamOptions:
    """The post step's upstream pass. Results named by `results:` are an earlier job's (a
    workflow_run pair's trusted job comments on a fork's artifact): nothing of them is run
    here, so no repro is verified; a run's own are verified in its own out folder."""
    return upstream.UpstreamOptions(
        mode=inputs["upstream"], drafts=out_dir / "upstream-drafts",
        repro_dir=results.parent / "repro",
        ledger=cache / "created-issues.json" if cache else out_dir / "created-issues.json",
        check_cache=cache / "repro-checks.json" if cache else None,
        verify=not inputs["results"], results_dir=results.parent)


def _upstream(run: RunResult, client: GitHubClient, inputs: Mapping[str, str], out_dir: Path,
              results: Path, cache: Path | None) -> tuple[RunResult, list[str]]:
    options = upstream_options(inputs, out_dir, results, cache)
    if options.mode == "create" and not client.authenticated:
        return upstream_pass.attach(run, client, dataclasses.replace(
            options, mode="draft", ledger=None)
        )[0], ["upstream: create needs upstream_token (a token that may open issues in the "
               "upstream repositories; a workflow's own token cannot): drafted instead"]
    return upstream_pass.attach(run, client, options)


def _comment(run: RunResult, inputs: Mapping[str, str], env: Mapping[str, str],
             event_file: Path | None) -> list[str]:
    if not inputs["github_token"]:
        return ["comment: no github_token (expected `github_token: ${{ github.token }}` and "
                "`permissions: pull-requests: write` in the commenting job)"]
    client = GitHubClient(env.get("GITHUB_API_URL", DEFAULT_API_URL), inputs["github_token"])
    try:
        pr = comment.pull_request(env, event_file, client)
        posted = comment.post(client, pr, run, comment.Mode(inputs["comment"]),
                              comment.comment_key(run), env)
    except (comment.ContextError, GitHubError) as exc:
        return [f"comment: not posted: {exc}"]
    url = f" {log_url(posted.url)}" if posted.url else ""  # clickable in the log: as it is
    print(one_line(f"parity-gate: comment {posted.action} ({posted.why})") + url)
    return []


def _summary(env: Mapping[str, str], text: str) -> None:
    """The job summary by the one rule for it (masked, never through a link); a summary
    that cannot be written is a one-line notice, never the post step's failure."""
    problem = append_step_summary(text + "\n", env) if text else ""
    if problem:
        print(one_line(f"parity-gate: warning: {problem}"), file=sys.stderr)


def _warn(env: Mapping[str, str], warnings: list[str]) -> None:
    """Each warning as an annotation and, together, in the job summary; stderr too (one
    line: the runner reads workflow commands there as well)."""
    for w in warnings:
        print(Annotation("warning", "parity-gate: GitHub", w).render(), flush=True)
        print(one_line(f"parity-gate: warning: {w}"), file=sys.stderr)
    if warnings:
        _summary(env, "\n".join(["### ⚠️ GitHub", "",
                                 *(f"- {md_text(w)}" for w in warnings), ""]))
