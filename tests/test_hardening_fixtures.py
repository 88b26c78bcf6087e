"""File fixture sets obey `max_case_bytes`, sized from their files' array headers: the file a
worker loads whole and the rows a case takes, refused by `check` and by `run` before any
worker starts, one located line at the set's `path`; and `check` never loads whole arrays
to validate them (a 2 MB archive can hold gigabytes of zeros)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from parity_gate.cli import main

MANIFEST = textwrap.dedent("""\
    version: 1
    defaults:
      batch_sizes: [1, 4]
      max_case_bytes: 1MiB
    fixtures:
      recorded:
        kind: file
        path: DATA
    modules:
      - name: m
        factory: models:build
        inputs: [{name: x}]
        fixtures: [recorded]
    """)
RAISE = "or raise `max_case_bytes` in `defaults` or in module 'm', e.g. `max_case_bytes: "


def write(tmp_path: Path, data: str, *, old: str = "", new: str = "") -> Path:
    (tmp_path / "models.py").write_text("def build():\n    return None\n")
    path = tmp_path / "parity.yml"
    path.write_text(MANIFEST.replace("DATA", data).replace(old, new, 1))
    return path


def gate(command: str, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Exit code and stderr lines (without the manifest's path) of `check` or `run`."""
    out = path.parent / "out"
    code = main([command, str(path)] + (["--out", str(out)] if command == "run" else []))
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert not out.exists()  # refused before anything ran or was written
    return code, [ln.removeprefix(f"{path}:") for ln in err.splitlines() if ln.strip()]


def save(path: Path, array: np.ndarray) -> None:
    if path.suffix == ".npy":
        np.save(path, array)
    elif path.suffix == ".npz":
        np.savez_compressed(path, x=array)
    else:
        import torch

        torch.save({"x": torch.from_numpy(array)}, path)


def zeros_npz(path: Path, shape: tuple[int, ...], *, data_bytes: int | None = None) -> None:
    """An .npz whose member `x` is float32 zeros of `shape`, deflated and written a chunk
    at a time (a big one costs no memory here); `data_bytes` cuts its data short."""
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    left = int(np.prod(shape)) * 4 if data_bytes is None else data_bytes
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, \
            z.open("x.npy", "w", force_zip64=True) as f:
        np.lib.format.write_array_header_1_0(f, header)
        while left:
            f.write(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize(("data", "what"), [
    ("data.npz", "array 'x'"), ("data.npy", "its array"), ("data.pt", "array 'x'")])
def test_a_fixture_file_over_the_bound_is_refused_at_its_path(
        command: str, data: str, what: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """2 MiB of float32 rows under a 1 MiB bound: a worker would load all of it."""
    save(tmp_path / data, np.zeros((512, 1024), np.float32))
    code, lines = gate(command, write(tmp_path, data), capsys)
    assert code == 2
    assert lines == [
        f"8:11: fixtures.recorded.path: {data}: {what} (shape [512, 1024], float32) holds "
        "2.0MiB (2097152 bytes), which a run loads whole, over `max_case_bytes` 1.0MiB of "
        f"module 'm' (expected a smaller file, {RAISE}2MiB`)"]


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_file_fixture_at_a_billion_batch_is_refused_before_any_worker(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 128-byte file whose b10**9 case needs 30 GB: the run was an internal error (its
    export example, at the largest batch); now a located line, and no worker starts."""
    save(tmp_path / "data.npz", np.ones((4, 8), np.float32))
    path = write(tmp_path, "data.npz", old="  max_case_bytes: 1MiB\n", new="")
    path.write_text(path.read_text().replace("[1, 4]", "[1, 1000000000]"))
    code, lines = gate(command, path, capsys)
    assert code == 2
    assert lines == [
        "7:11: fixtures.recorded.path: batch size 1000000000: a case of module 'm' on fixture "
        "set 'recorded' (float32) would hold 29.8GiB of inputs (32000000000 bytes: rows of "
        "array 'x' (shape [4, 8], float32)), over `max_case_bytes` 2.0GiB (expected a smaller "
        f"batch size, {RAISE}30GiB`)"]


def test_rows_wrap_and_floats_take_the_module_dtype(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 4 KiB file, 1000 samples of one row each in float64: 2 MB a case, over 1 MiB."""
    save(tmp_path / "data.npz", np.ones((4, 256), np.float32))
    path = write(tmp_path, "data.npz", old="path: data.npz",
                 new="path: data.npz\n    samples: 1000")
    path.write_text(path.read_text().replace("max_case_bytes: 1MiB",
                                             "max_case_bytes: 1MiB\n  dtypes: [float32, float64]"))
    code, lines = gate("check", path, capsys)
    assert code == 2
    assert lines == [
        "9:11: fixtures.recorded.path: even at batch size 1 a case of module 'm' on fixture set "
        "'recorded' (float64) would hold 2.0MiB of inputs (2048000 bytes: rows of array 'x' "
        "(shape [4, 256], float32)), over `max_case_bytes` 1.0MiB (expected smaller rows or "
        f"fewer `samples`, {RAISE}2MiB`)"]


def test_a_truncated_member_is_found_from_its_header(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zeros_npz(tmp_path / "data.npz", (1000, 8), data_bytes=100)
    code, lines = gate("check", write(tmp_path, "data.npz"), capsys)
    assert code == 2
    assert lines == [
        f"8:11: fixtures.recorded.path: {tmp_path / 'data.npz'}: member 'x' is empty or "
        "truncated (its header says shape [1000, 8], float32: 32000 bytes, 100 follow) "
        "(expected a NumPy .npz archive (np.savez))"]


# In a process of its own: what `check` imports, then its peak memory before and after.
PROBE = """\
import resource, sys
import parity_gate.engine.fixtures, parity_gate.manifest.load
from parity_gate.cli import main
if sys.argv[1].endswith(".pt"):
    import torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = main(["check", sys.argv[1]])
print(code, before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.process
@pytest.mark.parametrize("data", ["data.npz", "data.pt"])
def test_check_validates_a_big_file_without_holding_it(data: str, tmp_path: Path) -> None:
    """64 MiB of zeros (in a 64 KB archive, or a .pt) within a raised bound: `check`
    passes it and its peak memory hardly moves (it held the whole array)."""
    if data.endswith(".npz"):
        zeros_npz(tmp_path / data, (1 << 14, 1024))
    else:
        save(tmp_path / data, np.zeros((1 << 14, 1024), np.float32))
    path = write(tmp_path, data, old="1MiB", new="1GiB")
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True,
                          text=True, timeout=120)
    code, before, after = map(int, done.stdout.split()[-3:])
    assert code == 0 and "1 fixture file(s) read" in done.stdout, done.stderr
    assert after - before < 16 << 10, f"peak RSS {before} KiB before check, {after} KiB after"
