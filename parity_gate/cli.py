"""Command line: `parity-gate run|check|schema|baseline|merge|report|cache|ops|upstream|bisect|...`.

Exit codes: 0 pass, 1 fail, 2 usage, 3 bug."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from parity_gate import __version__
from parity_gate.engine.environment import usable_cores
from parity_gate.errors import (
    EXIT_FAIL,
    EXIT_INTERNAL,
    EXIT_PASS,
    EXIT_USAGE,
    UserError,
    ended_how,
)
from parity_gate.model.files import kind_of, own_folder_problem
from parity_gate.model.policy import FAIL_ON
from parity_gate.model.units import DEFAULT_PRUNE_AGE, parse_age, parse_size

if TYPE_CHECKING:  # imported lazily: `check` and `schema` stay fast
    from parity_gate.gate.baseline import Baseline
    from parity_gate.gate.decision import GatePolicy
    from parity_gate.manifest.models import Manifest
    from parity_gate.plan.sharding import Shard

DEFAULT_MANIFEST = "parity.yml"  # as the Action's `manifest` input: in the working folder
# The bundled example ships inside the package (parity_gate/example): `--example` runs the
# installed copy from anywhere; in a parity-gate checkout without a parity.yml, the
# checkout's copy is the default.
EXAMPLE = Path(__file__).resolve().parent / "example" / "parity.yml"
EXAMPLE_MANIFEST = "parity_gate/example/parity.yml"  # the same file, seen from a checkout
ISSUES_URL = "https://github.com/parity-gate/parity-gate/issues"
CACHE_ENV = "PARITY_GATE_CACHE_DIR"
DEFAULT_CACHE_DIR = ".parity-cache"  # engine.cache.DEFAULT_DIR (not imported here: numpy)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other usage error
        raise UserError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parity-gate", description=__doc__)
    parser.add_argument("--version", action="version", version=f"parity-gate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="export, run on ONNX Runtime, compare with eager, report")
    run.add_argument("manifest", nargs="?", default=None,
                     help=f"path to parity.yml (default: {DEFAULT_MANIFEST} here, as the "
                     f"Action; in a parity-gate checkout without one, {EXAMPLE_MANIFEST})")
    _add_example_arg(run)
    run.add_argument("--out", default="parity-reports", type=Path,
                     help="folder for reports not given a path below (default: parity-reports)")
    run.add_argument("--json", type=Path, help="JSON report path (default: OUT/results.json)")
    run.add_argument("--junit", type=Path, help="JUnit XML path (default: OUT/junit.xml)")
    run.add_argument("--summary", type=Path, help="markdown summary (default: OUT/summary.md)")
    run.add_argument("--html", type=Path, help="HTML report with charts (default: "
                     "OUT/report.html)")
    run.add_argument("--select", action="append", default=[], metavar="GLOB",
                     help="run only cases whose id matches (repeatable), e.g. 'mlp/float16/*'; "
                     "a `shapes: auto` probe's id as `check --explain` prints it selects "
                     "that probe")
    run.add_argument("--providers", help="comma-separated providers to run, overriding the "
                     "manifest: cpu,cuda,tensorrt")
    run.add_argument("--jobs", type=int, default=None,
                     help="worker processes run in parallel (default: the cores this process "
                     f"may use, {usable_cores()} here)")
    cache = run.add_mutually_exclusive_group()
    cache.add_argument("--cache-dir", type=Path, metavar="DIR",
                       help="the export cache: the ONNX translation of each captured "
                       "torch.export program, keyed by a digest of that program (graph, "
                       "weights, constants, shape constraints), the export options and the "
                       "exporter stack's versions. Every module is still built, run eagerly "
                       "and captured in every run (default: "
                       f"${CACHE_ENV} if set, else "
                       f"{DEFAULT_CACHE_DIR} here)")
    cache.add_argument("--no-cache", action="store_true",
                       help="translate every export afresh; read and write no cache")
    # Accepted for old workflows: every module runs in every run now, so it changes nothing.
    run.add_argument("--rerun", action="store_true", help=argparse.SUPPRESS)
    _add_gate_args(run)
    run.add_argument("--shard", metavar="K/N",
                     help="run only part K of N (cost-balanced, whole modules), e.g. 2/4")
    run.add_argument("--timings", type=Path, metavar="RESULTS.json",
                     help="balance --shard by the module times recorded in an earlier run")
    run.add_argument("--quiet", action="store_true", help="no per-case progress lines")
    run.add_argument("--no-localise", action="store_true",
                     help="skip the follow-up checks on failing cases (optimizer level, "
                     "provider, capture, float64, first divergent layer, op, repro)")
    run.add_argument("--localise-cases", type=int, default=None, metavar="N",
                     help="failing cases that get the expensive checks: layer search, the op "
                     "to blame, repro folders (default: the manifest's localise.max_cases, 3)")
    run.add_argument("--artifacts", type=Path, metavar="DIR",
                     help="repro folders of failing cases (default: OUT/artifacts)")

    init = sub.add_parser("init", help="write a first parity.yml and pull-request workflow "
                          "from your modules' factories")
    init.add_argument("--factory", action="append", default=[], metavar="PKG.MODULE:FN",
                      help="a callable returning one nn.Module (repeatable); imported with "
                      "--dir first on the import path")
    init.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x32x32",
                      help="an input's example shape, batch first, optionally :dtype "
                      "(repeatable; default: the module's example_input_array or "
                      "dummy_inputs, else its first layer)")
    init.add_argument("--dir", type=Path, default=Path("."),
                      help="the repository's root (default: the working folder)")
    init.add_argument("--manifest", default=DEFAULT_MANIFEST,
                      help="the manifest to write, relative to --dir (default: parity.yml)")
    init.add_argument("--no-workflow", action="store_true",
                      help="do not write .github/workflows/parity.yml")
    init.add_argument("--force", action="store_true", help="overwrite existing files")

    check = sub.add_parser("check", help="validate a manifest and import every factory in "
                           "the sandbox, calling none (only a `cache:` check and --explain "
                           "build models)")
    check.add_argument("manifest", nargs="?", default=None)
    _add_example_arg(check)
    check.add_argument("--baseline", type=Path, metavar="PATH",
                       help="the known-failures file to check too (default: "
                       "parity-baseline.yml beside the manifest, when there)")
    check.add_argument("--explain", action="store_true",
                       help="also list the probe sizes `shapes: auto` derives (exports each "
                       "such module once per dtype, on the CPU)")

    schema = sub.add_parser("schema", help="print a JSON Schema (default: the manifest's)")
    schema.add_argument("which", nargs="?", choices=("manifest", "results"), default="manifest",
                        help="manifest (parity.yml) or results (results.json)")

    baseline = sub.add_parser("baseline", help="manage the known-failures baseline file")
    bsub = baseline.add_subparsers(dest="baseline_command", required=True,
                                   parser_class=_Parser)
    update = bsub.add_parser("update", help="write or refresh the baseline from a run's "
                             "JSON report (keeps reasons and links)")
    update.add_argument("manifest", nargs="?", help="parity.yml the baseline sits beside "
                        "(default: the manifest recorded in the results)")
    update.add_argument("--from", dest="source", type=Path, metavar="RESULTS.json",
                        default=Path("parity-reports/results.json"),
                        help="JSON report to record (default: parity-reports/results.json)")
    update.add_argument("--baseline", type=Path, metavar="PATH",
                        help="baseline file (default: parity-baseline.yml beside the manifest)")
    update.add_argument("--reason", default=None, metavar="TEXT",
                        help="why the new failing cases fail, written in the entries it adds "
                        "(no placeholder such as 'TODO'); without it, asked for on a "
                        "terminal, else refused when there are new failures")

    report = sub.add_parser("report", help="write the reports of a run from its journal "
                            "(a run that was killed before it could write them)")
    report.add_argument("--from-journal", required=True, type=Path, metavar="JOURNAL",
                        help="the run's journal, e.g. parity-reports/journal.jsonl")
    report.add_argument("--out", type=Path, default=None,
                        help="folder for the reports (default: the journal's folder)")
    for flag in ("json", "junit", "summary", "html"):
        report.add_argument(f"--{flag}", type=Path, help=f"{flag} report path (default: in OUT)")
    report.add_argument("--baseline", type=Path, metavar="PATH",
                        help="decide with this baseline (default: the one the run used)")
    report.add_argument("--fail-on", choices=FAIL_ON, default=None,
                        help="what blocks (default: as the run was told)")
    report.add_argument("--strict", action="store_true", default=None)
    report.add_argument("--worsen-factor", type=float, default=None, metavar="X")
    report.add_argument("--allow-all-skipped", action="store_true", default=None)

    merge = sub.add_parser("merge", help="merge shard JSON reports into one report and verdict")
    merge.add_argument("files", nargs="+", type=Path, help="the shards' results.json files")
    merge.add_argument("--out", default="parity-reports", type=Path,
                       help="folder for reports not given a path below (default: "
                       "parity-reports)")
    merge.add_argument("--json", type=Path, help="JSON report path (default: OUT/results.json)")
    merge.add_argument("--junit", type=Path, help="JUnit XML path (default: OUT/junit.xml)")
    merge.add_argument("--summary", type=Path, help="markdown summary (default: "
                       "OUT/summary.md)")
    _add_gate_args(merge, merging=True)
    from parity_gate.bisect.command import add_parser as add_bisect_parser  # which version
    from parity_gate.github.cli import add_parsers as add_github_parsers  # comment, upstream
    from parity_gate.ops.command import add_parser as add_ops_parser  # `ops`: op-level sweep

    _add_cache_parser(sub)
    add_github_parsers(sub, COMMANDS)

    add_ops_parser(sub, COMMANDS)
    add_bisect_parser(sub, COMMANDS)
    return parser


def _add_cache_parser(sub: Any) -> None:
    cache = sub.add_parser("cache", help="inspect or prune the export cache (--cache-dir)")
    csub = cache.add_subparsers(dest="cache_command", required=True, parser_class=_Parser)
    where = f"the cache's folder (default: ${CACHE_ENV} if set, else {DEFAULT_CACHE_DIR} here)"
    prune = csub.add_parser("prune", help="remove entries by age and size (least recently "
                            f"used first); with neither flag, --older-than {DEFAULT_PRUNE_AGE}")
    prune.add_argument("--cache-dir", type=Path, metavar="DIR", help=where)
    prune.add_argument("--older-than", metavar="AGE",
                       help="remove entries unused for longer than AGE: 7d, 12h, 30m, 3600s, 2w")
    prune.add_argument("--max-size", metavar="SIZE",
                       help="then remove the least recently used until the cache holds at "
                       "most SIZE: 2GB, 500MB (powers of 1000), 10G, 500MiB (powers of 1024)")
    info = csub.add_parser("info", help="entries and size, by kind")
    info.add_argument("--cache-dir", type=Path, metavar="DIR", help=where)


def _add_gate_args(p: argparse.ArgumentParser, merging: bool = False) -> None:
    """Flags shared by `run` and `merge`: what blocks, against which baseline."""
    p.add_argument("--baseline", type=Path, metavar="PATH",
                   help="re-decide with this baseline (default: the one the shards were gated "
                   "against; every case is re-decided, shards' rulings are never reused)"
                   if merging else "known failures (default: parity-baseline.yml beside the "
                   "manifest, used if present)")
    p.add_argument("--fail-on", choices=FAIL_ON, default=None,
                   help="what makes the exit code 1: regressions (default with a baseline), "
                   "any-failure (default without one) or never"
                   + (" (default: as the shards ran)" if merging else ""))
    p.add_argument("--strict", action="store_true", default=None,
                   help="a known failure that now passes (fixed) blocks too")
    p.add_argument("--worsen-factor", type=float, default=None, metavar="X",
                   help="a known failure whose error grows beyond X times its record is a "
                   "regression (default: the baseline's worsen_factor, else 2.0)")
    p.add_argument("--compare-to", type=Path, metavar="OLD.json",
                   help="show per-case changes against an earlier run's JSON report")
    p.add_argument("--allow-all-skipped", action="store_true", default=None,
                   help="a run in which every case was skipped passes (default: it blocks, "
                   "since nothing was checked)")


def _gate_policy(args: argparse.Namespace, baseline: Baseline | None) -> GatePolicy:
    from parity_gate.gate.decision import GatePolicy
    from parity_gate.gate.merge import read_results

    if args.worsen_factor is not None and not args.worsen_factor >= 1:
        raise UserError(f"--worsen-factor: got {args.worsen_factor} (expected a number >= 1)")
    old = read_results(args.compare_to) if args.compare_to else None
    return GatePolicy(fail_on=args.fail_on, baseline=baseline, strict=bool(args.strict),
                      worsen_factor=args.worsen_factor,
                      compare_to=(old[0], old[1]) if old else None,
                      allow_all_skipped=bool(args.allow_all_skipped))


def _cmd_run(args: argparse.Namespace) -> int:
    from parity_gate.gate.decision import notices
    from parity_gate.manifest.load import load_manifest
    from parity_gate.report.write import ReportPaths
    from parity_gate.runner import RunOptions, run_manifest

    jobs = usable_cores() if args.jobs is None else args.jobs
    if jobs < 1:
        raise UserError(f"--jobs: got {jobs} (expected an integer >= 1)")
    cache_dir = None if args.no_cache else checked_cache_dir(args.cache_dir)
    path = default_manifest(args.manifest, args.example)
    manifest = load_manifest(path)
    _fixture_files(manifest, path, sizes_only=True)
    policy, shard, timings = _run_gate_inputs(args, path)
    options = RunOptions(
        select=args.select,
        jobs=jobs,
        providers=[p.strip() for p in args.providers.split(",") if p.strip()]
        if args.providers else None,
        policy=policy,
        shard=shard,
        timings=timings,
        reports=ReportPaths.in_folder(args.out, args.json, args.junit, args.summary, args.html),
        quiet=args.quiet,
        localise=None if args.no_localise else _localise_policy(args, manifest),
        cache_dir=cache_dir,
    )
    if args.rerun:
        print("parity-gate: --rerun changes nothing: every module is run in every run "
              "(docs/explanation/export-cache.md)", file=sys.stderr)
    run, decision, stopped = run_manifest(manifest, path, options)
    for line in notices(decision):
        print(line, file=sys.stderr)
    print(final_line(run, options.reports.written()), file=sys.stderr)
    if stopped is not None:
        return 128 + stopped
    declared = [f.message for f in run.findings if f.kind == "declaration"]
    if declared:  # the manifest declares what the model (only a worker sees it) refutes
        for line in declared:
            print(f"parity-gate: {line}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_FAIL if run.verdict.blocks else decision.exit_code


def cache_dir_given(given: Path | None) -> tuple[Path, str]:
    """--cache-dir, else $PARITY_GATE_CACHE_DIR, else .parity-cache in the working folder;
    with the name of whichever chose it, for errors."""
    if given is not None:
        return given, "--cache-dir"
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]), CACHE_ENV
    return Path(DEFAULT_CACHE_DIR), "--cache-dir (default)"


def checked_cache_dir(given: Path | None) -> Path:
    """The export cache's folder, made and proven writable before any work (absolute: the
    workers need not share the working folder)."""
    from parity_gate.report.write import folder_problem

    folder, label = cache_dir_given(given)
    problem = own_folder_problem(folder, Path.cwd()) or folder_problem(
        folder, purpose="for the export cache")
    if problem:
        raise UserError(f"{label}: {problem}")
    return folder.absolute()


def final_line(run: Any, reports: list[Path], what: str = "") -> str:
    """`parity-gate: PASS — 12 cases, 0 failing; reports: ...`: the verdict, as results.json."""
    v = run.verdict
    return (f"parity-gate: {v.result.upper()} — {what}{len(run.cases)} cases, "
            f"{len(run.failures)} failing; "
            f"{v.why}; reports: {', '.join(str(p) for p in reports)}")


def _cmd_report(args: argparse.Namespace) -> int:
    """`report --from-journal`: the reports of a run the gate could not finish itself."""
    from parity_gate.gate import baseline as baseline_file
    from parity_gate.gate.decision import GatePolicy, apply, notices
    from parity_gate.report import journal
    from parity_gate.report.write import ReportPaths, check_outputs, write_all

    replay = journal.read(args.from_journal)
    recorded = replay.policy
    path = args.baseline or (Path(recorded["baseline"]) if recorded.get("baseline") else None)
    if path is not None and not path.is_file():
        raise UserError(f"{path}: the baseline the run used is gone (expected it there, or "
                        "--baseline PATH)")
    policy = GatePolicy(
        fail_on=args.fail_on or recorded.get("fail_on"),
        baseline=baseline_file.load(path) if path is not None else None,
        strict=bool(args.strict if args.strict is not None else recorded.get("strict")),
        worsen_factor=args.worsen_factor or recorded.get("worsen_factor"),
        allow_all_skipped=bool(args.allow_all_skipped if args.allow_all_skipped is not None
                               else recorded.get("allow_all_skipped")))
    run = replay.run
    run.gate = apply(run, policy, set(replay.universe) or None)
    out = args.out or args.from_journal.parent
    reports = ReportPaths.in_folder(out, args.json, args.junit, args.summary, args.html)
    check_outputs(reports, journal=False)
    write_all(run, reports)
    for line in notices(run.gate):
        print(line, file=sys.stderr)
    print(final_line(run, reports.written(), f"from {args.from_journal}: "), file=sys.stderr)
    return EXIT_FAIL if run.verdict.blocks else EXIT_PASS


def _localise_policy(args: argparse.Namespace, manifest: Any) -> Any:
    """The manifest's `localise:` settings, with --localise-cases over its max_cases."""
    from parity_gate.engine.environment import package_versions
    from parity_gate.localise.run import LocalisePolicy

    if args.localise_cases is not None and args.localise_cases < 0:
        raise UserError(f"--localise-cases: got {args.localise_cases} (expected a count >= 0)")
    settings = manifest.localise
    found = package_versions()
    line = ", ".join(f"{name} {found[name]}" for name in ("onnxscript", "torch", "onnxruntime")
                     if name in found)
    cap = settings.max_cases if args.localise_cases is None else args.localise_cases
    artifacts = args.artifacts or args.out / "artifacts"
    if os.path.lexists(artifacts) and (os.path.islink(artifacts) or not artifacts.is_dir()):
        raise UserError(f"{'--artifacts' if args.artifacts else '--out'}: {artifacts} is "
                        f"{kind_of(artifacts)} (expected a folder for the repro folders, or a "
                        "path that does not exist yet; parity-gate never writes through a link)")
    linked = own_folder_problem(artifacts, Path.cwd())
    if linked:
        raise UserError(f"{'--artifacts' if args.artifacts else '--out'}: {linked}")
    return LocalisePolicy(cap=cap, step_timeout_s=settings.step_timeout_s,
                          artifacts=artifacts,
                          version=__version__, version_line=line,
                          artefacts_pass=settings.artefacts == "pass")


def _add_example_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--example", action="store_true",
                        help="the bundled example manifest, from the installed package "
                        f"({EXAMPLE}), instead of a parity.yml")


def default_manifest(given: str | None, example: bool = False) -> Path:
    """The manifest to run: the one given, or the installed package's example (`--example`),
    else `parity.yml` in the working folder (the Action's default too), else the bundled
    example when run in a parity-gate checkout. Never the example silently elsewhere: a
    workflow that lost its parity.yml must not pass on the example."""
    if given and example:
        raise UserError(f"--example: also given a manifest, {given} (expected one of them)")
    if example:
        return EXAMPLE
    if given:
        return Path(given)
    if Path(DEFAULT_MANIFEST).is_file():
        return Path(DEFAULT_MANIFEST)
    if Path(EXAMPLE_MANIFEST).is_file():
        print(f"parity-gate: no {DEFAULT_MANIFEST} here; using the bundled example "
              f"{EXAMPLE_MANIFEST}", file=sys.stderr)
        return Path(EXAMPLE_MANIFEST)
    raise UserError(f"{DEFAULT_MANIFEST}: no such file in {Path.cwd()} (expected a manifest: "
                    "parity-gate run path/to/parity.yml, or --example for the bundled one)")


def _run_gate_inputs(args: argparse.Namespace, manifest_path: Path
                     ) -> tuple[GatePolicy, Shard | None, dict[str, float] | None]:
    """Read the baseline, --compare-to and --timings before running: bad input fails fast."""
    from parity_gate.gate import baseline as baseline_file
    from parity_gate.gate.merge import read_results
    from parity_gate.plan.sharding import Shard, recorded_seconds

    policy = _gate_policy(args, baseline_file.find(manifest_path, args.baseline))
    shard = Shard.parse(args.shard) if args.shard else None
    timings = recorded_seconds(read_results(args.timings)[1]) if args.timings else None
    return policy, shard, timings


def _cmd_baseline(args: argparse.Namespace) -> int:
    from parity_gate.gate import baseline as baseline_file
    from parity_gate.gate.merge import read_results
    from parity_gate.report.write import atomic_write

    source, run = read_results(args.source)
    if run.shard:
        raise UserError(f"{source}: results of shard {run.shard} only (expected a whole run: "
                        "merge the shards first with `parity-gate merge`, or entries of the "
                        "other shards would be dropped as stale)")
    if run.interrupted:
        raise UserError(f"{source}: the run was interrupted (expected a complete run, or "
                        "entries of the cases it never reached would be dropped as stale)")
    manifest = Path(args.manifest or run.manifest.get("path") or DEFAULT_MANIFEST)
    path = args.baseline or baseline_file.default_path(manifest)
    old = (baseline_file.load(path) if path.is_file()
           else baseline_file.Baseline(str(path)))
    added = baseline_file.new_failures(old, run)
    reason = (_new_entries_reason(args.reason, [c.id for c in added], path)
              if added or args.reason is not None else None)  # a bad --reason: always said
    new, changes = baseline_file.update(old, run, reason)
    atomic_write(path, baseline_file.dump(new).encode("utf-8"))
    for change in changes:
        print(f"parity-gate baseline: {change}", file=sys.stderr)
    print(f"parity-gate baseline: wrote {path}: {len(new.entries)} entries "
          f"({sum(c.action == 'added' for c in changes)} added, "
          f"{sum(c.action == 'updated' for c in changes)} updated, "
          f"{sum(c.action == 'removed' for c in changes)} removed), "
          f"{len(new.performance)} recorded time ratios, from {source}",
          file=sys.stderr)
    return 0


def _new_entries_reason(given: str | None, ids: list[str], path: Path) -> str:
    """The reason for the entries `baseline update` adds: `--reason`, else asked for on a
    terminal; never a placeholder, which the gate would refuse to read back."""
    from parity_gate.gate.baseline import reason_problem

    if given is not None:
        said = reason_problem(given)
        if said:
            raise UserError(f"--reason: {said}")
        return given.strip()
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    if sys.stdin is None or not sys.stdin.isatty():
        raise UserError(f"parity-gate baseline: {len(ids)} new failing case(s) need a reason "
                        f"({shown}); nothing written to {path} (expected --reason TEXT: why "
                        "they fail, or run it on a terminal to be asked)")
    print(f"parity-gate baseline: {len(ids)} new failing case(s): {shown}", file=sys.stderr)
    for _ in range(3):
        print("why do they fail? (written as their entries' reason): ", end="",
              file=sys.stderr, flush=True)
        answer = sys.stdin.readline()
        if not answer:  # end of input
            break
        said = reason_problem(answer)
        if not said:
            return answer.strip()
        print(f"parity-gate baseline: {said}", file=sys.stderr)
    raise UserError(f"parity-gate baseline: no reason given; nothing written to {path} "
                    "(expected a reason, or --reason TEXT)")


def _cmd_merge(args: argparse.Namespace) -> int:
    from parity_gate.gate import baseline as baseline_file
    from parity_gate.gate.decision import apply, notices
    from parity_gate.gate.deltas import combine as combine_deltas
    from parity_gate.gate.merge import merge_files, recorded, recorded_baseline
    from parity_gate.report.write import ReportPaths, check_outputs, write_all

    run, loaded = merge_files(args.files)
    ran = recorded(loaded)
    # Every case is re-decided from its outcome, as `ops --from` does: the shards give
    # the settings and the baseline's path, never which case blocks.
    path = args.baseline or recorded_baseline(loaded, ran)
    baseline = baseline_file.load(path) if path is not None else None
    policy = _gate_policy(args, baseline)
    policy.fail_on = args.fail_on or ran.fail_on
    policy.strict = bool(ran.strict if args.strict is None else args.strict)
    policy.allow_all_skipped = bool(ran.allow_all_skipped if args.allow_all_skipped is None
                                    else args.allow_all_skipped)
    if args.worsen_factor is None and args.baseline is None:
        policy.worsen_factor = ran.worsen_factor
    decision = apply(run, policy)
    if args.baseline is None and ran.stale is not None:
        # Stale means "matches no planned case": a case of the manifest no shard selected
        # still protects its entry, which only the shards (who saw the manifest) know.
        decision.stale = [s for s in decision.stale if s.entry in ran.stale]
    if policy.compare_to is None:
        decision.compare_to = combine_deltas([r.gate.compare_to if r.gate else None
                                              for _, r in loaded])
    run.gate = decision
    reports = ReportPaths.in_folder(args.out, args.json, args.junit, args.summary)
    check_outputs(reports, journal=False)
    write_all(run, reports)
    for line in notices(decision):
        print(line, file=sys.stderr)
    if run.interrupted:
        print("parity-gate: a shard was interrupted; its unfinished cases are missing, so "
              "the merge fails", file=sys.stderr)
    print(final_line(run, reports.written(), f"merged {len(args.files)} files, "),
          file=sys.stderr)
    return EXIT_FAIL if run.verdict.blocks else EXIT_PASS


def _cmd_init(args: argparse.Namespace) -> int:
    from parity_gate.scaffold import init

    written = init(args.dir.resolve(), args.factory, args.shape, manifest=args.manifest,
                   workflow=not args.no_workflow, force=args.force)
    for path in written:
        print(f"wrote {path}")
    print(f"next: review the proposed inputs, then `parity-gate run {written[0]}`")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from parity_gate.engine.factory_check import factory_problems
    from parity_gate.gate import baseline as baseline_file
    from parity_gate.manifest.load import load_manifest

    path = default_manifest(args.manifest, args.example)
    manifest = load_manifest(path)
    read = _fixture_files(manifest, path, sizes_only=False)
    baseline = baseline_file.find(Path(path), args.baseline)  # as `run` reads it
    problems = factory_problems(manifest, path)  # imported in the sandbox, none built
    if problems:
        raise UserError(problems)
    if any(m.cache is not None for m in manifest.modules):  # only the model can say
        from parity_gate.engine.kvcache import declared_problems

        problems = _user_code(lambda: declared_problems(manifest, Path(path)), path)
        if problems:
            raise UserError(problems)
    files = f", {read} fixture file(s) read" if read is not None else ""
    known = (f", baseline {baseline.path}: {len(baseline.entries)} known failures"
             if baseline is not None else "")
    print(f"{path}: OK ({len(manifest.modules)} modules, "
          f"{len(manifest.fixtures)} fixture sets{files}{known})")
    if getattr(args, "explain", False):
        _explain_probes(manifest, path)
    return 0


def _explain_probes(manifest: Manifest, path: Path) -> None:
    """The `shapes: auto` probes of every module that asks for them, before any run."""
    from parity_gate.engine.probing import explain
    from parity_gate.engine.runtime import available_providers
    from parity_gate.plan.cases import plan

    jobs = plan(manifest, Path(path), available_providers()).jobs
    for job in jobs:
        try:
            lines = _user_code(functools.partial(explain, job), path, job.name)
        except UserError:
            raise
        except Exception as exc:  # the run would report it on its cases
            lines = [f"{job.name}: no probes derived: {type(exc).__name__}: "
                     f"{str(exc).splitlines()[0][:200] if str(exc) else ''}"]
        for line in lines:
            print(line)


_T = TypeVar("_T")


def _user_code(call: Callable[[], _T], path: Path | str, module: str = "") -> _T:
    """`call()`, which runs the manifest's factories in this process: one that exits
    (sys.exit), is interrupted or raises a BaseException is one located line (exit 2),
    never a silent exit 0 nor a traceback. Exceptions pass on to the caller."""
    try:
        return call()
    except Exception:
        raise
    except BaseException as exc:
        raise UserError(f"{path}: {'module ' + module + ': ' if module else ''}a factory "
                        f"{ended_how(exc)} while it was built") from None


def _fixture_files(manifest: Manifest, path: Path, *, sizes_only: bool) -> int | None:
    """Problems of the file fixture sets, from their headers, as a UserError (`sizes_only`:
    just the sizes, which `run` refuses before any worker starts); the files read, None
    when there are none."""
    if not any(f.kind == "file" for f in manifest.fixtures.values()):
        return None
    from parity_gate.engine.fixtures import file_fixture_problems  # numpy: only if needed

    read, problems = file_fixture_problems(manifest, Path(path).resolve().parent,
                                           sizes_only=sizes_only)
    if problems:
        raise UserError(problems)
    return read


def _cmd_schema(args: argparse.Namespace) -> int:
    from parity_gate.manifest.schema import manifest_schema
    from parity_gate.model.schema import results_schema

    print(json.dumps(results_schema() if args.which == "results" else manifest_schema(),
                     indent=2))
    return 0


def _cache_root(given: Path | None) -> Path | None:
    """The cache's folder; None when it does not exist yet. A file there is a usage error."""
    root, label = cache_dir_given(given)
    linked = own_folder_problem(root, Path.cwd())
    if linked:  # what prune removes is below it: never through a link
        raise UserError(f"{label}: {linked}")
    if os.path.lexists(root) and not root.is_dir():
        raise UserError(f"{label}: {root} is not a folder (expected the export cache's folder)")
    return root if root.is_dir() else None


def _cmd_cache(args: argparse.Namespace) -> int:
    """`cache prune` and `cache info`: what is there, and what to drop."""
    from parity_gate.engine.cache import ExportCache, megabytes

    if args.cache_command == "prune":
        age = args.older_than or (None if args.max_size else DEFAULT_PRUNE_AGE)
        older_than_s = parse_age(age) if age is not None else None
        max_bytes = parse_size(args.max_size) if args.max_size is not None else None
    root = _cache_root(args.cache_dir)
    if root is None:
        what = "nothing to prune" if args.cache_command == "prune" else "empty"
        print(f"parity-gate cache: {what}: {cache_dir_given(args.cache_dir)[0]} does not exist",
              file=sys.stderr)
        return EXIT_PASS
    if args.cache_command == "prune":
        said = ExportCache(root).pruned(older_than_s=older_than_s, max_bytes=max_bytes)
        print(f"parity-gate cache: {said}", file=sys.stderr)
        return EXIT_PASS
    usage = ExportCache(root).usage()
    entries, size = sum(n for n, _ in usage.values()), sum(b for _, b in usage.values())
    kinds = "; ".join(f"{kind}: {n}, {megabytes(b)}" for kind, (n, b) in usage.items())
    print(f"parity-gate cache: {root}: {entries} entries, {megabytes(size)}"
          + (f" ({kinds})" if kinds else ""), file=sys.stderr)
    return EXIT_PASS


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _cmd_run, "check": _cmd_check, "schema": _cmd_schema, "baseline": _cmd_baseline,
    "merge": _cmd_merge, "report": _cmd_report, "cache": _cmd_cache, "init": _cmd_init}


class _Console:
    """stdout or stderr whose reader went away (`parity-gate schema | head -1`): the rest of
    the output is dropped quietly, as a command-line tool does on EPIPE, and the command
    goes on (a run still writes its reports) to its own exit code; no traceback."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return int(self.stream.write(text))
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        """From now on the stream's descriptor is /dev/null: what is still buffered (and
        the interpreter's last flush) lands there instead of raising again."""
        self.gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Console(sys.stdout), _Console(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UserError as err:
        for line in err.problems:
            print(line, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("parity-gate: interrupted", file=sys.stderr)
        return 130
    except Exception:
        fd, log = tempfile.mkstemp(prefix="parity-gate-crash-", suffix=".txt")
        with os.fdopen(fd, "w") as fh:
            fh.write(traceback.format_exc())
        last = traceback.format_exc().strip().splitlines()[-1]
        print(f"parity-gate: internal error: {last}\nThis is a bug in parity-gate; please "
              f"report it at {ISSUES_URL} with the traceback in {log}", file=sys.stderr)
        return EXIT_INTERNAL
