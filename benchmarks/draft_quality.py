"""Draft quality of `parity-gate upstream` on a sweep's findings: drafts per root cause,
routing, suppression by upstream texts, titles, repro size, searches and wall time.

Runs the real upstream pass (draft mode) against the tests' local GitHub server
(tests/github_server.py, real HTTP on 127.0.0.1) seeded with upstream issues and pull
requests modelled on real threads (tests/data/upstream/upstream-texts.yml: ten
duplicates of the findings, near misses, and the pull requests that introduced or fixed
an op). Prints one `name: value` line per figure.

    .venv/bin/python benchmarks/draft_quality.py                 # the bundled findings
    .venv/bin/python benchmarks/draft_quality.py RESULTS.json    # a sweep's results
    .venv/bin/python benchmarks/draft_quality.py --verify        # run every repro (minutes)

Root causes are counted with `parity_gate.ops.causes` where it exists (absent on
releases before it: then only the drafts and searches are printed). The paced wall time
is what GitHub's search limit makes of the searches sent: 10 a minute without a token,
30 with one; `--paced token|no-token` measures it, the client pacing its searches as it does
against GitHub.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from github_server import FakeGitHub, Item  # noqa: E402

from parity_gate.github import upstream, upstream_pass  # noqa: E402
from parity_gate.github.client import ClientSettings, GitHubClient  # noqa: E402
from parity_gate.model.results import RunResult  # noqa: E402

DATA = ROOT / "tests" / "data" / "upstream"
ESCAPED = re.compile(r"\\[\[\]_*`]|&#x?\w+;")
ATEN_NODE = re.compile(r"aten::|aten_|\.(Tensor|Scalar|default)\b")
LITERAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?|float\(")


def load(path: Path | None) -> RunResult:
    if path is None:
        return RunResult.from_dict(json.loads(gzip.decompress(
            (DATA / "bundled-findings.json.gz").read_bytes())))
    return RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))


def texts() -> list[dict[str, object]]:
    return list(yaml.safe_load((DATA / "upstream-texts.yml").read_text())["items"])


def defect(sig: object) -> str:
    return f"{sig.op_name}:{sig.symptom.value}"  # type: ignore[attr-defined]


def root_causes(run: RunResult) -> dict[str, str] | None:
    """Signature key → cause key, where this version groups causes."""
    try:
        from parity_gate.ops import causes, signatures
    except ImportError:
        return None
    return {k: c.key for k, c in causes.of(causes.group(signatures.group(run))).items()}


def suppression(reports: list, items: list[dict[str, object]]) -> dict[str, int]:  # type: ignore[type-arg]
    """Duplicates found, drafts wrongly suppressed and pull requests listed."""
    matched = {(r.match.repo, r.match.number, defect(r.signature)) for r in reports
               if r.match is not None and r.signature is not None}
    confident = matched | {(m.repo, m.number, defect(r.signature)) for r in reports
                           if r.signature is not None for m in r.related if m.confident}
    listed = {(m.repo, m.number, defect(r.signature)) for r in reports
              if r.signature is not None for m in [*r.related, r.match] if m is not None}
    dupes = [t for t in items if "claims" in t]
    near = [t for t in items if "claims" not in t]
    at = [(str(t["repo"]), int(str(t["number"]))) for t in items]
    by_item = {w: {d for (repo, n, d) in matched if (repo, n) == w} for w in at}
    return {
        "duplicates": len(dupes),
        "duplicates_found": sum((str(t["repo"]), int(str(t["number"])), str(t["claims"]))
                                in confident for t in dupes),
        "near_misses": len(near),
        "wrongly_suppressed_drafts": sum(len(by_item[(str(t["repo"]), int(str(t["number"])))])
                                         for t in near),
        "prs_to_list": sum("listed_for" in t for t in items),
        "prs_listed": sum((str(t["repo"]), int(str(t["number"])), str(t["listed_for"]))
                          in listed for t in items if "listed_for" in t),
    }


def membership(run: RunResult, reports: list) -> dict[str, int]:  # type: ignore[type-arg]
    """Each cause's grouping checked against its own repro: for every member of a cause
    drafted with more than one member, the cause's call (its drafted lead's variant) on that
    member's trigger (its dtype and its worst element's inputs, one element each, as
    `upstream_repro.candidates` writes them, each candidate) is run; the member belongs where
    one fails the way the member does (where it must fail, with its symptom's special value
    printed). A
    member that is another op (a call decomposed through the cause's) is not measurable
    this way and is counted apart."""
    from parity_gate.github import drafts
    from parity_gate.ops import signatures, upstream_check, upstream_repro

    found = signatures.group(run)
    cases = {sig.key: cs for sig, cs in found}
    cause_of, leads = drafts._leads(reports, found)
    variants, _ = drafts._variants([cases[s.key][0] for s in leads.values()])
    probes: list[dict[str, object]] = []
    built: dict[str, upstream_repro.Repro] = {}
    counts = {"members": 0, "measurable": 0}
    for lead in leads.values():
        cause = cause_of[lead.key]
        if len(cause.members) < 2 or cause.listing:
            continue
        lead_case = cases[lead.key][0]
        variant = variants.get(lead_case.op.variant) if lead_case.op is not None else None
        for sig, member_cases in cause.members:
            if sig.key == lead.key:
                continue
            counts["members"] += 1
            case = member_cases[0]
            own = variants.get(case.op.variant) if case.op is not None else None
            if variant is None or own is None or own.arg_names != variant.arg_names \
                    or sig.op_name != lead.op_name:
                continue  # another op: the cause's repro is not its call
            try:
                candidates = upstream_repro.candidates(sig, case, variant)
            except Exception:
                continue
            if not candidates:
                continue
            counts["measurable"] += 1
            for i, c in enumerate(candidates):
                name = f"{sig.key}\n{i}\n{cause.function} ← {sig.op_name} {sig.symptom.value} " \
                    f"{','.join(sig.dtypes)} {','.join(sig.input_classes)}"
                built[name] = c
                probes.append({"key": name, "script": c.script, "stages": c.stages})
    checked = upstream_check.check_all(  # type: ignore[arg-type]
        probes, [], Path(tempfile.gettempdir()) / "parity-gate-membership-checks.json",
        drafts._salt(run))
    belongs = {name.split("\n")[0] for name, c in built.items()
               if (a := checked.answers.get(name)) and upstream_repro.reproduced(
                   c, a["stage"], a["error"], str(a.get("output", "")))}
    for about in sorted({n.split("\n")[2] for n in built if n.split("\n")[0] not in belongs}):
        print(f"  not reproduced by its cause's repro: {about}")
    return {"grouped_members_of_multi_member_causes": counts["members"],
            "members_measurable_on_the_cause_call": counts["measurable"],
            "members_reproduced_by_the_cause_repro": len(belongs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path)
    parser.add_argument("--verify", action="store_true", help="run every repro (minutes)")
    parser.add_argument("--paced", choices=("token", "no-token"), default=None,
                        help="pace searches as the client does against GitHub (10 a minute "
                             "without a token, 30 with one): the wall time a user waits")
    parser.add_argument("--membership", action="store_true",
                        help="check each cause's members against its own repro (minutes)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy the drafts into this folder, to read them")
    args = parser.parse_args(argv)
    run = load(args.results)
    items = texts()
    with FakeGitHub() as gh, tempfile.TemporaryDirectory() as tmp:
        gh.items += [Item(**{k: v for k, v in t.items()  # type: ignore[arg-type]
                             if k not in ("claims", "listed_for")}) for t in items]
        client = GitHubClient(gh.url, "a-token" if args.paced == "token" else None,
                              ClientSettings(search_per_minute=None if args.paced else 60000,
                                             backoff_s=0.01))
        folder = Path(tmp) / "drafts"
        t0 = time.monotonic()
        got, warnings = upstream_pass.attach(run, client, upstream.UpstreamOptions(
            mode="draft", drafts=folder, verify=args.verify,
            check_cache=Path(tmp) / "checks.json"))
        wall = time.monotonic() - t0
        searches = len(gh.calls("search"))
        files = sorted(folder.iterdir()) if folder.exists() else []
        if args.keep is not None and folder.exists():
            shutil.copytree(folder, args.keep, dirs_exist_ok=True)
        heads = [f.read_text(encoding="utf-8").splitlines()[1][2:] for f in files]
        repos = [f.read_text(encoding="utf-8").split("/issues/new")[0].split("github.com/")[-1]
                 for f in files]
        repros = [b for f in files for b in re.findall(r"```python\n(.*?)\n```",
                                                        f.read_text(encoding="utf-8"), re.DOTALL)]
    reports = list(got.upstream)
    cause_of = root_causes(run)
    drafted_causes = {cause_of[r.signature.key] for r in reports if cause_of and r.draft
                      and r.signature is not None}
    figures: dict[str, object] = {
        "signatures": len(reports),
        "root_causes": len(set(cause_of.values())) if cause_of else "n/a",
        "drafts": len(files),
        "drafts_per_root_cause": round(len(files) / len(drafted_causes), 2)
        if drafted_causes else "n/a",
        "not_drafted": sum(1 for r in reports if r.not_drafted),
        **{f"routed_to {repo}": repos.count(repo) for repo in sorted(set(repos))},
        "titles_escaped": sum(bool(ESCAPED.search(h)) for h in heads),
        "titles_naming_an_aten_node": sum(bool(ATEN_NODE.search(h)) for h in heads),
        "max_repro_literals": max((len(LITERAL.findall(r)) for r in repros), default=0)
        if args.verify else "n/a (--verify)",
        **suppression(reports, items),
        "searches": searches,
        f"wall_s (local server, {'paced, ' + args.paced if args.paced else 'unpaced'})":
            round(wall, 1),
        "paced_min without token (10/min)": round(searches / 10, 1),
        "paced_min with token (30/min)": round(searches / 30, 1),
        "warnings": len(warnings),
    }
    if args.membership:
        figures.update(membership(run, reports))
    for name, value in figures.items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
