"""Bounds a case may not cross: input bytes checked at validation, a memory limit per worker
(an oversized case is its own `out_of_memory`), and options torch/ORT would not take."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from parity_gate.cli import main
from parity_gate.engine.fixtures import FixtureError, load_arrays
from parity_gate.engine.pool import MIN_WORKER_MEMORY, default_worker_memory, machine_memory
from parity_gate.engine.runtime import classify_run_error, memory_failure
from parity_gate.manifest.limits import input_bytes
from parity_gate.manifest.load import load_manifest
from parity_gate.manifest.models import RandomFixture
from parity_gate.manifest.options import EXPORT_OPTIONS, EXPORT_SET_BY_GATE
from parity_gate.model.outcomes import Outcome

ROOT = Path(__file__).resolve().parent.parent

BASE = textwrap.dedent("""\
    version: 1
    defaults:
      batch_sizes: [1, 4]
    fixtures:
      vec:
        kind: random
        inputs:
          x: {shape: [batch, 8]}
      text:
        kind: random
        samples: 2
        dims: {seq: [8, 32]}
        inputs:
          ids: {shape: [batch, seq], dtype: int64}
          mask: {shape: [batch, seq], dtype: bool}
    modules:
      - name: mlp
        factory: models:build
        inputs: [{name: x}]
        fixtures: [vec]
      - name: lm
        factory: models:build
        inputs: [{name: ids}, {name: mask}]
        fixtures: [text]
    """)


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    (tmp_path / "models.py").write_text("def build():\n    return None\n")
    path = tmp_path / "parity.yml"
    path.write_text(text)
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [ln[len(str(path)) + 1:] for ln in err.splitlines() if ln.strip()]


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
            expected: str) -> None:
    """BASE with `old` replaced is refused (exit 2) with a line starting `expected`."""
    assert old in BASE
    code, lines = check(tmp_path, BASE.replace(old, new, 1), capsys)
    assert code == 2
    assert any(line.startswith(expected) for line in lines), "\n".join(lines)


@pytest.mark.process  # check imports the factories in a process of their own
def test_a_large_plain_manifest_is_no_alias_bomb(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """8,000 modules written out one by one, no anchor or alias: the alias guard bounds
    what aliases add, so `check` accepts it (its cost is its size)."""
    modules = "".join(f"  - {{name: m{i}, factory: models:build, inputs: [{{name: x}}], "
                      "fixtures: [vec]}\n" for i in range(8000))
    code, lines = check(tmp_path, BASE.split("modules:")[0] + "modules:\n" + modules, capsys)
    assert code == 0 and lines == [], lines[:3]


def test_a_billion_laughs_is_refused_quickly_where_it_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + chr(ord(c) - 1)] * 10)}]\n" for c in "bcdefghi")
    start = time.monotonic()
    code, lines = check(tmp_path, BASE + laughs, capsys)
    assert code == 2 and time.monotonic() - start < 10
    first = BASE.count("\n") + 1  # `a`'s line; `d` adds about 10**4 nodes, `e` 10**5
    assert lines == [f"{first + 4}:4: aliases add more than 100000 nodes under this node "
                     "when expanded (an alias bomb?) (expected a parity.yml manifest without "
                     "alias cycles or bombs)"]


def test_input_bytes_follow_shapes_dtypes_samples_and_the_largest_dims() -> None:
    text = RandomFixture.model_validate({
        "kind": "random", "samples": 2, "dims": {"seq": [8, 32]},
        "inputs": {"ids": {"shape": ["batch", "seq"], "dtype": "int64"},
                   "mask": {"shape": ["batch", "seq"], "dtype": "bool"},
                   "emb": {"shape": ["batch", "seq", 4]}}})
    # per sample at batch 3, seq 32: ids 96*8 + mask 96*1 + emb 384*4 (float32) bytes
    assert input_bytes(text, 3, "float32") == 2 * (96 * 8 + 96 + 384 * 4)
    assert input_bytes(text, 3, "float64") == 2 * (96 * 8 + 96 + 384 * 8)  # floats cast


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_billion_batch_is_refused_at_validation(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "models.py").write_text("def build():\n    return None\n")
    path = tmp_path / "parity.yml"
    path.write_text(BASE.replace("batch_sizes: [1, 4]", "batch_sizes: [1, 1000000000]"))
    argv = [command, str(path)] + (["--out", str(tmp_path / "out")] if command == "run" else [])
    assert main(argv) == 2  # the pure lane: a worker started here would fail the test
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == (  # 2 samples of int64 + bool [10**9, 32]
        f"{path}:3:20: defaults.batch_sizes[1]: batch size 1000000000: a case of module "
        "'lm' on fixture set 'text' (float32) would hold 536.4GiB of inputs (576000000000 "
        "bytes), over `max_case_bytes` 2.0GiB (expected a smaller batch size, or raise "
        "`max_case_bytes` in `defaults` or in module 'lm', e.g. `max_case_bytes: 537GiB`)")
    assert len(lines) == 1  # said once, at the batch size (the biggest case it makes)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("    fixtures: [vec]\n", "    fixtures: [vec]\n    batch_sizes: [2, 300000000]\n",
     "21:22: modules[0].batch_sizes[1]: batch size 300000000: a case of module 'mlp'"),
    ("seq: [8, 32]", "seq: [8, 200000000]",
     "12:21: fixtures.text.dims.seq[1]: even at batch size 1 a case of module 'lm' on fixture "
     "set 'text' (float32) would hold 3.4GiB of inputs (3600000000 bytes)"),
    ("x: {shape: [batch, 8]}", "x: {shape: [batch, 8, 100000000]}",
     "8:29: fixtures.vec.inputs.x.shape[2]: even at batch size 1 a case of module 'mlp' on "
     "fixture set 'vec' (float32) would hold 3.0GiB of inputs (3200000000 bytes)"),
    ("batch_sizes: [1, 4]", "batch_sizes: [1, 4]\n  dtypes: [float64]\n  max_case_bytes: 50B",
     "10:26: fixtures.vec.inputs.x.shape[1]: even at batch size 1 a case of module 'mlp' on "
     "fixture set 'vec' (float64) would hold 64B of inputs (64 bytes), over `max_case_bytes` "
     "50B"),
], ids=["module batch size", "dims list item", "literal dim", "float64 doubles"])
def test_an_oversized_case_is_blamed_where_it_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
        expected: str) -> None:
    refused(tmp_path, capsys, old, new, expected)


@pytest.mark.process  # check imports the factories in a process of their own
def test_raising_the_bound_in_the_module_lets_a_big_case_through(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE.replace("    fixtures: [vec]\n", "    fixtures: [vec]\n"
                        "    batch_sizes: [300000000]\n    max_case_bytes: 16GiB\n")
    code, lines = check(tmp_path, text, capsys)
    assert code == 0, lines
    manifest = load_manifest(tmp_path / "parity.yml")
    assert manifest.modules[0].max_case_bytes == 16 << 30


@pytest.mark.parametrize(("value", "expected"), [
    ("true", "got True (expected a size: bytes as an integer > 0, or a number with a unit"),
    ("lots", "got 'lots' (expected a size"),
    ("2 gibs", "got '2 gibs' (expected a size"),
    ("0", "got 0 (expected a size"),
])
def test_sizes_are_bytes_or_a_number_with_a_unit(
        value: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("max_case_bytes", "worker_memory"):
        text = BASE.replace("batch_sizes: [1, 4]", f"batch_sizes: [1, 4]\n  {key}: {value}")
        code, lines = check(tmp_path, text, capsys)
        assert code == 2
        assert lines[0].startswith(f"4:{len(key) + 5}: defaults.{key}: {expected}"), lines


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("defaults:\n", "defaults:\n  export: {options: {do_constant_foldin: true}}\n",
     "3:22: defaults.export.options.do_constant_foldin: unknown torch.onnx.export option; "
     "did you mean `do_constant_folding`? (expected one of: external_data,"),
    ("defaults:\n", "defaults:\n  export: {options: {opset_version: 17}}\n",
     "3:22: defaults.export.options.opset_version: `opset_version` is set by parity-gate "
     "(expected it left out: set it with `export.opset`)"),
    ("    fixtures: [vec]\n", "    fixtures: [vec]\n    export:\n"
     "      options: {dynamic_axes: {}}\n",
     "22:17: modules[0].export.options.dynamic_axes: `dynamic_axes` is set by parity-gate "
     "(expected it left out: declare dynamic dims with `inputs[].dynamic`)"),
    ("modules:\n", "providers:\n  cpu: {options: {intra_op_num_threads: 2}}\nmodules:\n",
     "17:19: providers.cpu.options.intra_op_num_threads: the cpu provider takes no options "
     "(ONNX Runtime would ignore 'intra_op_num_threads' silently"),
    ("modules:\n", "providers:\n  cpu: {}\n  cuda: {options: {gpu_mem_limt: 1000}}\nmodules:\n",
     "18:20: providers.cuda.options.gpu_mem_limt: unknown cuda provider option; did you mean "
     "`gpu_mem_limit`? (expected one of: device_id,"),
    ("modules:\n", "providers:\n  tensorrt: {options: {trt_fp16_enabled: 1}}\nmodules:\n",
     "17:24: providers.tensorrt.options.trt_fp16_enabled: unknown tensorrt provider option; "
     "did you mean `trt_fp16_enable`?"),
], ids=["export typo", "export set by gate", "module export", "cpu option", "cuda typo",
        "tensorrt typo"])
def test_unknown_export_and_provider_options_are_manifest_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
        expected: str) -> None:
    refused(tmp_path, capsys, old, new, expected)


@pytest.mark.process  # check imports the factories in a process of their own
def test_known_options_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE.replace("defaults:\n", "defaults:\n  export: {options: {do_constant_folding: "
                        "false, report: false}}\n").replace(
        "modules:\n", "providers:\n  cpu: {}\n  cuda: {options: {device_id: 0, use_tf32: 0, "
        "cudnn_conv_algo_search: DEFAULT}}\n  tensorrt: {options: {trt_fp16_enable: false}}\n"
        "modules:\n")
    code, lines = check(tmp_path, text, capsys)
    assert code == 0, lines


@pytest.mark.process
def test_export_option_table_is_torch_onnx_exports_signature() -> None:
    """The static table (the manifest must not import torch) against the real signature."""
    code = ("import inspect, json, torch; print(json.dumps(["
            "n for n, p in inspect.signature(torch.onnx.export).parameters.items() "
            "if p.kind is not p.VAR_KEYWORD]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    real = json.loads(out)
    assert sorted(set(real) - set(EXPORT_SET_BY_GATE)) == sorted(EXPORT_OPTIONS)
    assert set(EXPORT_SET_BY_GATE) <= set(real)  # every refused name is a real parameter


# ------------------------------------------------------------------ worker memory


def test_default_worker_memory_is_a_share_of_the_machine_at_least_2_gib() -> None:
    total = machine_memory()
    assert total is not None and total > 0
    assert default_worker_memory(10_000) == MIN_WORKER_MEMORY
    one = default_worker_memory(1)
    assert one == max(MIN_WORKER_MEMORY, int(total * 0.8))
    assert default_worker_memory(2) <= one


@pytest.mark.parametrize("message", [
    "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running "
    "Expand node. Name:'' Status Message: std::bad_alloc",
    "bfc_arena.cc:360 Failed to allocate memory for requested buffer of size 4294967296",
    "DefaultCPUAllocator: can't allocate memory: you tried to allocate 3221225472 bytes. "
    "Error code 12 (Cannot allocate memory)",
])
def test_allocation_failures_are_out_of_memory(message: str) -> None:
    assert classify_run_error(message, 7, 2) is Outcome.OUT_OF_MEMORY
    reason = memory_failure(message, 224)
    assert reason is not None and reason.startswith("out of memory: ")
    assert "224B of inputs" in reason and "worker_memory" in reason
    assert memory_failure("Got invalid dimensions for input: x") is None
    assert memory_failure(MemoryError("Unable to allocate 3.00 GiB for an array")) == (
        "out of memory: a request for 3.00GiB did not fit in memory (no worker memory limit "
        "set) (raise `worker_memory` or use a smaller case)")


@pytest.mark.process
def test_an_oversized_case_is_out_of_memory_and_the_other_cases_pass(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real worker under `worker_memory: 2GiB`: ONNX Runtime's Expand needs over 3 GiB at
    batch 7 only (eager's expand is a view); that case fails alone, with its reason."""
    manifest = ROOT / "tests" / "data" / "limits" / "parity.yml"
    code = main(["run", str(manifest), "--out", str(tmp_path), "--no-localise", "--quiet"])
    assert code == 1
    cases = {c["key"]["batch_size"]: c for c in
             json.loads((tmp_path / "results.json").read_text())["cases"]}
    assert {b: c["outcome"] for b, c in cases.items()} == {
        1: "pass", 2: "pass", 7: "out_of_memory"}
    reason = cases[7]["reason"]
    assert reason.startswith("out of memory: a request for "), reason
    assert "did not fit under the worker's memory limit of 2.0GiB, with 224B of inputs" \
        in reason


# ------------------------------------------------------------------ fixture files


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("d.npz", b"x,y\n1,2\n", "has no NumPy header (a text file?) (expected a NumPy .npz"),
    ("d.npy", b"x,y\n1,2\n", "has no NumPy header (a text file?) (expected a NumPy .npy"),
    ("d.npz", b"PK\x03\x04 truncated", "is not a valid zip archive (corrupt or truncated?)"),
    ("d.npz", b"", "is empty or truncated"),
    ("d.npy", None, "holds pickled Python objects, which are never loaded"),
])
def test_a_corrupt_fixture_file_names_the_file_and_the_problem(
        tmp_path: Path, name: str, content: bytes | None, expected: str) -> None:
    path = tmp_path / name
    if content is None:
        np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    else:
        path.write_bytes(content)
    with pytest.raises(FixtureError) as err:
        load_arrays(path)
    assert str(err.value).startswith(f"{path}: "), err.value
    assert expected in str(err.value)
    assert "allow_pickle" not in str(err.value) and "pickle.load" not in str(err.value)
