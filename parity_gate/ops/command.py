"""`parity-gate ops`: plan → sweep on warm workers → RunResult → gate, reports, repros.

Side effects (processes, files, console) live here; everything it writes is
a function of the RunResult, so the JSON/JUnit writers of `run` serve as is.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from parity_gate.engine.signals import Interrupted, Signals, interruptible
from parity_gate.errors import UserError
from parity_gate.ops.jobs import source_of

OUT = Path("parity-reports/ops")


def _csv(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def add_parser(sub: Any, commands: dict[str, Callable[[argparse.Namespace], int]]) -> None:
    """Register the subcommand (called by cli.build_parser)."""
    p = sub.add_parser("ops", help="op-level differential sweep: which exported op is wrong, "
                       "on which dtype and values")
    p.add_argument("--select", action="append", default=[], metavar="GLOB",
                   help="variants or case ids to run (repeatable), e.g. 'atan2', 'sum.*', "
                   "'op/*/float16/specials/*'")
    p.add_argument("--dtype", type=_csv, default=[], metavar="D[,D]",
                   help="only these dtypes, e.g. float16,int8")
    p.add_argument("--family", type=_csv, default=[], metavar="F[,F]",
                   help="only these families, e.g. reduction,loss (see --list)")
    p.add_argument("--source", type=_csv, default=["catalogue"], metavar="S[,S]",
                   help="what to sweep: catalogue (the hand-written records, default), "
                   "opinfo (every sample of PyTorch's OpInfo database; needs expecttest), "
                   "or both: catalogue,opinfo")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="run one part of an N-way split (whole variants), e.g. 2/8; "
                   "`parity-gate ops --from` joins the shards' results.json")
    p.add_argument("--from", dest="from_results", nargs="+", type=Path, default=None,
                   metavar="RESULTS.json",
                   help="sweep nothing: gate and report the results.json of earlier runs "
                   "(e.g. every shard of a --shard K/N matrix, checked complete and "
                   "disjoint); with --update-baseline, update from them")
    p.add_argument("--providers", type=_csv, default=["cpu"], metavar="P[,P]",
                   help="execution providers (default: cpu)")
    p.add_argument("--jobs", type=int, default=2, help="warm worker processes (default 2)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="op cases exported together as one module (default 160)")
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--out", type=Path, default=OUT,
                   help=f"folder for results.json, junit.xml, findings.md, repro/ "
                   f"(default: {OUT})")
    p.add_argument("--baseline", type=Path, default=None, metavar="PATH",
                   help="known findings (default: the list bundled for the pinned versions)")
    p.add_argument("--no-baseline", action="store_true",
                   help="every finding fails the gate (catalogue xfails still count as known)")
    p.add_argument("--update-baseline", action="store_true",
                   help="write this run's findings into the baseline file, then exit 0")
    p.add_argument("--fail-on", choices=("regressions", "any-failure", "never"), default=None,
                   help="what fails: regressions (new findings; default with a baseline), "
                   "any-failure, never")
    p.add_argument("--strict", action="store_true",
                   help="a known finding that now passes fails the gate too")
    p.add_argument("--list", action="store_true",
                   help="list the selected variants and case counts; run nothing")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    commands["ops"] = run_command


def run_command(args: argparse.Namespace) -> int:
    import parity_gate.ops.sweep  # noqa: F401  (imported before the signal handler is set)
    from parity_gate.ops.accepted import accepted
    from parity_gate.ops.planner import DEFAULT_BATCH, Selection, case_ids, plan
    from parity_gate.plan.sharding import Shard

    if args.from_results is not None:
        return _from_results(args)
    if args.jobs < 1:
        raise UserError(f"--jobs: got {args.jobs} (expected an integer >= 1)")
    shard = Shard.parse(args.shard) if args.shard is not None else None
    sources = _sources(args.source)
    _check_providers(args.providers)
    variants, eager_dtypes = load_sources(sources, accepted)
    selection = Selection(args.select, args.dtype, args.family, args.providers)
    op_plan = plan(variants, selection, batch_size=args.batch_size or DEFAULT_BATCH,
                   seed=args.seed, accepted=eager_dtypes, sources=sources, shard=shard)
    if args.list:
        return _list(op_plan, selection)
    if not op_plan.total:
        raise UserError("ops: the filters match no case (see `parity-gate ops --list`)")
    if args.update_baseline and (args.select or args.dtype or args.family or shard):
        raise UserError("--update-baseline: only on the whole catalogue (expected no --select, "
                        "--dtype, --family or --shard; entries of the ops left out would be "
                        "dropped as stale; to update from a shard matrix, use --from with "
                        "every shard's results.json)")
    baseline = _baseline(args, sources, variants)
    run = new_run(op_plan)
    run.shard = str(shard) if shard is not None else None
    universe = case_ids(variants, args.providers, eager_dtypes)
    with interruptible() as signals:  # reports included: later signals wait for them
        execute(run, op_plan, selection, args.jobs, signals, quiet=args.quiet)
        decision = _decide_and_report(run, baseline, variants, universe, args)
    return _finish(run, decision, variants, sources, args, signals.stopped)


def _from_results(args: argparse.Namespace) -> int:
    """`--from`: the results of earlier runs (a shard matrix, merged) gated and reported
    as if swept now; an update needs them to hold every planned case of their sources."""
    from parity_gate.gate.merge import merge_files
    from parity_gate.ops.accepted import accepted
    from parity_gate.ops.planner import case_ids

    given = [n for n, v in (("--select", args.select), ("--dtype", args.dtype),
                            ("--family", args.family), ("--shard", args.shard),
                            ("--list", args.list)) if v]
    if given:
        raise UserError(f"--from: {given[0]} cannot be combined with --from (expected the "
                        "filters on the runs that wrote the results)")
    run, _ = merge_files(args.from_results)
    if not run.cases:
        raise UserError(f"--from: {args.from_results[0]}: no case in the results")
    if run.manifest.get("command") != "ops":
        raise UserError(f"--from: {args.from_results[0]}: not results of `parity-gate ops` "
                        "(expected the results.json of an op sweep)")
    sources = tuple(dict.fromkeys(sorted(source_of(c.id) for c in run.cases)))
    providers = sorted({c.key.provider for c in run.cases})
    variants, eager_dtypes = load_sources(sources, accepted)
    universe = case_ids(variants, providers, eager_dtypes)
    if args.update_baseline:
        if run.interrupted:
            raise UserError("--update-baseline: the results are of an interrupted run (a "
                            "partial run would drop every finding it did not reach)")
        missing = sorted(universe - {c.id for c in run.cases})
        if missing:
            raise UserError(f"--update-baseline: the results lack {len(missing)} planned "
                            f"case(s) of the {' and '.join(_names(sources))} source(s), e.g. "
                            f"{missing[0]} (expected every shard of a whole sweep)")
    baseline = _baseline(args, sources, variants)
    with interruptible() as signals:
        decision = _decide_and_report(run, baseline, variants, universe, args)
    return _finish(run, decision, variants, sources, args, signals.stopped)


def _names(sources: tuple[str, ...]) -> list[str]:
    from parity_gate.ops.jobs import SOURCES

    return [name for name, source in SOURCES.items() if source in sources]


def _baseline(args: argparse.Namespace, sources: tuple[str, ...],
              variants: dict[str, Any]) -> Any:
    """The known findings in force, limited to the swept sources' entries: a catalogue
    run does not call the OpInfo findings stale."""
    from dataclasses import replace

    from parity_gate.ops import gating

    path = None if args.no_baseline else (args.baseline or gating.BUNDLED)
    if args.baseline is not None and not args.baseline.is_file() and not args.update_baseline:
        raise UserError(f"--baseline: {args.baseline}: file not found")
    baseline = gating.load_baseline(path if path and path.is_file() else None, variants)
    if baseline is None:
        return None
    return replace(baseline, entries=tuple(e for e in baseline.entries
                                           if source_of(e.id) in sources))


def _decide_and_report(run: Any, baseline: Any, variants: dict[str, Any], universe: set[str],
                       args: argparse.Namespace) -> Any:
    """`universe`: every planned case id of the swept sources (stale entries match none)."""
    from parity_gate.ops import gating

    decision = gating.gate(run, baseline, args.fail_on, args.strict, universe)
    run.gate = decision  # results.json carries the decision (and its one verdict)
    _report(run, decision, variants, args)
    return decision


def _finish(run: Any, decision: Any, variants: dict[str, Any], sources: tuple[str, ...],
            args: argparse.Namespace, stopped: int | None) -> int:
    """The exit code; with --update-baseline, the file rewritten from the run first (the
    swept sources' entries only)."""
    from parity_gate.ops import gating
    from parity_gate.report.write import atomic_write

    if args.update_baseline and stopped is not None:
        print("parity-gate ops: interrupted: the baseline was not updated (a partial run "
              "would drop every finding it did not reach)", file=sys.stderr)
        return 128 + stopped
    if args.update_baseline:
        target = args.baseline or gating.BUNDLED
        text, changes = gating.updated_baseline(target, run, variants, sources)
        atomic_write(target, text.encode("utf-8"))
        for change in changes:
            print(f"parity-gate ops: baseline {change}", file=sys.stderr)
        print(f"parity-gate ops: wrote {target}", file=sys.stderr)
        return 0
    return 128 + stopped if stopped is not None else decision.exit_code


def _sources(names: list[str]) -> tuple[str, ...]:
    from parity_gate.ops.jobs import SOURCES

    bad = [n for n in names if n not in SOURCES]
    if bad or not names:
        raise UserError(f"--source: unknown source {bad[0] if bad else ''!r} (expected some "
                        f"of {', '.join(SOURCES)})")
    return tuple(SOURCES[n] for n in dict.fromkeys(names))


def load_sources(sources: tuple[str, ...], accepted: Callable[..., Any]
                 ) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    """Variants of every source, and the dtypes eager accepts for each: probed for the
    catalogue (ops.accepted), as measured when the OpInfo variants were built."""
    from parity_gate.ops.jobs import MEASURED_SOURCES
    from parity_gate.ops.registry import load_variants

    variants = load_variants(sources)
    probed = tuple(s for s in sources if s not in MEASURED_SOURCES)
    eager = accepted(load_variants(probed), probed) if probed else {}
    for source in sources:
        if source in MEASURED_SOURCES:
            eager.update({vid: v.dtypes for vid, v in load_variants((source,)).items()})
    return variants, eager


def _check_providers(names: list[str]) -> None:
    """A provider this machine cannot run is a usage error, not 9 000 runtime errors."""
    from parity_gate.engine.runtime import available_providers
    from parity_gate.plan.providers import availability, check_names

    check_names(names)
    found = available_providers()
    missing = [availability(n, found) for n in names]
    problems = [f"--providers: {m.reason}" for m in missing if not m.available]
    if problems:
        raise UserError(problems)


def new_run(op_plan: Any) -> Any:
    """The sweep's RunResult before any case: every planned case counted, skips included."""
    from parity_gate import __version__
    from parity_gate.engine.environment import versions
    from parity_gate.engine.runtime import available_providers
    from parity_gate.model.results import RunResult

    run = RunResult(tool_version=__version__,
                    started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    manifest={"command": "ops", "sha256": op_plan.fingerprint,
                              "units": op_plan.unit_count,
                              "variants": len({u.variant for j in op_plan.jobs
                                               for u in j.units})},
                    versions=versions(available_providers()))
    run.planned = op_plan.total
    run.cases.extend(op_plan.skipped)
    return run


def execute(run: Any, op_plan: Any, selection: Any, jobs: int, signals: Signals,
            quiet: bool = False) -> None:
    """Run the plan into `run`; the first SIGINT/SIGTERM stops it and keeps what finished
    (the workers are closed before this returns)."""
    from parity_gate.ops.sweep import SweepStats, sweep  # already imported: no window

    stats = SweepStats()
    progress = _Progress(op_plan.total - len(op_plan.skipped), quiet)
    t0 = time.monotonic()
    cases = sweep(op_plan, selection, jobs, stats=stats)  # starts nothing until iterated
    try:
        for case in cases:
            run.cases.append(case)
            progress.tick(case)
    except Interrupted as stop:
        signals.shutting_down()
        run.interrupted = True
        progress.say(stop.notice("parity-gate ops", len(run.cases), run.planned))
    finally:
        signals.shutting_down()
        cases.close()  # closes the pool: no worker outlives the sweep
    run.duration_s = time.monotonic() - t0
    run.manifest.update(jobs=stats.jobs, resplits=stats.resplits,
                        workers_spawned=stats.workers_spawned)
    progress.done(run)


class _Progress:
    """A line every ~5 % and one per crash: thousands of per-case lines help nobody.
    Masked like the reports (a crash reason may quote a token)."""

    def __init__(self, total: int, quiet: bool) -> None:
        from parity_gate.report.secrets import MaskedStream

        self.total, self.quiet, self.count, self.next = total, quiet, 0, 0
        self.t0 = time.monotonic()
        self.stream = MaskedStream(sys.stderr)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def tick(self, case: Any) -> None:
        self.count += 1
        if case.outcome.value in ("crash", "timeout"):
            self.say(f"parity-gate ops: {case.outcome.value} {case.id}: {case.reason}")
        if self.count >= self.next:
            self.say(f"parity-gate ops: [{self.count}/{self.total}] "
                     f"{time.monotonic() - self.t0:.0f}s")
            self.next = self.count + max(1, self.total // 20)

    def done(self, run: Any) -> None:
        counts = ", ".join(f"{k} {v}" for k, v in run.counts().items())
        self.say(f"parity-gate ops: {len(run.cases)} cases in {run.duration_s:.0f}s: {counts}")


def _list(op_plan: Any, selection: Any) -> int:
    from collections import Counter

    units = Counter(u.variant for j in op_plan.jobs for u in j.units)
    for vid, v in sorted(op_plan.variants.items(), key=lambda kv: (kv[1].family, kv[0])):
        if units.get(vid):
            print(f"{v.family:<12} {vid:<40} {units[vid]:>3} cases  {v.call}")
    print(f"{len(units)} variants, {op_plan.total} cases "
          f"({len(op_plan.skipped)} skipped by the catalogue), "
          f"{len(op_plan.jobs)} batches", file=sys.stderr)
    return 0


def _report(run: Any, decision: Any, variants: dict[str, Any],
            args: argparse.Namespace) -> None:
    from parity_gate.engine.runtime import first_line
    from parity_gate.gate.decision import notices
    from parity_gate.ops import findings, repro
    from parity_gate.report.secrets import MaskedStream
    from parity_gate.report.write import ReportPaths, write_all

    out: Path = args.out
    table = findings.rows(run, decision)
    repro_dir = out / "repro"
    summary = findings.render(run, table, decision, str(repro_dir))
    write_all(run, ReportPaths.in_folder(out, summary=out / "findings.md"), summary)
    console = MaskedStream(sys.stderr)
    try:  # after the reports: a repro folder that cannot be written never costs them
        repro.write_all(table, variants, repro_dir, run.versions, args.seed)
    except (OSError, UserError) as exc:
        print(f"parity-gate ops: repro scripts not written: {first_line(str(exc), 300)}",
              file=console)
    if not args.quiet:
        for line in findings.summary_lines(table):
            print(f"  {line}", file=console)
    lines = notices(decision)
    for line in lines[:-1][:50] + lines[-1:]:  # regressions, fixed, stale; then the verdict
        print(line, file=console)
    verdict = run.verdict  # an interrupted sweep is never a pass, whatever it found
    of = f" of {verdict.planned} planned" if run.interrupted else ""
    print(f"parity-gate ops: {verdict.result.upper()} — {len(table)} findings in "
          f"{len(run.cases)}{of} cases; reports in {out} (findings.md, results.json, "
          "junit.xml, repro/)", file=console, flush=True)
