"""One sticky pull-request comment per manifest: found by a hidden marker, updated in place.

The pull request comes from the event: a `pull_request` job reads its own
payload; a `workflow_run` job (the fork-safe pattern: the untrusted run uploads
its results and event file, a trusted run with a write token comments) reads
the uploaded payload and checks it against the trusted `workflow_run` one and
the pull request itself, so a forged artifact cannot aim the comment elsewhere.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity_gate.github.client import GitHubClient, GitHubError
from parity_gate.github.upstream import markdown as upstream_markdown
from parity_gate.model.results import RunResult
from parity_gate.model.text import GITHUB, code_span, md_link, md_text, run_url
from parity_gate.report.markdown import render

COMMENT_LIMIT = 65536  # GitHub rejects issue comments longer than this (characters)
MARGIN = 512           # room for the markers, the footer and the trim note
MARKER = "<!-- parity-gate:sticky:{} -->"
STATE = "<!-- parity-gate:state:{} -->"
_STATE = re.compile(r"<!-- parity-gate:state:([0-9a-f]+) -->")


class Mode(str, enum.Enum):
    ALWAYS = "always"          # create or update on every run
    ON_CHANGE = "on-change"    # when the results differ from what the comment says
    ON_FAILURE = "on-failure"  # when the gate blocks (and to clear a stale failure)
    OFF = "off"


MODES = tuple(m.value for m in Mode)


class ContextError(Exception):
    """No pull request to comment on, or its event data does not add up."""


@dataclass(frozen=True)
class PullRequest:
    repo: str      # "owner/name", where the comment goes
    number: int
    head_sha: str


def _read_json(path: str | Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ContextError(f"{what} {path}: cannot read it ({exc})") from None
    if not isinstance(data, dict):
        raise ContextError(f"{what} {path}: expected a JSON object")
    return data


def pull_request(env: Mapping[str, str], event_file: str | Path | None = None,
                 client: GitHubClient | None = None) -> PullRequest:
    """The pull request this run is about, from GITHUB_EVENT_NAME/GITHUB_EVENT_PATH.

    `workflow_run`: the PR number and head SHA come from `event_file` (the
    uploaded `pull_request` payload); it must name the run's own head SHA, and
    the PR's head branch (asked of the API) must be the run's.
    """
    repo = env.get("GITHUB_REPOSITORY", "")
    name = env.get("GITHUB_EVENT_NAME", "")
    path = env.get("GITHUB_EVENT_PATH", "")
    if not repo or not path:
        raise ContextError("no GitHub event (expected GITHUB_REPOSITORY and GITHUB_EVENT_PATH, "
                           "as in a GitHub Actions job, or --repo and --pr)")
    event = _read_json(path, "event file")
    if name in ("pull_request", "pull_request_target"):
        return _from_pr_payload(repo, event, "event file")
    if name != "workflow_run":
        raise ContextError(f"event {name!r} has no pull request (expected pull_request, or "
                           "workflow_run with the uploaded event file)")
    run = event.get("workflow_run") or {}
    if not event_file:
        raise ContextError("workflow_run: no event file (expected the pull_request run's "
                           "uploaded $GITHUB_EVENT_PATH, via --event-file / event_file)")
    pr = _from_pr_payload(repo, _read_json(event_file, "uploaded event file"),
                          "uploaded event file")
    if pr.head_sha != run.get("head_sha"):
        raise ContextError(f"uploaded event file: head SHA {pr.head_sha[:12]} is not the "
                           f"triggering run's {str(run.get('head_sha'))[:12]} (expected the "
                           "event of that run)")
    if client is not None:  # the artifact is untrusted: ask GitHub whose branch that PR is
        got = client.get(f"/repos/{repo}/pulls/{pr.number}").body
        head = got.get("head") or {}
        want = ((run.get("head_repository") or {}).get("full_name"), run.get("head_branch"))
        have = (((head.get("repo") or {}).get("full_name")), head.get("ref"))
        if have != want:
            raise ContextError(f"uploaded event file: PR #{pr.number} is from {have[0]}:"
                               f"{have[1]}, not the triggering run's {want[0]}:{want[1]}")
    return pr


def _from_pr_payload(repo: str, event: dict[str, Any], what: str) -> PullRequest:
    pr = event.get("pull_request")
    if not isinstance(pr, dict) or not isinstance(pr.get("number"), int):
        raise ContextError(f"{what}: no pull_request.number (expected a pull_request event)")
    base = ((pr.get("base") or {}).get("repo") or {}).get("full_name")
    if base and base != repo:
        raise ContextError(f"{what}: the pull request is in {base}, not {repo}")
    return PullRequest(repo, pr["number"], str((pr.get("head") or {}).get("sha") or ""))


# ---- the body


def comment_key(run: RunResult, key: str | None = None) -> str:
    """What keeps two gates in one repository apart: the manifest (or an explicit key)."""
    return key or str(run.manifest.get("path") or run.manifest.get("command") or "parity")


def state_digest(run: RunResult) -> str:
    """What `on-change` compares: the verdict, each failing case's outcome, the findings."""
    doc = {"verdict": run.verdict.result, "blocking": sorted(run.gate.blocking if run.gate
                                                             else []),
           "failing": sorted((c.id, c.outcome.value) for c in run.failures),
           "findings": sorted((f.module, f.kind) for f in run.findings),
           "upstream": sorted((u.op.overload, u.describe()) for u in run.upstream)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def body(run: RunResult, key: str, pr: PullRequest | None, env: Mapping[str, str],
         warnings: list[str] | None = None, limit: int = COMMENT_LIMIT) -> str:
    """The comment: the summary (trimmed by sections to fit), upstream links, footer, markers."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    server = env.get("GITHUB_SERVER_URL", "") or GITHUB
    url = run_url(env)
    text = render(run, run_url=url)
    extra = upstream_markdown(run.upstream, warnings or [])
    if extra:
        text = text.rstrip() + "\n\n" + extra
    where = f" by {md_link('this run', url, server)}" if url else ""
    sha = f" for {md_text(pr.head_sha[:12])}" if pr and pr.head_sha else ""
    footer = (f"\n\n<sub>parity-gate · {code_span(key[:200])}{sha}{where}; the full report "
              "is in the job summary and the JSON artifact.</sub>")
    head = f"{MARKER.format(digest)}\n{STATE.format(state_digest(run))}\n"
    room = limit - len(head) - len(footer) - MARGIN
    return head + fit(text, room) + footer


_HEADING = re.compile(r"^#{2,3} ", re.MULTILINE)
_DETAILS = re.compile(r"\n?<details>.*?</details>\n?", re.DOTALL)
_SEP = re.compile(r"^\|[-:| ]+\|\s*$")
KEEP = re.compile(r"why it blocks|regression|failing|module|upstream", re.IGNORECASE)


def fit(text: str, limit: int) -> str:
    """`text` under `limit` characters, dropping the least needed first: folded details,
    then sections other than the headline, regressions, failing cases, the module table
    and upstream, then table rows from the end of the longest section."""
    if len(text) <= limit:
        return text
    left: list[str] = []
    excess = len(text) - limit
    spans: list[tuple[int, int]] = []
    for block in reversed(list(_DETAILS.finditer(text))):  # the last folded blocks first
        if excess <= 0:
            break
        spans.append(block.span())
        excess -= block.end() - block.start() - 1
    for start, end in spans:  # back to front, so earlier offsets stay valid
        text = text[:start] + "\n" + text[end:]
    if spans:
        left.append("details")
    sections = _split(text)
    for i in range(len(sections) - 1, 0, -1):
        if _joined(sections) <= limit:
            break
        if not KEEP.search(sections[i].splitlines()[0]):
            left.append(sections[i].splitlines()[0].lstrip("# ").strip())
            sections[i] = ""
    while _joined(sections) > limit:
        i = max(range(len(sections)), key=lambda j: len(sections[j]))
        cut = _drop_rows(sections[i], _joined(sections) - limit)
        if cut is None:
            break
        sections[i] = cut
        left.append("rows")
    text = "".join(sections)
    if len(text) > limit:  # nothing left to drop by structure
        text = text[: max(0, limit - 200)].rsplit("\n", 1)[0]
        left.append("the rest")
    names = sorted(set(left) - {"details", "rows", "the rest"})
    what = ", ".join([*(["folded details"] if "details" in left else []), *names,
                      *(["table rows"] if "rows" in left else []),
                      *(["the rest"] if "the rest" in left else [])])
    return text.rstrip() + (f"\n\n_Trimmed to fit GitHub's {COMMENT_LIMIT:,}-character comment "
                            f"limit; left out: {what}._\n")


def _split(text: str) -> list[str]:
    starts = [0, *(m.start() for m in _HEADING.finditer(text) if m.start() > 0)]
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def _joined(sections: list[str]) -> int:
    return sum(len(s) for s in sections) + 120  # + the trim note


def _drop_rows(section: str, excess: int) -> str | None:
    """`section` with enough table rows removed from its end, and a note of how many."""
    lines = section.rstrip("\n").split("\n")
    rows = [i for i, line in enumerate(lines) if line.startswith("|") and not _SEP.match(line)
            and not (i + 1 < len(lines) and _SEP.match(lines[i + 1]))]  # not a header row
    dropped, saved = 0, 0
    while rows and saved < excess + 80:
        i = rows.pop()
        saved += len(lines[i]) + 1
        del lines[i]
        dropped += 1
    if not dropped:
        return None
    return "\n".join(lines) + f"\n\n_{dropped} more rows in the JSON report._\n\n"


# ---- posting


@dataclass(frozen=True)
class Posted:
    action: str  # "created" | "updated" | "unchanged" | "skipped"
    why: str
    url: str = ""


def decide(mode: Mode, blocks: bool, noteworthy: bool, existing: str | None,
           new_body: str) -> tuple[str, str]:
    """(action, why) for a mode; a stale failing comment is always brought up to date.

    `noteworthy`: the run has something to say (a failure, a finding, an upstream
    match); `on-change` opens no first comment for a run without.
    """
    if mode is Mode.OFF:
        return "skipped", "comment: off"
    old_state = _STATE.search(existing or "")
    new_state = _STATE.search(new_body)
    same = bool(old_state and new_state and old_state.group(1) == new_state.group(1))
    if existing is not None and existing.strip() == new_body.strip():
        return "unchanged", "the comment already says this"
    if mode is Mode.ALWAYS:
        return ("updated" if existing is not None else "created"), "comment: always"
    if mode is Mode.ON_CHANGE:
        if existing is None:
            return (("created", "first results for this pull request") if noteworthy
                    else ("skipped", "no comment yet and nothing to report"))
        return (("unchanged", "results unchanged since the comment") if same
                else ("updated", "results changed"))
    if existing is None:  # on-failure
        return ("created", "the gate blocks") if blocks else ("skipped", "the gate passes")
    if not blocks and same:
        return "unchanged", "results unchanged since the comment"
    return "updated", "the gate blocks" if blocks else "clearing an earlier failure"


def find_sticky(client: GitHubClient, pr: PullRequest, key: str) -> dict[str, Any] | None:
    """The sticky comment of this manifest: the marker on the first line, a bot's first."""
    marker = MARKER.format(hashlib.sha256(key.encode()).hexdigest()[:12])
    found = [c for c in client.paginate(f"/repos/{pr.repo}/issues/{pr.number}/comments")
             if (c.get("body") or "").startswith(marker)]
    found.sort(key=lambda c: (((c.get("user") or {}).get("type") != "Bot"), c.get("id", 0)))
    return found[0] if found else None


def post(client: GitHubClient, pr: PullRequest, run: RunResult, mode: Mode, key: str,
         env: Mapping[str, str], warnings: list[str] | None = None) -> Posted:
    """Create, update or leave the sticky comment; raises GitHubError when GitHub fails."""
    if mode is Mode.OFF:
        return Posted("skipped", "comment: off")
    text = body(run, key, pr, env, warnings)
    existing = find_sticky(client, pr, key)
    noteworthy = bool(run.failures or run.findings or any(u.match for u in run.upstream))
    action, why = decide(mode, run.verdict.blocks, noteworthy,
                         existing.get("body") if existing else None, text)
    if action == "created":
        got = client.post(f"/repos/{pr.repo}/issues/{pr.number}/comments", {"body": text}).body
        return Posted(action, why, got.get("html_url", ""))
    if action == "updated" and existing is not None:
        try:
            got = client.patch(f"/repos/{pr.repo}/issues/comments/{existing['id']}",
                               {"body": text}).body
        except GitHubError as exc:  # e.g. someone else's comment carrying our marker
            got = client.post(f"/repos/{pr.repo}/issues/{pr.number}/comments",
                              {"body": text}).body
            return Posted("created", f"could not update comment {existing['id']} ({exc})",
                          got.get("html_url", ""))
        return Posted(action, why, got.get("html_url", ""))
    return Posted(action, why, existing.get("html_url", "") if existing else "")
