"""`parity-gate bisect`: which package, which version broke the selected cases.

Reads the bad run (its failing cases and their signatures), the good and the bad
package sets, the versions in between from the index; runs the search
(`parity_gate.bisect.search`) with real probes (`parity_gate.bisect.probe`); writes
the answer to OUT/bisect.json and OUT/bisect.md, and into the bad run's results.json
and summary.md so the PR comment carries it.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parity_gate.errors import EXIT_FAIL, EXIT_PASS, UserError

OUT = Path("parity-reports/bisect")


def add_parser(sub: Any, commands: dict[str, Callable[[argparse.Namespace], int]]) -> None:
    """Register the subcommand (called by cli.build_parser)."""
    from parity_gate.bisect.probe import DEFAULT_CACHE
    from parity_gate.bisect.sets import STACK

    p = sub.add_parser("bisect", help="which package and version broke the failing cases: "
                       "bisect torch, onnxscript, onnx, onnxruntime releases between a good "
                       "and a bad environment")
    p.add_argument("manifest", nargs="?", type=Path, default=None,
                   help="the run's parity.yml (not needed for `parity-gate ops` results)")
    p.add_argument("--good", required=True, action="append", metavar="SPEC",
                   help="the good environment: a results.json (its recorded versions), a "
                   "requirements or lock file (its == pins), or pins: onnxscript==0.5.3,... "
                   "(repeatable: several files are one set)")
    p.add_argument("--bad", required=True, action="append", metavar="SPEC",
                   help="the bad environment, as --good (a results.json here also gives the "
                   "failing cases)")
    p.add_argument("--from", dest="source", type=Path, metavar="RESULTS.json",
                   help="the bad run's results (default: --bad when it is a results.json)")
    p.add_argument("--select", action="append", default=[], metavar="GLOB",
                   help="the failing cases to bisect (repeatable; default: the run's "
                   "regressions, else its failing cases)")
    p.add_argument("--package", action="append", default=[], metavar="NAME",
                   help=f"bisect this package too (repeatable; default: {', '.join(STACK)})")
    p.add_argument("--allow-heavy", action="store_true",
                   help="probe torch (and other multi-GB builds) too; refused by default")
    p.add_argument("--pre", action="store_true", help="include pre-releases")
    p.add_argument("--yanked", action="store_true", help="include yanked releases")
    p.add_argument("--index", default=os.environ.get("PARITY_GATE_BISECT_INDEX",
                                                     "https://pypi.org/pypi"),
                   metavar="URL", help="the index's JSON API that lists versions "
                   "(default: $PARITY_GATE_BISECT_INDEX, else https://pypi.org/pypi)")
    p.add_argument("--pip-arg", action="append", default=[], metavar="ARG",
                   help="passed to pip install in each probe (repeatable), e.g. "
                   "--pip-arg=--index-url=https://download.pytorch.org/whl/cpu")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help=f"probe environments, one per package set (default: {DEFAULT_CACHE})")
    p.add_argument("--out", type=Path, default=OUT,
                   help=f"bisect.json, bisect.md and each probe's run (default: {OUT})")
    p.add_argument("--probe-timeout", type=float, default=900.0, metavar="S",
                   help="a probe's install or run past S seconds is a skip (default 900)")
    p.add_argument("--max-probes", type=int, default=None, metavar="N",
                   help="stop after N probes in all")
    p.add_argument("--max-minutes", type=float, default=None, metavar="M",
                   help="stop starting probes after M minutes of probing")
    p.add_argument("--source", dest="ops_source", default="catalogue", metavar="S[,S]",
                   help="op-sweep cases: the sweep's --source (default: catalogue)")
    p.add_argument("--upstream", action="store_true",
                   help="list the pull requests merged between the last good and the first "
                   "bad release that mention the culprit's function or kernel (GitHub search; "
                   "GITHUB_TOKEN if set)")
    p.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL",
                                                       "https://api.github.com"),
                   help="GitHub REST API base URL for --upstream")
    p.add_argument("--no-write", action="store_true",
                   help="leave the bad run's results.json and summary.md as they are")
    commands["bisect"] = cmd_bisect


def failing_cases(run: Any, select: list[str], good: Any = None) -> list[Any]:
    """The cases to bisect: --select globs over the run's failing cases, else those that
    passed in the good run (when --good is a results.json), else the run's regressions
    (the gate's blocking cases), else every failing case."""
    failing = {c.id: c for c in run.failures}
    if good is not None and not select:
        passed = {c.id for c in good.cases if c.outcome.value == "pass"}
        chosen = [c for i, c in failing.items() if i in passed]
        if not chosen:
            raise UserError("no case fails in the bad run that passed in the good one "
                            "(expected a regression between them; --select names cases)")
        return chosen
    if select:
        chosen = [c for i, c in failing.items() if any(fnmatch.fnmatchcase(i, g) for g in select)]
        if not chosen:
            raise UserError(f"--select {' '.join(select)}: matches no failing case of the "
                            f"bad run ({len(failing)} failing)")
        return chosen
    blocking = run.gate.blocking if run.gate is not None else []
    chosen = [failing[i] for i in blocking if i in failing] or list(failing.values())
    if not chosen:
        raise UserError("the bad run has no failing case to bisect")
    return chosen


@dataclass
class _Plan:
    """What a bisect searches: the two sets, the failing cases (op-sweep cases or a
    manifest's), the packages that differ, in search order, with their releases between."""

    good: dict[str, str]
    bad: dict[str, str]
    source: Path
    cases: list[Any]
    ops: bool
    order: list[str]
    refs: dict[str, Any]
    candidates: dict[str, Any]
    base: dict[str, str]


def _plan(args: argparse.Namespace) -> _Plan:
    """Read and check the command's inputs (a located UserError otherwise)."""
    from parity_gate.bisect import index
    from parity_gate.bisect.probe import installed
    from parity_gate.bisect.sets import STACK, differing, load_sets, set_problem
    from parity_gate.gate.merge import read_results

    _check_budgets(args)
    good, good_from = load_sets(args.good, "--good")
    bad, bad_from = load_sets(args.bad, "--bad")
    runs = [s for s in args.bad if s.endswith(".json")]
    source = args.source or (Path(runs[0]) if len(runs) == 1 else None)
    if source is None:
        raise UserError("bisect: which cases failed? (expected --from RESULTS.json, the bad "
                        "run's results, or --bad as a results.json)")
    run = read_results(source)[1]
    good_runs = [s for s in args.good if s.endswith(".json")]
    good_run = read_results(Path(good_runs[0]))[1] if len(good_runs) == 1 else None
    cases = failing_cases(run, args.select, good_run)
    ops = all(c.op is not None for c in cases)
    if not ops and args.manifest is None:
        raise UserError("bisect: the cases come from `parity-gate run`: give its manifest "
                        "(parity-gate bisect parity.yml --good ... --bad ...)")
    if args.manifest is not None and not args.manifest.is_file():
        raise UserError(f"{args.manifest}: no such manifest")
    names = [*STACK, *args.package]
    problem = set_problem(good, bad, names, args.package, good_from, bad_from)
    if problem:
        raise UserError(f"bisect: {problem}")
    packages = differing(good, bad, names)
    refs = {p: index.releases(p, args.index) for p in packages}
    for p in packages:
        for flag, version, where in (("--good", good[p], good_from[p]),
                                     ("--bad", bad[p], bad_from[p])):
            if not index.released(refs[p], version):
                raise UserError(f"bisect: {flag} {where}: {p}=={version} is not a release on "
                                f"{args.index} (expected one of its releases; newest: "
                                f"{index.newest(refs[p])})")
    candidates = {p: index.between(refs[p], good[p], bad[p], args.pre, args.yanked)
                  for p in packages}
    order = sorted(packages, key=lambda p: (p in ("torch", "onnxruntime-gpu"), names.index(p)
                                            if p in names else len(names)))
    return _Plan(good, bad, source, cases, ops, order, refs, candidates, installed(names))


def _check_budgets(args: argparse.Namespace) -> None:
    """Budgets are positive and finite, folders are folders (not files, not links): each
    problem one located line (exit 2) before anything is installed."""
    import math

    from parity_gate.bisect.probe import DEFAULT_CACHE
    from parity_gate.model.files import kind_of, own_folder_problem

    for flag, value in (("--probe-timeout", args.probe_timeout),
                        ("--max-probes", args.max_probes), ("--max-minutes", args.max_minutes)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UserError(f"bisect: {flag} {value}: expected a positive finite number")
    for flag, folder in (("--cache-dir", args.cache_dir or DEFAULT_CACHE), ("--out", args.out)):
        if os.path.lexists(folder) and (os.path.islink(folder) or not Path(folder).is_dir()):
            raise UserError(f"bisect: {flag} {folder} is {kind_of(Path(folder))} (expected a "
                            "folder, or a path where one can be made)")
        problem = own_folder_problem(Path(folder), Path.cwd())
        if problem:
            raise UserError(f"bisect: {flag}: {problem}")


def cmd_bisect(args: argparse.Namespace) -> int:
    from parity_gate.bisect.judge import failure_signature, nondeterminism
    from parity_gate.model.bisect import Bisection

    plan = _plan(args)
    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    results: list[Any] = []
    # The gate's own nondeterminism finding in the bad run: flaky before any probe.
    flaky = {c.id: nondeterminism(c) for c in plan.cases if nondeterminism(c)}
    if flaky:
        results.append(Bisection(cases=list(flaky), good=plan.good, bad=plan.bad, flaky=flaky,
                                 repeat="the bad run's own second eager run differed"))
        print(f"parity-gate bisect: {results[0].answer()}", file=sys.stderr)
    groups: dict[str, list[Any]] = {}
    for case in plan.cases:  # one search per failure signature: one cause, one answer
        if case.id not in flaky:
            groups.setdefault(failure_signature(case), []).append(case)
    shared = _Shared(everyone=[c.id for g in groups.values() for c in g])
    start = time.monotonic()
    n = 0
    for group in groups.values():
        while group:  # the cases a search found flaky leave; the others are searched again
            n += 1
            result = _search_group(args, plan, group, out / "probes" / f"{n:02d}", shared,
                                   used=(sum(len([p for p in r.probes if not p.reused])
                                             for r in results), time.monotonic() - start))
            results.append(result)
            print(f"parity-gate bisect: {result.answer()} ({len(result.probes)} probes, "
                  f"{result.wall_s:g} s; {len(result.cases)} case(s): {result.cases[0]}"
                  + (" ..." if len(result.cases) > 1 else "") + ")", file=sys.stderr)
            group = [c for c in group if result.flaky and c.id not in result.flaky]
            if group:
                result.cases = [c for c in result.cases if c in result.flaky]
    if not groups and not flaky:
        results.append(Bisection(cases=[c.id for c in plan.cases], good=plan.good,
                                 bad=plan.bad))
    write(results, out, None if args.no_write else plan.source)
    print(f"parity-gate bisect: {len(results)} failure(s) bisected; {out / 'bisect.md'}",
          file=sys.stderr)
    return EXIT_PASS if results and all(r.culprit for r in results) else EXIT_FAIL


@dataclass
class _Shared:
    """What the command's searches share: the selected cases of every failure (the good set
    and the repeats of the bad set run them all, once) and those runs."""

    everyone: list[str]
    memo: dict[str, Any] = field(default_factory=dict)
    count: int = 0


def _search_group(args: argparse.Namespace, plan: _Plan, group: list[Any], out: Path,
                  shared: _Shared, used: tuple[int, float]) -> Any:
    """One search for the cases of one failure signature, within what is left of the
    budget (`used`: probes and seconds the earlier searches took)."""
    from parity_gate.bisect.judge import failure_signature
    from parity_gate.bisect.probe import (
        DEFAULT_CACHE,
        CaseRunner,
        OverlayInstaller,
        Prober,
        refusal,
    )
    from parity_gate.bisect.search import Budget, search

    runner = CaseRunner(out=out, cases=[c.id for c in group],
                        manifest=args.manifest.absolute() if args.manifest else None,
                        ops_args=["--source", args.ops_source] if plan.ops else [],
                        timeout=args.probe_timeout)
    prober = Prober(OverlayInstaller((args.cache_dir or DEFAULT_CACHE).absolute(),
                                     index_args=args.pip_arg, timeout=args.probe_timeout),
                    runner, {c.id: failure_signature(c) for c in group},
                    count=shared.count, everyone=shared.everyone, memo=shared.memo)
    budget = Budget(args.max_probes, args.max_minutes * 60 if args.max_minutes else None,
                    used_probes=used[0], used_seconds=used[1])
    group_start = time.monotonic()
    order = plan.order
    result = search({p: plan.good[p] for p in order}, {p: plan.bad[p] for p in order},
                    {p: plan.candidates[p] for p in order}, prober,
                    refuse=lambda pins: refusal(pins, plan.base, args.allow_heavy),
                    budget=budget, cases=[c.id for c in group])
    shared.count = prober.count
    result.wall_s = round(time.monotonic() - group_start, 1)
    if args.upstream and result.culprit:
        _upstream(result, plan.refs, group, args.api_url)
    return result


def _upstream(result: Any, refs: dict[str, Any], cases: list[Any], api_url: str) -> None:
    from dataclasses import replace

    from parity_gate.bisect.index import uploaded
    from parity_gate.bisect.upstream import looks_for, merged_between, terms
    from parity_gate.github.client import GitHubClient

    token = os.environ.get("PARITY_GATE_UPSTREAM_TOKEN") or os.environ.get("GITHUB_TOKEN")
    client = GitHubClient(api_url, token)
    for i, rec in enumerate(result.packages):
        if rec.package != result.culprit or rec.first_bad is None or rec.last_good is None:
            continue
        words = list(dict.fromkeys(t for c in cases for t in terms(c, rec.package)))
        prs, note = merged_between(client, rec.package,
                                   uploaded(refs[rec.package], rec.last_good),
                                   uploaded(refs[rec.package], rec.first_bad), words)
        result.packages[i] = replace(rec, upstream=prs, upstream_note=note,
                                     upstream_looks_for=looks_for(rec.last_good,
                                                                  rec.first_bad))


def write(results: list[Any], out: Path, source: Path | None) -> None:
    """OUT/bisect.json and bisect.md; the bad run's results.json (and its summary.md, when
    it has one) carry the answers too."""
    from parity_gate.gate.merge import read_results
    from parity_gate.model.files import atomic_write
    from parity_gate.report import bisect as bisect_md
    from parity_gate.report.markdown import render

    # Never through a link: each file is replaced in one rename, and a link where one
    # belongs is left alone and said (atomic_write's rule).
    atomic_write(out / "bisect.json", json.dumps([r.to_dict() for r in results], indent=2)
                 + "\n")
    atomic_write(out / "bisect.md", bisect_md.markdown(results) + "\n")
    if source is None:
        return
    run = read_results(source)[1]
    run.bisect = results
    for path, text in ((source, json.dumps(run.to_dict(), indent=2)),
                       (source.parent / "summary.md", render(run))):
        if path.is_symlink():
            print(f"parity-gate bisect: {path} is a symbolic link: not written through "
                  "(the answer is in bisect.json and bisect.md)", file=sys.stderr)
        elif path == source or path.is_file():
            atomic_write(path, text + "\n")
