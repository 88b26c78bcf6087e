"""Search the exporter's repositories before reporting anything; draft or open what is new.

For every failing case that pins an op, microsoft/onnxscript and pytorch/pytorch
(label "module: onnx") are searched, issues and pull requests as separate
queries, open and closed, by the op's name and ATen overload. Hits are ranked
(title match, state, recency) and the best is attached to the run as an
`UpstreamReport`. Unmatched findings get a markdown draft in the target
repository's convention, or (`create`) an issue, at most N per run, never twice
(the issue carries a fingerprint that is searched for first).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from parity_gate.github.client import GitHubClient, GitHubError, RateLimited
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.model.text import (
    code_block,
    code_span,
    github_url,
    md_cell,
    md_link,
    md_text,
    one_line,
)
from parity_gate.model.upstream import MatchKind, OpRef, UpstreamMatch, UpstreamReport


@dataclass(frozen=True)
class Repo:
    """An upstream repository and the qualifiers that keep a search to the exporter."""

    name: str
    qualifiers: str = ""


REPOS = (Repo("microsoft/onnxscript"), Repo("pytorch/pytorch", 'label:"module: onnx"'))
KINDS = ("issue", "pr")
# Not exporter defects (README "Case ids and outcomes"): a runtime gap, a broken module.
NOT_EXPORTER = frozenset({Outcome.NO_KERNEL, Outcome.EAGER_ERROR})
STATE_SCORE = {MatchKind.OPEN_PR: 3.0, MatchKind.MERGED_PR: 2.5, MatchKind.OPEN_ISSUE: 2.0,
               MatchKind.CLOSED_ISSUE: 1.0, MatchKind.CLOSED_PR: 0.5}
FINGERPRINT_PREFIX = "parity-gate-finding"
TITLE_LIMIT = 256  # GitHub rejects longer issue titles


# ---- which findings pin an op


def op_findings(run: RunResult) -> list[tuple[OpRef, list[CaseResult]]]:
    """Failing cases that pin an op, grouped by ATen overload (first-seen order).

    Op-sweep cases pin theirs (`case.op`); a module case will once localisation
    names its op (then it feeds one more `OpRef` here, with source "localised").
    """
    groups: dict[str, tuple[OpRef, list[CaseResult]]] = {}
    for case in sorted(run.failures, key=lambda c: c.key.sort_key):
        if case.op is None or not case.op.op or case.outcome in NOT_EXPORTER:
            continue
        if case.recheck is not None and (case.recheck.verdict.dismisses
                                         or case.recheck.verdict.value == "eager_off"):
            continue  # explained away: not an exporter bug to report
        ref = OpRef(overload=case.op.op, variant=case.op.variant, source="ops")
        groups.setdefault(ref.key, (ref, []))[1].append(case)
    return list(groups.values())


# ---- searching and ranking


def queries(op: OpRef) -> list[tuple[Repo, str, str]]:
    """(repo, kind, q) for one op: each repository, issues and PRs apart."""
    terms = op.name if op.name == op.overload else f'({op.name} OR "{op.overload}")'
    return [(repo, kind, " ".join(p for p in (f"repo:{repo.name}", f"is:{kind}",
                                               repo.qualifiers, terms) if p))
            for repo in REPOS for kind in KINDS]


def _word(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", text, re.IGNORECASE) is not None


def text_score(op: OpRef, title: str, body: str) -> float:
    """How surely an issue is about this op: the overload or `aten::name` in the title most."""
    exact = [op.overload, f"aten::{op.name}", f"aten.{op.name}", f"torch.{op.name}"]
    if any(e.lower() in title.lower() for e in exact):
        return 3.0
    if _word(title, op.name):
        return 2.0
    if any(e.lower() in body.lower() for e in exact):
        return 1.0
    return 0.0  # a bare word in the body only: too weak to claim a match


def kind_of(item: dict[str, Any]) -> MatchKind:
    pr = item.get("pull_request")
    if pr is not None:
        if item.get("state") == "open":
            return MatchKind.OPEN_PR
        return MatchKind.MERGED_PR if pr.get("merged_at") else MatchKind.CLOSED_PR
    return MatchKind.OPEN_ISSUE if item.get("state") == "open" else MatchKind.CLOSED_ISSUE


def rank(op: OpRef, repo: str, items: Iterable[dict[str, Any]],
         now: datetime | None = None) -> list[UpstreamMatch]:
    """Matches, best first: title match, then state (open PR > merged > issue), then recency."""
    now = now or datetime.now(timezone.utc)
    out: list[UpstreamMatch] = []
    for item in items:
        text = text_score(op, item.get("title") or "", item.get("body") or "")
        if text <= 0:
            continue
        kind = kind_of(item)
        updated = item.get("updated_at") or ""
        try:
            age_days = (now - datetime.fromisoformat(updated.replace("Z", "+00:00"))).days
        except ValueError:
            age_days = 10**6
        recency = 1.0 if age_days <= 90 else 0.5 if age_days <= 365 else 0.0
        out.append(UpstreamMatch(repo=repo, number=int(item["number"]), title=item["title"],
                                 url=item["html_url"], kind=kind, updated_at=updated,
                                 score=3 * text + STATE_SCORE[kind] + recency))
    return sorted(out, key=_order)


def _order(m: UpstreamMatch) -> tuple[float, float, str, int]:
    return (-m.score, -_epoch(m.updated_at), m.repo, m.number)


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def search(client: GitHubClient, found: list[tuple[OpRef, list[CaseResult]]],
           ) -> tuple[list[UpstreamReport], list[str]]:
    """One report per op, and the warnings; a rate limit stops the rest (said in each)."""
    reports: list[UpstreamReport] = []
    warnings: list[str] = []
    stopped: str | None = None
    for op, cases in found:
        ids = [c.id for c in cases]
        if stopped:
            reports.append(UpstreamReport(op=op, cases=ids, searched=False, error=stopped))
            continue
        matches: list[UpstreamMatch] = []
        error = None
        try:
            for repo, _kind, q in queries(op):
                items = client.search_issues(q).body.get("items") or []
                matches += rank(op, repo.name, items)
        except RateLimited as exc:
            when = (datetime.fromtimestamp(exc.reset, timezone.utc).strftime("%H:%M UTC")
                    if exc.reset else "later")
            stopped = f"search stopped: GitHub rate limit until {when}"
            warnings.append(f"upstream search stopped at {op.overload}: {exc}")
            error = stopped
        except GitHubError as exc:
            error = f"search failed: {exc}"
            warnings.append(f"upstream search for {op.overload} failed: {exc}")
        best = min(matches, key=_order) if matches and error is None else None
        reports.append(UpstreamReport(op=op, cases=ids, match=best, searched=error is None,
                                      error=error))
    return reports, warnings


# ---- drafting and creating new reports


def fingerprint(op: OpRef, cases: list[CaseResult]) -> str:
    """Stable id of a finding (op and how it fails), written into the report it opens."""
    outcomes = sorted({c.outcome.value for c in cases})
    digest = hashlib.sha256(f"{op.overload}|{'/'.join(outcomes)}".encode()).hexdigest()[:12]
    return f"{FINGERPRINT_PREFIX}-{digest}"


def target_repo(cases: list[CaseResult]) -> str:
    """The dynamo exporter's translations live in onnxscript; the legacy one in pytorch."""
    exporter = cases[0].provenance.exporter if cases else ""
    return "pytorch/pytorch" if exporter == "torchscript" else "microsoft/onnxscript"


def _title(op: OpRef, cases: list[CaseResult], repo: str) -> tuple[str, str]:
    """(the repository's prefix, what failed): the issue's title, in two parts so that the
    draft's heading can escape only the part that comes from outside."""
    outcomes = sorted({c.outcome.value for c in cases})
    dtypes = sorted({c.key.dtype for c in cases})
    prefix = "[ONNX]" if repo == "pytorch/pytorch" else "[torchlib]"
    return prefix, f"{op.overload}: {', '.join(outcomes)} for {', '.join(dtypes)}"


def draft(op: OpRef, cases: list[CaseResult], run: RunResult, repro: str | None) -> tuple[
        str, str, str]:
    """(repository, title, body) of a new report in that repository's convention.

    Every value from the run (results.json may be a fork's) is inert where it lands:
    the title one plain line, prose and cells escaped markdown, ids in code spans, the
    repro in a fence no backtick run inside can close."""
    repo = target_repo(cases)
    first = cases[0]
    prefix, subject = _title(op, cases, repo)
    title = one_line(f"{prefix} {subject}")[:TITLE_LIMIT]
    dynamo = first.provenance.exporter != "torchscript"
    lines = ["### 🐛 Describe the bug", "",
             f"{code_span(f'torch.onnx.export(..., dynamo={dynamo})')} of a module calling "
             f"{code_span(op.overload)} (variant {code_span(op.variant)}) gives results that "
             "differ from eager PyTorch when run in ONNX Runtime.", "",
             md_text(first.explanation), "", "### Expected vs actual", "",
             "| case | outcome | expected (eager) vs actual (ONNX Runtime) |", "|---|---|---|"]
    for case in cases[:10]:
        lines.append(f"| {code_span(case.id, table=True)} | {case.outcome.value} | "
                     f"{md_cell(_expected_actual(case))} |")
    if len(cases) > 10:
        lines.append(f"\n{len(cases) - 10} more cases fail the same way.")
    lines += ["", "### Minimal repro", ""]
    command = code_span(f"parity-gate ops --select '{op.variant}'")
    lines += ([code_block(repro, "python")] if repro
              else [f"(no repro script was written for this finding; run {command} to write "
                    "one)"])
    lines += ["", "### Versions", ""]
    for name in ("torch", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu", "python"):
        if name in run.versions:
            lines.append(f"- {name}: {md_text(run.versions[name])}")
    lines += ["", f"<sub>Found by parity-gate's op sweep ({FINGERPRINT_PREFIX}: "
              f"`{fingerprint(op, cases)}`).</sub>", ""]
    return repo, title, "\n".join(lines)


def _expected_actual(case: CaseResult) -> str:
    example = case.op.example if case.op is not None else None
    if example is not None:
        return example.describe()
    worst = case.worst()
    if worst is not None and not worst.passed:
        return worst.headline()
    return case.reason


def find_repro(cases: list[CaseResult], repro_dir: Path | None) -> str | None:
    """The op sweep's standalone script for this finding (`repro/<variant>__<outcome>.py`);
    a variant naming another folder (`../..`) has none: what it reads may be posted."""
    if repro_dir is None or not cases or cases[0].op is None:
        return None
    name = f"{cases[0].op.variant}__{cases[0].outcome.value}.py"
    if Path(name).name != name or name.startswith("."):
        return None
    path = repro_dir / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def write_drafts(run: RunResult, reports: list[UpstreamReport],
                 found: list[tuple[OpRef, list[CaseResult]]], folder: Path,
                 repro_dir: Path | None) -> list[UpstreamReport]:
    """One markdown draft per searched, unmatched finding; reports gain the draft's path."""
    cases = {op.key: cs for op, cs in found}
    out = []
    for report in reports:
        if report.match is None and report.searched:
            repo, _, body = draft(report.op, cases[report.op.key], run,
                                  find_repro(cases[report.op.key], repro_dir))
            prefix, subject = _title(report.op, cases[report.op.key], repo)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{_slug(report.op.overload)}.md"
            path.write_text(f"<!-- open at https://github.com/{repo}/issues/new -->\n"
                            f"# {prefix} {md_text(subject)}\n\n{body}", encoding="utf-8")
            report = _replace(report, draft=str(path))
        out.append(report)
    return out


def create_issues(client: GitHubClient, run: RunResult, reports: list[UpstreamReport],
                  found: list[tuple[OpRef, list[CaseResult]]], repro_dir: Path | None,
                  limit: int, ledger: Path | None) -> tuple[list[UpstreamReport], list[str]]:
    """Open an issue for each unmatched finding (at most `limit`), never twice.

    Before writing it searches for the finding's fingerprint (an earlier run's
    issue) and reads the local ledger (search indexing lags a fresh issue).
    """
    cases = {op.key: cs for op, cs in found}
    done = _read_ledger(ledger)
    out: list[UpstreamReport] = []
    warnings: list[str] = []
    opened = 0
    for report in reports:
        if report.match is not None or not report.searched:
            out.append(report)
            continue
        cs = cases[report.op.key]
        fp = fingerprint(report.op, cs)
        repo, title, body = draft(report.op, cs, run, find_repro(cs, repro_dir))
        try:
            url = done.get(fp) or _find_own(client, repo, fp)
            if url is None and opened >= limit:
                warnings.append(f"not opening an issue for {report.op.overload}: the limit of "
                                f"{limit} new issues per run is reached")
            elif url is None:
                url = client.post(f"/repos/{repo}/issues", {"title": title, "body": body}
                                  ).body["html_url"]
                opened += 1
        except GitHubError as exc:
            warnings.append(f"could not open an issue for {report.op.overload}: {exc}")
            url = None
        if url:
            done[fp] = url
            _write_ledger(ledger, done)
            report = _replace(report, created=url)
        out.append(report)
    return out, warnings


def _find_own(client: GitHubClient, repo: str, fp: str) -> str | None:
    items = client.search_issues(f'repo:{repo} is:issue "{fp}" in:body').body.get("items")
    for item in items or []:
        if fp in (item.get("body") or ""):
            return str(item["html_url"])
    return None


def _read_ledger(path: Path | None) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write_ledger(path: Path | None, done: dict[str, str]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(done, indent=1, sort_keys=True), encoding="utf-8")


def _replace(report: UpstreamReport, **changes: Any) -> UpstreamReport:
    return UpstreamReport.from_dict({**report.to_dict(), **changes})


def _slug(text: str) -> str:
    return re.sub(r"[^\w.-]+", "_", text)[:120]


# ---- showing it


def markdown(reports: list[UpstreamReport], warnings: Iterable[str] = ()) -> str:
    """The "Upstream" section of the summary and the PR comment."""
    if not reports and not warnings:
        return ""
    lines = [f"### Upstream ({len(reports)} op(s) searched in microsoft/onnxscript and "
             "pytorch/pytorch)", "", "| op | cases | upstream |", "|---|---|---|"]
    for r in reports:
        link = ""
        if r.match is not None:  # rebuilt from repo and number: a record's url is not used
            link = f" — {md_link(r.match.title[:80], _issue_url(r.match.repo, r.match.number))}"
        elif r.created:  # linked only where it is an issue page on github.com
            link = f" — {md_link('the new issue', r.created)}"
        lines.append(f"| {code_span(r.op.overload, table=True)} | {len(r.cases)} | "
                     f"{md_cell(r.describe())}{link} |")
    lines += [f"\n> ⚠️ {md_cell(w, 300)}" for w in warnings]
    return "\n".join([*lines, ""])


def _issue_url(repo: str, number: int) -> str | None:
    """The github.com page of an issue or pull request in one of the searched repositories
    (`/issues/N` shows a pull request too); None for any other repository."""
    return github_url(repo, "issues", number) if repo in {r.name for r in REPOS} else None


# ---- one pass, shared by `parity-gate upstream` and the Action


@dataclass(frozen=True)
class UpstreamOptions:
    mode: str = "draft"               # "search" | "draft" | "create"
    drafts: Path | None = None        # where drafts go (draft mode)
    repro_dir: Path | None = None     # the op sweep's repro/ folder
    max_create: int = 3
    ledger: Path | None = None        # issues this machine opened (create mode)


def attach(run: RunResult, client: GitHubClient, options: UpstreamOptions,
           ) -> tuple[RunResult, list[str]]:
    """`run` with `upstream` filled in (search, then draft or create), and the warnings.

    Never raises for GitHub's sake: every failure is a warning and a note on the
    op it concerns; the gate's verdict is untouched (it is not recomputed here).
    """
    found = op_findings(run)
    reports, warnings = search(client, found)
    if options.mode == "draft" and options.drafts is not None:
        reports = write_drafts(run, reports, found, options.drafts, options.repro_dir)
    elif options.mode == "create":
        reports, more = create_issues(client, run, reports, found, options.repro_dir,
                                      options.max_create, options.ledger)
        warnings += more
    data = run.to_dict()
    data["upstream"] = [r.to_dict() for r in reports]
    return RunResult.from_dict(data), warnings
