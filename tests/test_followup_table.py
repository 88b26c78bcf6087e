"""The worker runs a table of per-case follow-up checks: a check registered as one record runs
on every case it applies to, is recorded on the result (status and time), reaches
results.json, and a check that raises fails alone without costing the case."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from parity_gate.engine import followups, module_worker
from parity_gate.engine.followups import FOLLOW_UPS, CaseState, Cost, FollowUp
from parity_gate.manifest.load import load_manifest
from parity_gate.model.findings import Rerun
from parity_gate.model.results import CaseResult
from parity_gate.plan.cases import plan

EXAMPLE = Path(__file__).resolve().parents[1] / "parity_gate" / "example" / "parity.yml"


def _run_mlp(monkeypatch: pytest.MonkeyPatch, table: list[FollowUp]) -> list[CaseResult]:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the in-process worker's imports
    monkeypatch.delitem(sys.modules, "models", raising=False)
    monkeypatch.setattr(followups, "FOLLOW_UPS", table)
    manifest = load_manifest(EXAMPLE)
    (job,) = [j for j in plan(manifest, EXAMPLE, ["CPUExecutionProvider"],
                              select=["mlp/float32/tabular/*"]).jobs]
    events: list[Any] = []
    module_worker.run_job(job, events.append)
    return [e for e in events if isinstance(e, CaseResult)]


@pytest.mark.process
def test_a_registered_check_runs_and_is_reported_without_touching_the_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def count_outputs(state: CaseState) -> None:
        seen.append(state.result.id)
        state.result.rerun = Rerun(error=f"{len(state.got[0])} outputs")

    def broken(state: CaseState) -> None:
        raise RuntimeError("this check is broken")

    dummy = FollowUp("count-outputs", "counting outputs", lambda s: s.result.outcome.value
                     == "pass", count_outputs, ("references",), "rerun", Cost.NOTE)
    failing = FollowUp("broken", "", lambda s: True, broken, (), "nothing", Cost.NOTE)
    results = _run_mlp(monkeypatch, [*FOLLOW_UPS, dummy, failing])
    assert len(results) == 3 and all(r.outcome.value == "pass" for r in results)
    assert sorted(seen) == sorted(r.id for r in results)
    for r in results:
        names = [c.check for c in r.checks]
        assert names[-2:] == ["count-outputs", "broken"], names
        ran, bad = r.checks[-2], r.checks[-1]
        assert ran.status == "ran" and ran.seconds >= 0
        assert bad.status == "failed" and "this check is broken" in bad.note
        assert r.rerun is not None and r.rerun.error == "2 outputs"
        doc = r.to_dict()  # results.json carries the record
        assert {"check": "count-outputs", "status": "ran"}.items() <= doc["checks"][-2].items()
