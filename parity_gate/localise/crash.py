"""Crash repros: a worker killed by a signal inside ONNX Runtime or the exporter, replayed
outside the gate.

The worker writes down, before it exports, loads or runs a model, what a crash there
could be replayed from (`Step.evidence`: the export call as data and its example; the
model file, the case's feeds, the provider). When the worker dies in that step, this
copies the evidence into the case's repro folder with a `repro.py` that does the same
step the way the gate did, runs it in a fresh process (as documented: `python repro.py`
from its folder, in the sandbox a worker runs in) to check that it crashes the same
way, and, for ONNX Runtime, tries every graph optimization level (a crash only at `all`
points at a fusion pass, at every level at the kernel). A repro that does not crash is
never presented as one. Which stage replays how is one record each (`REPLAYS`).
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from parity_gate.engine import sandbox
from parity_gate.localise.repro import folder_name
from parity_gate.model.files import atomic_write, copy_file, make_folder
from parity_gate.model.findings import CrashRepro, Stage
from parity_gate.model.localisation import LEVELS
from parity_gate.model.outcomes import Outcome
from parity_gate.model.results import CaseResult
from parity_gate.plan.providers import EXECUTION_PROVIDERS

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


# Builds the module as the gate did and prepares torch.onnx.export's arguments (`options`,
# `tensors`, `nest`): the body of every script that replays an export.
EXPORT_BODY = '''import importlib
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

here = Path(__file__).resolve().parent
call = json.loads((here / "export.json").read_text())
sys.path[:0] = call["python_path"]
random.seed(call["seed"])
np.random.seed(call["seed"])
torch.manual_seed(call["seed"])
module_name, attr = call["factory"].split(":", 1)
factory = importlib.import_module(module_name)
for part in attr.split("."):
    factory = getattr(factory, part)
model = factory(**call["kwargs"]).eval().to(getattr(torch, call["dtype"])).to(call["device"])
feeds = np.load(here / "inputs.npz")
tensors = {{n: torch.from_numpy(feeds[n]).to(call["device"]) for n in call["order"]}}


def nest(flat):
    """Dotted names as the gate passes them: `images.0` → images=[...], `a.b` → a={{"b": ...}}."""
    tree = {{}}
    for name, leaf in flat.items():
        *parents, last = name.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {{}})
        node[last] = leaf

    def lists(node):
        if not isinstance(node, dict):
            return node
        items = {{k: lists(v) for k, v in node.items()}}
        if items and sorted(items) == [str(i) for i in range(len(items))]:
            return [items[str(i)] for i in range(len(items))]
        return items
    return {{k: lists(v) for k, v in tree.items()}}


options = dict(call["options"], output_names=call["output_names"] or None)
if call["opset"] is not None:
    options["opset_version"] = call["opset"]
dims = {{}}
if call["exporter"] == "dynamo":
    shapes = {{n: {{int(d): dims.setdefault(s, torch.export.Dim(s)) for d, s in
                  call["dynamic"].get(n, {{}}).items()}} or None for n in call["order"]}}
    options.update(dynamo=True, optimize=call["optimize"], input_names=call["order"])
    if call["keyword"]:
        options["dynamic_shapes"] = nest(shapes)
    else:
        options["dynamic_shapes"] = tuple(shapes[n] for n in call["order"])
else:
    options.update(dynamo=False, input_names=call["order"],
                   dynamic_axes={{n: {{int(d): s for d, s in ax.items()}}
                                 for n, ax in call["dynamic"].items() if ax}})
'''
EXPORT_CALL = '''if call["keyword"]:
    torch.onnx.export(model, (), here / "exported.onnx", kwargs=nest(tensors), **options)
else:
    torch.onnx.export(model, tuple(tensors.values()), here / "exported.onnx", **options)
'''

EXPORT_SCRIPT = '''"""Replays the crash parity-gate met while exporting, on case {case_id}.

    python repro.py

Needs torch, numpy and the model's own code, imported from the paths in export.json (the
manifest's python_path). It builds the module as the gate did (same factory, seed, dtype,
eval mode), binds inputs.npz to forward() the same way and calls torch.onnx.export with
the gate's arguments; a crash kills this process (SIGSEGV, SIGABRT), exit 0 means the
export finished. Found with {version}.
"""
''' + EXPORT_BODY + '''print("exporting with", call["exporter"], flush=True)
''' + EXPORT_CALL + '''print("exported", flush=True)
'''


@dataclass(frozen=True)
class Replay:
    """How a crash in one step is replayed: the evidence it needs, the files it copies
    into the folder (evidence key → file name; optional ones may be missing), its
    script, and the arguments each fresh run gets (one run per optimization level for
    ONNX Runtime; the key of `levels` in the record)."""

    stages: tuple[Stage, ...]
    needs: str
    files: tuple[tuple[str, str, bool], ...]
    script: str
    levels: tuple[str, ...]


REPLAYS = (
    Replay((Stage.LOADING, Stage.RUNNING), "model",
           (("model", "model.onnx", True), ("inputs", "inputs.npz", False)), SCRIPT, LEVELS),
    Replay((Stage.EXPORTING,), "export",
           (("export", "export.json", True), ("inputs", "inputs.npz", True)), EXPORT_SCRIPT,
           ("",)),
)


def replay(case: CaseResult, artifacts: Path, version: str, timeout_s: float = 600.0,
           memory_limit: int | None = None) -> CaseResult:
    """`case` with its `crash` record when it is a crash in ONNX Runtime or the exporter
    that left evidence; otherwise unchanged. Each replay runs as the module's worker did
    (engine.sandbox): its timeout `timeout_s`, its memory limit, no credentials."""
    lost = case.lost
    if case.outcome is not Outcome.CRASH or lost is None or not lost.signal:
        return case
    evidence = lost.step.evidence
    how = next((r for r in REPLAYS if lost.step.stage in r.stages and evidence.get(r.needs)),
               None)
    if how is None:
        return case
    folder = artifacts / folder_name(case.id)
    try:
        make_folder(artifacts, folder)
        for key, name, required in how.files:
            if not evidence.get(key) and not required:
                continue  # e.g. no feeds: a crash while loading
            source = Path(evidence[key])
            copy_file(source, folder / name)
            if Path(f"{source}.data").is_file():  # weights kept as external data
                copy_file(Path(f"{source}.data"), folder / f"{name}.data")
        optimization = evidence.get("optimization", "all") if how.levels != ("",) else ""
        atomic_write(folder / "repro.py", how.script.format(
            case_id=case.id, optimization=optimization, version=version,
            provider=EXECUTION_PROVIDERS.get(evidence.get("provider", "cpu"),
                                             "CPUExecutionProvider"),
            and_runs=" and runs it on the case's inputs" if evidence.get("inputs") else ""))
    except (OSError, ValueError, KeyError) as exc:
        return replace(case, crash=CrashRepro(str(folder), False, error=f"{exc}"))
    levels = {level: _run(folder, level, timeout_s, memory_limit) for level in how.levels}
    died = levels.get(optimization, "ok")
    return replace(case, crash=CrashRepro(str(folder), died.startswith("SIG"), signal=died,
                                          levels=levels if len(levels) > 1 else {}))


def _run(folder: Path, level: str, timeout_s: float, memory_limit: int | None) -> str:
    """`ok`, the signal the script died of, or how else it ended: run as its docstring says
    (`python repro.py` from its folder), in the sandbox a worker runs in."""
    folder = folder.absolute()  # a relative --out names it from the gate's folder, not its own
    done = sandbox.run([sys.executable, str(folder / "repro.py"), *filter(None, [level])],
                       cwd=folder, timeout_s=timeout_s, memory_limit=memory_limit)
    if done.returncode is None:
        return "timeout"
    if done.returncode < 0:
        return signal.Signals(-done.returncode).name
    return "ok" if done.returncode == 0 else f"exit {done.returncode}"
