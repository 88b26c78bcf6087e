"""Command line: `parity-gate run|check|schema`. Exit codes: 0 pass, 1 fail, 2 usage, 3 bug."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

from parity_gate import __version__
from parity_gate.errors import EXIT_INTERNAL, EXIT_USAGE, UserError

DEFAULT_MANIFEST = "fixtures/parity.yml"
ISSUES_URL = "https://github.com/parity-gate/parity-gate/issues"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other usage error
        raise UserError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parity-gate", description=__doc__)
    parser.add_argument("--version", action="version", version=f"parity-gate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="export, run on ONNX Runtime, compare with eager, report")
    run.add_argument("manifest", nargs="?", default=DEFAULT_MANIFEST,
                     help=f"path to parity.yml (default: {DEFAULT_MANIFEST})")
    run.add_argument("--out", default="parity-reports", type=Path,
                     help="folder for reports not given a path below (default: parity-reports)")
    run.add_argument("--json", type=Path, help="JSON report path (default: OUT/results.json)")
    run.add_argument("--junit", type=Path, help="JUnit XML path (default: OUT/junit.xml)")
    run.add_argument("--summary", type=Path, help="markdown summary (default: OUT/summary.md)")
    run.add_argument("--select", action="append", default=[], metavar="GLOB",
                     help="run only cases whose id matches (repeatable), e.g. 'mlp/float16/*'")
    run.add_argument("--providers", help="comma-separated providers to run, overriding the "
                     "manifest: cpu,cuda,tensorrt")
    run.add_argument("--jobs", type=int, default=1,
                     help="worker processes run in parallel (default 1)")
    run.add_argument("--fail-on", choices=("any-failure", "never"), default="any-failure",
                     help="what makes the exit code 1 (default: any-failure)")
    run.add_argument("--quiet", action="store_true", help="no per-case progress lines")

    check = sub.add_parser("check", help="validate a manifest without running anything")
    check.add_argument("manifest", nargs="?", default=DEFAULT_MANIFEST)

    sub.add_parser("schema", help="print the manifest's JSON Schema")
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    from parity_gate.manifest_loader import load_manifest
    from parity_gate.report.write import ReportPaths
    from parity_gate.runner import RunOptions, run_manifest

    if args.jobs < 1:
        raise UserError(f"--jobs: got {args.jobs} (expected an integer >= 1)")
    path = Path(args.manifest)
    manifest = load_manifest(path)
    options = RunOptions(
        select=args.select,
        jobs=args.jobs,
        providers=[p.strip() for p in args.providers.split(",") if p.strip()]
        if args.providers else None,
        fail_on=args.fail_on,
        reports=ReportPaths(
            json=args.json or args.out / "results.json",
            junit=args.junit or args.out / "junit.xml",
            summary=args.summary or args.out / "summary.md",
        ),
        quiet=args.quiet,
    )
    run, decision, stopped = run_manifest(manifest, path, options)
    reports = options.reports
    print(f"parity-gate: {'PASS' if run.passed else 'FAIL'} — {len(run.cases)} cases, "
          f"{len(run.failures)} failing; reports: {reports.json}, {reports.junit}, "
          f"{reports.summary}", file=sys.stderr)
    if stopped is not None:
        return 128 + stopped
    return decision.exit_code


def _cmd_check(args: argparse.Namespace) -> int:
    from parity_gate.manifest_loader import load_manifest

    manifest = load_manifest(Path(args.manifest))
    print(f"{args.manifest}: OK ({len(manifest.modules)} modules, "
          f"{len(manifest.fixtures)} fixture sets)")
    return 0


def _cmd_schema(_args: argparse.Namespace) -> int:
    from parity_gate.schema import manifest_schema

    print(json.dumps(manifest_schema(), indent=2))
    return 0


COMMANDS = {"run": _cmd_run, "check": _cmd_check, "schema": _cmd_schema}


def main(argv: list[str] | None = None) -> int:
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
