"""The localisation stage: after the run, follow-up jobs for its failing cases.

One job per (module, dtype) with mismatching cases goes to the same warm pool
that ran the cases. The cheap checks run on every such case; the expensive
ones (the blame rule, the op, the owner, repro folders) on the worst case of
every failing (module, dtype), then on the next worst cases while fewer than
`cap` have them (a cap of 0 turns them off). A job that crashes or hangs
costs only its own checks: the cases keep their verdicts and say that localisation did not finish.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from parity_gate.engine.pool import WorkerPool
from parity_gate.localise.jobs import LocaliseJob
from parity_gate.model.localisation import Check, Localisation, Status, StepRun
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult, RunResult
from parity_gate.plan.cases import ModuleJob

LOCALISED = (Outcome.MISMATCH,)  # numeric failures, localised to the op
# Failures at sizes the export may have fixed: localised to the size assumption they break
# (localise.sized), and an ONNX Runtime error at a named node to that node (`_localised`).
SIZED = (Outcome.BAKED_SHAPE, Outcome.SHAPE_MISMATCH, Outcome.RUNTIME_ERROR)
# Export failures: their cause is on the case; localisation makes the repro (worker).
EXPORTS = (Outcome.EXPORT_ERROR, Outcome.UNSUPPORTED_OP)


@dataclass(frozen=True)
class LocalisePolicy:
    cap: int = 3                      # cases that get the expensive checks (beyond each
                                      # failing module's worst); 0: none
    step_timeout_s: float = 120.0
    artifacts: Path | None = None     # repro folders go here (None: no repros)
    version: str = ""
    version_line: str = ""
    artefacts_pass: bool = False      # manifest `localise.artefacts: pass`


def jobs_for(run: RunResult, modules: Iterable[ModuleJob], policy: LocalisePolicy,
             handoff: str | None = None) -> list[LocaliseJob]:
    """The follow-up jobs for a finished run, worst cases first; `handoff`: the folder of
    the pool that ran the cases, where its workers left their exports."""
    by_name = {m.name: m for m in modules}
    # a module with a KV cache is rebuilt behind the gate's cache step; a generation case
    # is localised on the step that first diverged, fed eager's cache at that step
    failing = sorted((c for c in run.cases if _localised(c) and c.key.module in by_name),
                     key=lambda c: (-_worst_abs(c), c.id))
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for case in failing:
        groups.setdefault((case.key.module, case.key.dtype), []).append(case)
    expensive = _expensive(failing, groups, policy.cap)
    return [LocaliseJob(by_name[module], dtype, cases, [c.id for c in cases if c.id in expensive],
                        str(policy.artifacts) if policy.artifacts else None,
                        policy.step_timeout_s, policy.version, policy.version_line, handoff)
            for (module, dtype), cases in groups.items()
            # an export failure's cause is on the case: its job only makes the repro
            if not (all(c.outcome in EXPORTS for c in cases) and (
                policy.artifacts is None or not any(c.id in expensive for c in cases)))]


def _localised(case: CaseResult) -> bool:
    """A numeric failure, an ONNX Runtime error, or a shape failure (generation cases
    excepted: their sizes are the cache's)."""
    return case.outcome in LOCALISED or case.outcome in EXPORTS \
        or (case.outcome in SIZED and case.generation is None) \
        or (case.outcome is Outcome.RUNTIME_ERROR and case.generation is not None
            and _names_node(case))


def _names_node(case: CaseResult) -> bool:
    from parity_gate.engine.runtime import failing_node

    return failing_node(f"{case.reason}\n{case.detail}") is not None


def _expensive(failing: list[CaseResult], groups: dict[tuple[str, str], list[CaseResult]],
               cap: int) -> set[str]:
    """Every failing (module, dtype) gets an answer: its worst case first; the cap limits
    the rest, worst first."""
    if cap <= 0:
        return set()
    chosen = {cases[0].id for cases in groups.values()}
    for case in failing:
        if len(chosen) >= cap:
            break
        chosen.add(case.id)
    return chosen


def _settled(case: CaseResult, policy: LocalisePolicy) -> CaseResult:
    """A tolerance artefact passes when the manifest says so, the reason saying why."""
    loc = case.localisation
    if not policy.artefacts_pass or loc is None or loc.artefact is not True:
        return case
    return replace(case, outcome=Outcome.PASS,
                   reason=f"tolerance artefact, passed by the manifest (localise.artefacts: "
                   f"pass): ONNX Runtime is {loc.onnx_error or 0.0:.3g} from a float64 run, eager "
                   f"{loc.eager_error or 0.0:.3g}; was: {case.reason}")


def _worst_abs(case: CaseResult) -> float:
    worst = case.worst()
    return 0.0 if worst is None or worst.max_abs is None else worst.max_abs


def localise(run: RunResult, modules: Iterable[ModuleJob], pool: WorkerPool,
             policy: LocalisePolicy, on_case: Callable[[CaseResult], None] | None = None) -> int:
    """Attach a `Localisation` to every localised case of `run`; returns how many got one."""
    jobs = jobs_for(run, modules, policy, pool.folder)
    if not jobs:
        return 0
    index = {c.id: i for i, c in enumerate(run.cases)}
    done = 0
    for event in pool.run(jobs):
        if not isinstance(event, CaseResult) or event.id not in index:
            continue
        original = run.cases[index[event.id]]
        if event.lost is not None or event.localisation is None:
            why = event.reason or "the localisation worker stopped"
            status = Status.TIMEOUT if event.outcome is Outcome.TIMEOUT else Status.FAILED
            loc = Localisation(steps=[StepRun(c, status, note=why) for c in Check])
            run.cases[index[event.id]] = replace(original, localisation=loc)
        else:
            run.cases[index[event.id]] = _settled(replace(original,
                                                          localisation=event.localisation),
                                                  policy)
        done += 1
        if on_case is not None:
            on_case(run.cases[index[event.id]])
    return done
