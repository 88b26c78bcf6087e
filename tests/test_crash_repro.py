"""A crash inside ONNX Runtime or under the exporter is named and replayed in a repro folder
that crashes the same way (tests/data/ort_crash: one float16 attention layer segfaults ONNX
Runtime's CPU provider while loading, at the highest graph optimization level only;
tests/data/export_crash: native code under the exporter's trace)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parity_gate.cli import main

MANIFEST = Path(__file__).parent / "data" / "ort_crash" / "parity.yml"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ort_crash")
    code = main(["run", str(MANIFEST), "--out", str(out), "--quiet"])
    data = json.loads((out / "results.json").read_text())
    data["by_dtype"] = {c["key"]["dtype"]: c for c in data["cases"]}
    data["exit_code"], data["summary"] = code, (out / "summary.md").read_text()
    if data["by_dtype"]["float16"]["outcome"] == "pass":
        import onnxruntime

        pytest.skip(f"onnxruntime {onnxruntime.__version__} no longer crashes on this model")
    return data


@pytest.mark.process
def test_the_crash_names_its_library_and_step(run: dict[str, Any]) -> None:
    case = run["by_dtype"]["float16"]
    assert case["outcome"] == "crash" and run["exit_code"] == 1
    assert case["reason"] == ("worker killed by SIGSEGV in ONNX Runtime while loading float16 "
                              "model on cpu")
    assert run["by_dtype"]["float32"]["outcome"] == "pass"  # the same layer in float32


@pytest.mark.process
def test_the_repro_folder_crashes_the_same_way_and_names_the_level(run: dict[str, Any]) -> None:
    crash = run["by_dtype"]["float16"]["crash"]
    assert crash["reproduces"] and crash["signal"] == "SIGSEGV"
    assert crash["levels"] == {"disabled": "ok", "basic": "ok", "extended": "ok",
                               "all": "SIGSEGV"}
    folder = Path(crash["folder"])
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "repro.py"]
    # as a user runs it: the gate's level crashes, one below does not
    died = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True)
    assert died.returncode == -signal.SIGSEGV
    fine = subprocess.run([sys.executable, "repro.py", "extended"], cwd=folder,
                          capture_output=True, text=True)
    assert fine.returncode == 0 and "loaded at optimization level extended" in fine.stdout
    assert "a graph optimization (fusion) pass crashes on this model" in run["summary"]


EXPORT_CRASH = Path(__file__).parent / "data" / "export_crash" / "parity.yml"


@pytest.mark.process
def test_a_crash_while_exporting_is_replayed_by_rebuilding_and_exporting(
        tmp_path: Path) -> None:
    """tests/data/export_crash: native code under the exporter's trace kills the worker.
    The crash names the model's own line (faulthandler's innermost frame outside the
    standard library), and the repro folder rebuilds the module from its factory, binds
    the structured input the same way and exports it: it crashes the same way."""
    assert main(["run", str(EXPORT_CRASH), "--out", str(tmp_path), "--quiet"]) == 1
    (case,) = json.loads((tmp_path / "results.json").read_text())["cases"]
    assert case["outcome"] == "crash"
    assert case["reason"] == ("worker killed by SIGSEGV in the model's own code (models.py:19, "
                              "in forward) while exporting float32")
    crash = case["crash"]
    assert crash["reproduces"] and crash["signal"] == "SIGSEGV" and crash["levels"] == {}
    folder = Path(crash["folder"])
    assert sorted(p.name for p in folder.iterdir()) == ["export.json", "inputs.npz", "repro.py"]
    died = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True,
                          text=True)
    assert died.returncode == -signal.SIGSEGV and "exporting with dynamo" in died.stdout
    # the same script exports when the model does not crash: it is the call, not a stub
    call = json.loads((folder / "export.json").read_text())
    (tmp_path / "fine.py").write_text(
        "import torch\nclass M(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(6, 3)\n"
        "    def forward(self, parts):\n        return self.fc(parts[0] + parts[1])\n"
        "def make():\n    return M()\n")
    call.update(python_path=[str(tmp_path)], factory="fine:make")
    (folder / "export.json").write_text(json.dumps(call))
    fine = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True,
                          text=True)
    assert fine.returncode == 0 and fine.stdout.rstrip().endswith("exported"), fine.stderr[-2000:]
    import onnx

    graph = onnx.load(str(folder / "exported.onnx")).graph
    assert [i.name for i in graph.input] == ["parts.0", "parts.1"]


def test_the_crash_site_is_the_innermost_frame_outside_the_standard_library() -> None:
    """faulthandler's stack (innermost first): a library's frame leaves the step's library
    to name it; the model's own frame under a standard-library one names the line."""
    import sysconfig

    from parity_gate.engine.pool import crash_site

    stdlib = sysconfig.get_paths()["stdlib"]
    head = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f3a (most recent " \
           "call first):\n"
    ort = (head + '  File "/v/lib/python3.11/site-packages/onnxruntime/capi/onnxruntime_'
           'inference_collection.py", line 552 in _create_inference_session\n'
           '  File "/w/parity_gate/engine/stages.py", line 80 in open_session\n')
    assert crash_site(ort) == ""
    model = (head + f'  File "{stdlib}/ctypes/__init__.py", line 519 in string_at\n'
             '  File "/home/me/proj/nets.py", line 33 in forward\n'
             '  File "/v/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1784 '
             'in _call_impl\n')
    assert crash_site(model) == "the model's own code (nets.py:33, in forward)"
    assert crash_site("no stack at all") == ""


SANDBOX = Path(__file__).parent / "data" / "replay_sandbox"


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """tests/data/replay_sandbox, run as a user runs it: from the project's folder with the
    default, relative --out, GITHUB_TOKEN in the gate's environment."""
    import os
    import shutil
    import time

    work = tmp_path_factory.mktemp("replay_sandbox")
    shutil.copytree(SANDBOX, work, dirs_exist_ok=True)
    record = work / "record.jsonl"
    env = dict(os.environ, GITHUB_TOKEN="ghs_replaySANDBOXtoken0123456789",
               PG_REPLAY_RECORD=str(record))
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "parity_gate", "run", "parity.yml",
                           "--no-cache", "--quiet"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    took = time.monotonic() - t0
    results = json.loads((work / "parity-reports" / "results.json").read_text())
    records = [json.loads(line) for line in record.read_text().splitlines()]
    yield {"done": done, "took": took, "work": work, "records": records,
           "cases": {c["key"]["module"]: c for c in results["cases"]}}
    for pid in (pid for r in records for pid in r["children"] if not _gone(pid)):
        os.kill(pid, signal.SIGKILL)  # a failed test leaves no process behind


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.process
def test_the_replay_runs_the_repro_as_documented_with_the_default_relative_out(
        sandboxed: dict[str, Any]) -> None:
    """`--out parity-reports` (relative): the replay runs repro.py by its absolute path from
    its own folder, and it crashes the same way."""
    assert sandboxed["done"].returncode == 1, sandboxed["done"].stderr[-2000:]
    crash = sandboxed["cases"]["leaky"]["crash"]
    assert crash["reproduces"] and crash["signal"] == "SIGSEGV", crash
    replayed = sandboxed["records"][1]
    assert Path(replayed["cwd"]) == (sandboxed["work"] / crash["folder"]).resolve()


@pytest.mark.process
def test_the_replay_runs_in_the_workers_sandbox(sandboxed: dict[str, Any]) -> None:
    """No GitHub token in the worker's or the replay's environment, the module's memory
    limit (worker_memory: 3GiB), no process the replay started alive once the gate has
    exited (one in a session of its own included), and the module's timeout (30 s, not
    120 s)."""
    worker, replayed = sandboxed["records"]  # the worker's crash and the replay's
    assert [r["token"] for r in (worker, replayed)] == [False, False]
    assert [r["data_limit"] for r in (worker, replayed)] == [3 << 30, 3 << 30]
    assert len(replayed["children"]) == 2 and all(_gone(p) for p in replayed["children"])
    assert _gone(worker["children"][0])  # in the worker's group
    hung = sandboxed["cases"]["hangs_on_replay"]
    assert hung["outcome"] == "crash" and hung["crash"]["signal"] == "timeout"
    assert not hung["crash"]["reproduces"]
    assert sandboxed["took"] < 110  # the replay was stopped at 30 s
