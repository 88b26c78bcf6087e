"""Crash repros: a worker killed by a signal inside ONNX Runtime, replayed outside the gate.

The worker writes down, before it loads or runs a model, what a crash there could be
replayed from (`Step.evidence`: the model file, the case's feeds, the provider). When
the worker dies in that step, this copies the evidence into the case's repro folder with
a `repro.py` that loads (and runs) the model the way the gate did, runs it in a fresh
process to check that it crashes the same way, and tries every graph optimization level
(a crash only at `all` points at a fusion pass, at every level at the kernel). A repro
that does not crash is never presented as one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from parity_gate.localise.repro import folder_name
from parity_gate.model.files import atomic_write, copy_file, make_folder
from parity_gate.model.findings import CrashRepro, Stage
from parity_gate.model.localisation import LEVELS
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.plan.providers import EXECUTION_PROVIDERS

STAGES = (Stage.LOADING, Stage.RUNNING)  # ONNX Runtime's own steps

SCRIPT = '''"""Replays the crash parity-gate met in ONNX Runtime on case {case_id}.

    python repro.py [disabled|basic|extended|all]   (default: {optimization}, as the gate ran)

Needs only numpy and onnxruntime. It loads model.onnx on {provider}{and_runs}; a crash
kills this process (SIGSEGV, SIGABRT), while exit 0 means it did not crash.
Found with {version}.
"""
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

here = Path(__file__).resolve().parent
level = sys.argv[1] if len(sys.argv) > 1 else "{optimization}"
options = ort.SessionOptions()
options.graph_optimization_level = {{
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}}[level]
session = ort.InferenceSession(str(here / "model.onnx"), options, providers=["{provider}"])
print("loaded at optimization level", level, flush=True)
if (here / "inputs.npz").exists():
    feeds = dict(np.load(here / "inputs.npz"))
    session.run(None, feeds)
    print("ran", flush=True)
'''


def replay(case: CaseResult, artifacts: Path, version: str,
           timeout_s: float = 120.0) -> CaseResult:
    """`case` with its `crash` record when it is a crash in ONNX Runtime that left evidence;
    otherwise unchanged."""
    lost = case.lost
    if case.outcome is not Outcome.CRASH or lost is None or not lost.signal \
            or lost.step.stage not in STAGES or not lost.step.evidence.get("model"):
        return case
    evidence = lost.step.evidence
    folder = artifacts / folder_name(case.id)
    try:
        make_folder(artifacts, folder)
        model = Path(evidence["model"])
        copy_file(model, folder / "model.onnx")
        if Path(f"{model}.data").is_file():
            copy_file(Path(f"{model}.data"), folder / "model.onnx.data")
        runs = lost.step.stage is Stage.RUNNING and bool(evidence.get("inputs"))
        if runs:
            copy_file(Path(evidence["inputs"]), folder / "inputs.npz")
        provider = EXECUTION_PROVIDERS.get(evidence.get("provider", "cpu"), "CPUExecutionProvider")
        optimization = evidence.get("optimization", "all")
        atomic_write(folder / "repro.py", SCRIPT.format(
            case_id=case.id, optimization=optimization, provider=provider, version=version,
            and_runs=" and runs it on the case's inputs" if runs else ""))
    except (OSError, ValueError) as exc:
        return replace(case, crash=CrashRepro(str(folder), False, error=f"{exc}"))
    levels = {level: _run(folder, level, timeout_s) for level in LEVELS}
    died = levels.get(optimization, "ok")
    return replace(case, crash=CrashRepro(str(folder), died.startswith("SIG"), signal=died,
                                          levels=levels))


def _run(folder: Path, level: str, timeout_s: float) -> str:
    """`ok`, the signal the script died of, or how else it ended, in a fresh process."""
    try:
        done = subprocess.run([sys.executable, str(folder / "repro.py"), level],
                              capture_output=True, timeout=timeout_s, cwd=folder, check=False)
    except subprocess.TimeoutExpired:
        return "timeout"
    if done.returncode < 0:
        return signal.Signals(-done.returncode).name
    return "ok" if done.returncode == 0 else f"exit {done.returncode}"
