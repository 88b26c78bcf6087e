"""The GPU device check on a machine without a GPU: benchmarks/gpu_check.sh refuses at once,
in one line, before installing anything; its pick of torch and onnxruntime-gpu follows the
driver's CUDA version; and the summary writer says when the runs did not use the GPU (a
real CPU run of the gate) and what they did on it (records as a GPU run writes them).

Nothing here runs on a GPU. The pick and the refusals other than "no nvidia-smi" are driven
through a stand-in nvidia-smi (a shell script printing what the real one prints), since no
driver is here to print it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parity_gate.compare import Tolerance, compare
from parity_gate.model.keys import CaseKey
from parity_gate.model.outcomes import Outcome
from parity_gate.model.performance import (
    Copy,
    Latency,
    Performance,
    PerformanceLimits,
    PlacedNode,
    Placement,
    Startup,
)
from parity_gate.model.results import CaseResult, Provenance, RunResult

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
_spec = importlib.util.spec_from_file_location("gpu_summary",
                                               ROOT / "benchmarks" / "gpu_summary.py")
assert _spec is not None and _spec.loader is not None
gpu_summary: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_summary)

BANNER = ("| NVIDIA-SMI 580.82.07    Driver Version: 580.82.07    CUDA Version: {cuda}     |")


def _check(tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    return subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True,
                          timeout=30, env={**os.environ, **(env or {})}, cwd=tmp_path)


def _fake_smi(tmp_path: Path, query: str, cuda: str = "13.0", rc: int = 0) -> dict[str, str]:
    """PATH with a stand-in nvidia-smi first: `query` for --query-gpu, the banner else."""
    folder = tmp_path / "bin"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n[ {rc} -ne 0 ] && exit {rc}\n"
                   f"case \"$1\" in --query-gpu*) printf '%s' '{query}';;\n"
                   f"*) echo '{BANNER.format(cuda=cuda)}';; esac\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.process
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_without_a_gpu_the_check_refuses_at_once_in_one_line(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = _check(tmp_path)
    took = time.monotonic() - t0
    assert proc.returncode == 2
    assert _one_line(proc).startswith("gpu_check: no usable NVIDIA GPU: nvidia-smi not found")
    assert took < 5 and not (tmp_path / "out").exists()  # nothing created, nothing installed


@pytest.mark.process
@pytest.mark.parametrize(("query", "rc", "cuda", "said"), [
    ("", 0, "13.0", "nvidia-smi lists no device"),
    ("NVIDIA H200, 580.82.07", 9, "13.0", "nvidia-smi failed"),
    ("Tesla T4, 535.104.05", 0, "12.2", "the driver runs CUDA 12.2, older than 12.8"),
])
def test_a_driver_without_a_usable_gpu_is_refused_in_one_line(
        tmp_path: Path, query: str, rc: int, cuda: str, said: str) -> None:
    proc = _check(tmp_path, _fake_smi(tmp_path, query, cuda, rc))
    assert proc.returncode == 2
    assert said in _one_line(proc)
    assert not (tmp_path / "out").exists()


@pytest.mark.process
@pytest.mark.parametrize(("cuda", "local", "torch_index", "ort"), [
    ("13.0", "", "", "onnxruntime-gpu==1.31.1"),
    ("13.2", "", "", "onnxruntime-gpu==1.31.1"),
    ("12.8", "+cu128", "https://download.pytorch.org/whl/cu128", "onnxruntime-gpu==1.26.0"),
])
def test_the_pick_follows_the_drivers_cuda_version(tmp_path: Path, cuda: str, local: str,
                                                   torch_index: str, ort: str) -> None:
    env = {**_fake_smi(tmp_path, "NVIDIA H200, 580.82.07", cuda), "GPU_CHECK_PLAN_ONLY": "1"}
    proc = _check(tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    plan = dict(p.split("=", 1) for p in proc.stdout.strip().splitlines()[-1].split())
    assert plan["torch"] == f"torch==2.13.0{local}" and plan["index"] == torch_index
    assert plan["ort"] == ort and plan["vision"] == f"torchvision==0.28.0{local}"
    assert f"CUDA {cuda} ->" in proc.stdout and "NVIDIA H200" in proc.stdout
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_a_real_cpu_run_is_said_not_to_have_used_the_gpu(tmp_path: Path) -> None:
    """The gate's own run on this machine: its CUDA cases are skipped, which the summary
    must call a failure of the check, naming why they were skipped."""
    out = tmp_path / "out"
    gate = Path(sys.executable).parent / "parity-gate"
    run = subprocess.run([str(gate), "run", "--example", "--providers", "cpu,cuda", "--select",
                          "mlp/float32/tabular/b1/*", "--out", str(out / "example"),
                          "--no-cache", "--quiet", "--jobs", "1", "--no-localise"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (out / "runs.txt").write_text("example 0\n")
    assert gpu_summary.main([str(out), "--seconds", "12"]) == 1
    text = (out / "summary.txt").read_text()
    assert "FAILED: did not use the GPU: none of 1 CUDA case(s) ran" in text
    assert "CUDAExecutionProvider not available" in text  # the skip's reason
    row = next(line for line in text.splitlines() if "mlp/float32/tabular/b1" in line)
    assert row.split()[1:] == ["pass", "skipped"]  # per provider: cpu, cuda
    assert "GPU use: 0 case(s)" in text and "eager reference on cpu" in text


# ------------------------------------------------------------------ as a GPU run writes them

def _case(provider: str, batch: int, placement: Placement | None,
          latency: Latency | None = None, outcome: Outcome = Outcome.PASS,
          reason: str = "", startup: Startup | None = None) -> CaseResult:
    ref = np.linspace(-1, 1, 12, dtype=np.float16)
    comparisons = [] if outcome is not Outcome.PASS else [
        compare(ref, ref + np.float16(1e-3), Tolerance(atol=1e-2, rtol=1e-2), name="logits")]
    return CaseResult(CaseKey("resnet", "float16", "images", batch, provider), outcome,
                      reason=reason, comparisons=comparisons,
                      provenance=Provenance(exporter="dynamo", reference_device="cuda"),
                      performance=Performance(PerformanceLimits(max_fallback_nodes=0,
                                                                gpu=True),
                                              latency=latency, placement=placement,
                                              startup=startup))


def _write(out: Path, runs: dict[str, tuple[RunResult, int]]) -> None:
    for name, (run, _) in runs.items():
        (out / name).mkdir(parents=True)
        (out / name / "results.json").write_text(json.dumps(run.to_dict()))
    (out / "runs.txt").write_text("".join(f"{n} {rc}\n" for n, (_, rc) in runs.items()))
    (out / "env.json").write_text(json.dumps({"driver_cuda": "13.0", "torch_cuda": "13.0"}))
    (out / "tensorrt.txt").write_text("does not load: the session fell back to "
                                      "CUDAExecutionProvider, CPUExecutionProvider")


GPU = {"name": "NVIDIA H200", "driver": "580.82.07", "cuda": "13.0", "count": "1"}
ON_CUDA = Placement("CUDAExecutionProvider",
                    {"CUDAExecutionProvider": 41, "CPUExecutionProvider": 2},
                    fallback=[PlacedNode("/Shape", "Shape", "CPUExecutionProvider"),
                              PlacedNode("/Gather_3", "Gather", "CPUExecutionProvider")],
                    memcpy=[PlacedNode("Memcpy_token_0", "MemcpyToHost",
                                       "CUDAExecutionProvider")],
                    copies=[Copy("Memcpy_token_0", "MemcpyToHost", "/Add_output_0",
                                 ["/Shape"], 8192, 11.5)])


def test_the_summary_of_a_run_on_the_gpu(tmp_path: Path) -> None:
    timed = Latency(eager_ms=1.2, onnx_ms=0.6, ratio=0.5, low=0.47, high=0.53, pairs=12,
                    stable=True, io_binding=True)
    built = Startup(session_ms=2100, first_run_ms=41000, engine_cache="built",
                    cache_path="/cache/tensorrt")
    run = RunResult(cases=[_case("cuda", 1, ON_CUDA, timed), _case("cuda", 4, ON_CUDA),
                           _case("tensorrt", 4, None, timed, startup=built),
                           _case("tensorrt", 1, None, outcome=Outcome.SKIPPED,
                                 reason="TensorrtExecutionProvider not available")],
                    versions={"torch": "2.13.0", "onnxruntime-gpu": "1.31.1", "gpu": GPU,
                              "providers_available": ["CUDAExecutionProvider",
                                                      "CPUExecutionProvider"]})
    _write(tmp_path, {"zoo": (run, 0)})
    assert gpu_summary.main([str(tmp_path), "--seconds", "301"]) == 0
    text = (tmp_path / "summary.txt").read_text()
    assert "GPU: NVIDIA H200 (x1), driver 580.82.07, driver CUDA 13.0" in text
    assert "torch 2.13.0" in text and "onnxruntime-gpu 1.31.1" in text
    assert "torch built for CUDA 13.0" in text
    assert "TensorRT provider: does not load" in text
    assert "resnet/float16 on cuda: 43 node(s) on CUDA 41, CPU 2; 2 fell back from CUDA: " \
        "/Shape (Shape; copies 8.0KiB to host in 11.5 µs), /Gather_3 (Gather); 1 Memcpy " \
        "node(s) inserted (8.0KiB per run, 11.5 µs)" in text
    assert "resnet/float16/images/b1/cuda: 0.50x (95% 0.47-0.53, 12 pairs; ONNX 0.6 ms, " \
        "eager 1.2 ms; IOBinding)" in text
    assert "resnet/float16 on tensorrt: session 2.1 s, first run 41 s, engine " \
        "built and cached (not in the latency); engine cache /cache/tensorrt" in text
    assert "1 x tensorrt: TensorrtExecutionProvider not available" in text
    assert "GPU use: 3 case(s) ran on a GPU provider (cuda, tensorrt)" in text
    assert "FAILED" not in text and "eager reference on cuda" in text
    row = next(line for line in text.splitlines() if "resnet/float16/images/b1" in line)
    assert row.split()[1:] == ["pass", "skipped"]


def test_cases_whose_nodes_all_left_cuda_did_not_use_the_gpu(tmp_path: Path) -> None:
    on_cpu = Placement("CUDAExecutionProvider", {"CPUExecutionProvider": 43})
    fell = _case("cuda", 4, None, outcome=Outcome.RUNTIME_ERROR,
                 reason="CUDAExecutionProvider failed to initialise; the session fell back "
                 "to CPUExecutionProvider")
    run = RunResult(cases=[_case("cuda", 1, on_cpu), fell], versions={"gpu": GPU})
    _write(tmp_path, {"zoo": (run, 1)})
    assert gpu_summary.main([str(tmp_path)]) == 1
    text = (tmp_path / "summary.txt").read_text()
    assert "FAILED: did not use the GPU: none of 2 CUDA case(s) ran on the CUDA provider" in text
    assert "pass(not on GPU)" in text and "fell back to CPUExecutionProvider" in text


def test_a_crashed_run_fails_the_check_even_when_another_used_the_gpu(tmp_path: Path) -> None:
    good = RunResult(cases=[_case("cuda", 1, ON_CUDA)], versions={"gpu": GPU})
    _write(tmp_path, {"example": (good, 0)})
    with (tmp_path / "runs.txt").open("a") as f:
        f.write("zoo 124\n")  # timed out: no results.json
    assert gpu_summary.main([str(tmp_path)]) == 1
    text = (tmp_path / "summary.txt").read_text()
    assert "== zoo: exit 124, no results.json (see zoo.log)" in text
    assert "FAILED: run zoo exited 124 (not a verdict: see zoo.log)" in text
    assert "did not use the GPU" not in text
