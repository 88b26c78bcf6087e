"""Upstream status for a model run's own failures, end to end, on models that reproduce
real upstream defects (benchmarks/upstream_models: 13 blocks a user would write, each
hitting one defect the op sweep found on torch 2.13 / onnxscript 0.7.2 / onnxruntime
1.32, and 3 controls).

Runs the gate for real (export, ONNX Runtime, localisation), starts the local GitHub
server (tests/github_server.py) seeded with the realistic upstream texts of
tests/data/upstream/upstream-texts.yml (real duplicates for some of the defects, near
misses that must claim nothing, none at all for others), runs `parity-gate upstream
--results` in search-only and in draft mode on copies of the run, renders the PR
comment and prints, per case: outcome, localised culprit, upstream status and whether
the comment shows it beside the case; then the totals, with each draft's attached node
repro run again (it must exit 1).

    PYTHONPATH=$PWD python benchmarks/upstream_model_run.py [--out DIR]

Slow (about a minute of export and localisation, then the searches): not a test.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cmarkgfm
import yaml
from cmarkgfm.cmark import Options

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from github_server import FakeGitHub, Item  # noqa: E402

from parity_gate.gate.merge import read_results  # noqa: E402
from parity_gate.github import comment  # noqa: E402
from parity_gate.model.results import RunResult  # noqa: E402
from parity_gate.ops.localised import localised  # noqa: E402

MANIFEST = ROOT / "benchmarks" / "upstream_models" / "parity.yml"
TEXTS = ROOT / "tests" / "data" / "upstream" / "upstream-texts.yml"


def seed(gh: FakeGitHub) -> int:
    """Every upstream text, as the real threads are written (no answer key sent)."""
    items = yaml.safe_load(TEXTS.read_text(encoding="utf-8"))["items"]
    for t in items:
        gh.items.append(Item(**{k: v for k, v in t.items()
                                if k not in ("claims", "listed_for")}))
    return len(items)


def gate(out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "parity_gate", "run", str(MANIFEST), "--out",
                           str(out), "--quiet"], capture_output=True, text=True, env=env,
                          timeout=1800, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"gate exited {done.returncode}: {done.stderr[-2000:]}")


def upstream(results: Path, gh: FakeGitHub, *extra: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_TOKEN", "PARITY_GATE_UPSTREAM_TOKEN")}
    env.update(PYTHONPATH=str(ROOT), PARITY_GATE_SEARCH_PER_MINUTE="60000")
    done = subprocess.run([sys.executable, "-m", "parity_gate", "upstream", "--results",
                           str(results), "--api-url", gh.url, *extra], capture_output=True,
                          text=True, env=env, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"upstream exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


def shown_items(markdown: str) -> dict[str, str]:
    """Each list item of the comment as GitHub renders it, as plain text, by module."""
    rendered = cmarkgfm.github_flavored_markdown_to_html(
        markdown, options=Options.CMARK_OPT_UNSAFE)
    out: dict[str, str] = {}
    for li in rendered.split("<li>")[1:]:
        text = li.split("</li>")[0]
        found = re.search(r"<strong>([^<]+)</strong>", text)
        if found:
            plain = html.unescape(re.sub(r"<[^>]+>", "", text))
            out[found.group(1)] = out.get(found.group(1), "") + " " + plain
    return out


def rows(run: RunResult, posted: str) -> list[dict[str, str]]:
    items = shown_items(posted)
    status = {c: r.status() for r in run.upstream for c in r.cases}
    out = []
    for case in sorted(run.cases, key=lambda c: c.key.sort_key):
        culprit = localised(case)
        loc = case.localisation
        said = status.get(case.id, "")
        shown = bool(said) and f"upstream: {said[:120]}" in " ".join(
            items.get(case.key.module, "").split())
        known = loc.known_op.finding if loc is not None and loc.known_op else ""
        out.append({
            "model": case.key.module, "outcome": case.outcome.value,
            "culprit": (f"{culprit.aten} ({culprit.owner.value if culprit.owner else '?'})"
                        if culprit else ("-" if loc is None or loc.culprit is None
                                         else f"{loc.culprit.aten} (not a defect)")),
            "status": said or ("-" if not case.failed else "NONE"),
            "shown": ("yes" if shown else "NO") if said else "-", "known": known or "-"})
    return out


def table(records: list[dict[str, str]], cols: list[str]) -> str:
    widths = {c: max(len(c), *(len(r[c]) for r in records)) for c in cols}
    line = " | ".join(c.ljust(widths[c]) for c in cols)
    sep = "-|-".join("-" * widths[c] for c in cols)
    body = "\n".join(" | ".join(r[c].ljust(widths[c]) for c in cols) for r in records)
    return f"{line}\n{sep}\n{body}"


def verified(run: RunResult) -> tuple[int, int, int]:
    """(drafts written, their repros that exit 1 when run again, those that stand alone).
    A draft's script is run as a maintainer would, from the draft's text alone, in an
    empty folder; one that needs files reads them from the draft's `.repro/` folder."""
    drafts = [Path(r.draft) for r in run.upstream if r.draft]
    ok = alone = 0
    for d in drafts:
        folder = d.with_suffix(".repro")
        block = re.search(r"```python\n(.*?)\n```", d.read_text(encoding="utf-8"), re.S)
        with tempfile.TemporaryDirectory() as empty:
            where = folder if (folder / "repro.py").is_file() else Path(empty)
            if where == Path(empty) and block is not None:
                (where / "repro.py").write_text(block.group(1) + "\n", encoding="utf-8")
                alone += 1
            done = subprocess.run([sys.executable, "repro.py"], cwd=where, capture_output=True,
                                  text=True, timeout=300, check=False)
            ok += done.returncode == 1
        print(f"  {done.returncode}  {d.read_text(encoding='utf-8').splitlines()[1]}")
    return len(drafts), ok, alone


def report(run: RunResult, name: str, said: str) -> None:
    posted = comment.body(run, "upstream-models", None, {})
    records = rows(run, posted)
    print(f"\n## {name}: {said}\n")
    print(table(records, ["model", "outcome", "culprit", "status", "shown"]))
    failing = [c for c in run.cases if c.failed]
    loc = [c for c in failing if localised(c) is not None]
    with_status = [r for r in records if r["status"] not in ("-", "NONE")]
    shown = [r for r in records if r["shown"] == "yes"]
    written, ok, alone = verified(run)
    print(f"\nfailures {len(failing)}, localised {len(loc)}, with an upstream status "
          f"{len(with_status)}, statuses shown in the PR comment {len(shown)}, "
          f"drafts written {written}, their repros verified (exit 1) {ok}, standing alone "
          f"(no attached file) {alone}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="keep everything here (default: a temp dir)")
    args = parser.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="upstream-models-"))
    run_dir = base / "run"
    if not (run_dir / "results.json").is_file():
        gate(run_dir)
    run = read_results(run_dir / "results.json")[1]
    print("known findings cited by localisation:")
    print(table([{"model": c.key.module, "known finding": (
        c.localisation.known_op.finding if c.localisation and c.localisation.known_op
        else "-")} for c in run.cases if c.failed], ["model", "known finding"]))
    walls: dict[str, float] = {}
    for mode, extra in (("search only", ("--search-only",)), ("search and draft", ())):
        copy = base / mode.replace(" ", "-")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(run_dir, copy)
        with FakeGitHub() as gh:
            n = seed(gh)
            started = time.monotonic()
            said = upstream(copy / "results.json", gh, *extra)
            walls[mode] = time.monotonic() - started
            if gh.errors:
                raise SystemExit(f"GitHub server errors: {gh.errors}")
        report(read_results(copy / "results.json")[1], f"{mode} ({n} upstream texts)", said)
    searches = int(m.group(1)) if (m := re.search(r"(\d+) searches", said)) else 0
    drafting = walls["search and draft"] - walls["search only"]
    print(f"\nwall: search only {walls['search only']:.1f} s (server unpaced), search and "
          f"draft {walls['search and draft']:.1f} s: drafting {drafting:.1f} s; the "
          f"{searches} searches paced as GitHub allows: {searches * 6:.0f} s without a token "
          f"(10/min), {searches * 2:.0f} s with one (30/min); drafting / paced search time "
          f"{drafting / max(searches * 6, 1):.2f} (no token), "
          f"{drafting / max(searches * 2, 1):.2f} (token)")
    print(f"\noutputs: {base}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
