"""How many GitHub API calls the upstream search makes, without and with the cache.

Measured against the tests' local GitHub server (tests/github_server.py, real
HTTP on 127.0.0.1), side by side in one run: a cold run, the same run again
(per-run cache), a second run with the cross-run cache fresh, and one with it
expired (revalidated by ETag: 304s, which GitHub does not count against the
rate limit when authenticated).

    .venv/bin/python benchmarks/github_api_calls.py                 # the bundled findings
    .venv/bin/python benchmarks/github_api_calls.py RESULTS.json    # a real `ops` run

Without RESULTS.json the run is built from parity_gate/ops/known-findings.yml:
one failing case per entry; the ATen overload of a variant is taken as
`aten.<op>.default` (`<op>`: the variant id's first part), since the real one is
only known after a sweep ran it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from github_server import FakeGitHub

from parity_gate.github import upstream, upstream_pass
from parity_gate.github.client import ClientSettings, GitHubClient
from parity_gate.model.findings import OpCase
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult

KNOWN = Path(__file__).resolve().parents[1] / "parity_gate" / "ops" / "known-findings.yml"


def bundled() -> RunResult:
    entries = yaml.safe_load(KNOWN.read_text(encoding="utf-8"))["known_failures"]
    cases = []
    for e in entries:
        parts = e["id"].split("/")
        variant = parts[1]
        dtype = parts[2] if len(parts) > 2 and parts[2] != "*" else "float32"
        cls = parts[3] if len(parts) > 3 and parts[3] != "*" else "normal"
        cases.append(CaseResult(
            CaseKey(f"op/{variant}", dtype, cls, None, "cpu"), Outcome(e["outcome"]),
            reason=e["reason"], op=OpCase(variant=variant, family="", call="",
                                          op=f"aten.{variant.split('.')[0]}.default")))
    return RunResult(cases=cases, manifest={"command": "ops"})


def measure(run: RunResult) -> None:
    ops = upstream.op_findings(run)
    print(f"{len(run.failures)} failing cases, {len(ops)} ops to search "
          f"({len(upstream.queries(ops[0][0])) if ops else 0} queries each)")
    opts = upstream.UpstreamOptions(mode="search")
    with FakeGitHub() as gh, tempfile.TemporaryDirectory() as cache:
        def client(**kw: float) -> GitHubClient:
            return GitHubClient(gh.url, "token", ClientSettings(
                search_per_minute=1e6, cache_dir=Path(cache), **kw))  # type: ignore[arg-type]

        rows = []
        c = client()
        upstream_pass.attach(run, c, opts)
        rows.append(("cold (no cache)", c.stats.sent, 0, 0))
        upstream_pass.attach(run, c, opts)
        rows.append(("same run again (per-run cache)", c.stats.sent - rows[0][1],
                     c.stats.run_cache_hits, 0))
        warm = client()
        upstream_pass.attach(run, warm, opts)
        rows.append(("next run, cache fresh (< 6 h)", warm.stats.sent,
                     warm.stats.disk_cache_hits, 0))
        stale = client(cache_ttl_s=0)
        upstream_pass.attach(run, stale, opts)
        rows.append(("next run, cache expired (ETag)", stale.stats.sent, 0,
                     stale.stats.not_modified))
        assert gh.errors == [], gh.errors
    cold = rows[0][1]
    print(f"{'run':34} {'HTTP requests':>13} {'cache hits':>10} {'304s':>6} {'vs cold':>8}")
    for name, sent, hits, n304 in rows:
        ratio = f"{sent / cold:.2f}" if cold else "n/a"
        print(f"{name:34} {sent:>13} {hits:>10} {n304:>6} {ratio:>8}")
    print(f"at GitHub's 30 searches/min (authenticated) a cold run takes "
          f"{cold / 30:.1f} min; 10/min unauthenticated: {cold / 10:.1f} min")


if __name__ == "__main__":
    measure(RunResult.load(Path(sys.argv[1])) if len(sys.argv) > 1 else bundled())
