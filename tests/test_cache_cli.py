"""`parity-gate cache prune|info` and `run --cache-dir/--no-cache`, in process (no worker
starts: every command here stops before a run), on real entries written by ExportCache."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from parity_gate import cli
from parity_gate.engine import cache as export_cache
from parity_gate.engine.cache import megabytes as mb

DAY = 86400.0


def entry(root: Path, kind: str, name: str, size: int, age_s: float) -> Path:
    """A real cache entry of about `size` bytes, last used `age_s` ago."""
    key = export_cache.key_of(name)
    stored = export_cache.ExportCache(root).put(kind, key, {"model.onnx": os.urandom(size)})
    used = time.time() - age_s
    os.utime(stored.file("entry.json"), (used, used))
    return stored.folder


def entry_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err.splitlines()


def test_prune_by_age_removes_only_entries_unused_for_longer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = entry(tmp_path, "export", "old", 3000, 10 * DAY)
    week = entry(tmp_path, "reference", "week", 2000, 6 * DAY)
    new = entry(tmp_path, "export", "new", 1000, 60)
    sizes = {f: entry_bytes(f) for f in (old, week, new)}
    code, err = run(capsys, "cache", "prune", "--cache-dir", str(tmp_path), "--older-than", "7d")
    assert code == 0
    assert not old.exists() and week.is_dir() and new.is_dir()
    assert err == [f"parity-gate cache: removed 1 entries, freed {mb(sizes[old])}; kept 2 "
                   f"entries, {mb(sizes[week] + sizes[new])}"]
    code, err = run(capsys, "cache", "prune", "--cache-dir", str(tmp_path), "--older-than", "12h")
    assert not week.exists() and new.is_dir()
    assert err == [f"parity-gate cache: removed 1 entries, freed {mb(sizes[week])}; kept 1 "
                   f"entries, {mb(sizes[new])}"]


def test_prune_without_flags_drops_what_is_unused_for_30_days(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(cli.CACHE_ENV, str(tmp_path / "cache"))  # as `run` finds it
    stale = entry(tmp_path / "cache", "export", "stale", 100, 31 * DAY)
    month = entry(tmp_path / "cache", "export", "month", 100, 29 * DAY)
    code, err = run(capsys, "cache", "prune")
    assert code == 0 and not stale.exists() and month.is_dir()
    assert err[0].startswith("parity-gate cache: removed 1 entries")


def test_prune_by_size_removes_the_least_recently_used_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = entry(tmp_path, "export", "a", 4000, 3 * DAY)
    b = entry(tmp_path, "export", "b", 4000, 2 * DAY)
    c = entry(tmp_path, "reference", "c", 4000, 1 * DAY)
    # Reading `a` is a use: it becomes the most recent, so `b` is now the oldest.
    assert export_cache.ExportCache(tmp_path).get("export", export_cache.key_of("a"))
    limit = entry_bytes(a) + entry_bytes(c)
    code, err = run(capsys, "cache", "prune", "--cache-dir", str(tmp_path),
                    "--max-size", f"{limit}B")
    assert code == 0
    assert a.is_dir() and not b.exists() and c.is_dir()
    assert err == [f"parity-gate cache: removed 1 entries, freed {mb(entry_bytes(a))}; "
                   f"kept 2 entries, {mb(limit)}"]
    code, err = run(capsys, "cache", "prune", "--cache-dir", str(tmp_path), "--max-size", "0")
    assert not a.exists() and not c.exists()
    assert err[0].endswith("kept 0 entries, 0.0 MB")


@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--older-than", "7", "expected an age: a number and one of s, m, h, d, w"),
    ("--older-than", "7x", "expected an age"),
    ("--older-than", "-1d", "expected an age"),
    ("--older-than", "1d12h", "expected an age"),
    ("--max-size", "2XB", "expected a size: a number and B, kB, MB, GB, TB"),
    ("--max-size", "lots", "expected a size"),
    ("--max-size", "1.5.5G", "expected a size"),
    ("--max-size", "-2GB", "expected a size"),
])
def test_bad_prune_values_are_one_line_exit_2(flag: str, value: str, expected: str,
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    kept = entry(tmp_path, "export", "kept", 10, 100 * DAY)
    code, err = run(capsys, "cache", "prune", "--cache-dir", str(tmp_path), f"{flag}={value}")
    assert code == 2
    assert err == [f"{flag}: got {value!r} ({expected}" + err[0].split(expected, 1)[1]]
    assert kept.is_dir()  # nothing removed on a bad flag


@pytest.mark.parametrize(("text", "size"), [
    ("2GB", 2 * 10**9), ("500MiB", 500 * 2**20), ("10G", 10 * 2**30), ("500mb", 500 * 10**6),
    ("1.5K", 1536), ("0", 0), ("4096", 4096), ("3 TB", 3 * 10**12), ("1kB", 1000),
])
def test_sizes_parse_as_documented(text: str, size: int) -> None:
    assert cli.parse_size(text) == size


def test_ages_parse_as_documented() -> None:
    assert [cli.parse_age(a) for a in ("7d", "12h", "30m", "3600s", "2w", "1.5h")] == [
        7 * DAY, 12 * 3600, 1800, 3600, 14 * DAY, 5400]


def test_a_cache_that_does_not_exist_has_nothing_to_prune(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "cache", "prune", "--cache-dir", str(tmp_path / "none"),
                    "--max-size", "1GB")
    assert code == 0
    assert err == [f"parity-gate cache: nothing to prune: {tmp_path / 'none'} does not exist"]
    assert not (tmp_path / "none").exists()
    (tmp_path / "file").write_text("x")
    code, err = run(capsys, "cache", "prune", "--cache-dir", str(tmp_path / "file"))
    assert code == 2
    assert err == [f"--cache-dir: {tmp_path / 'file'} is not a folder (expected the export "
                   "cache's folder)"]


def test_info_counts_entries_and_bytes_by_kind(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    e1 = entry(tmp_path, "export", "e1", 300_000, 0)
    e2 = entry(tmp_path, "export", "e2", 200_000, 0)
    r1 = entry(tmp_path, "reference", "r1", 50_000, 0)
    (tmp_path / "tmp" / "half-written").mkdir(parents=True)  # a run's staging: not an entry
    exports, refs = entry_bytes(e1) + entry_bytes(e2), entry_bytes(r1)
    code, err = run(capsys, "cache", "info", "--cache-dir", str(tmp_path))
    assert code == 0
    assert err == [f"parity-gate cache: {tmp_path}: 3 entries, {mb(exports + refs)} "
                   f"(export: 2, {mb(exports)}; reference: 1, {mb(refs)})"]


def test_run_refuses_a_cache_dir_it_cannot_use_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no parity.yml here: the cache is checked first
    (tmp_path / "file").write_text("x")
    code, err = run(capsys, "run", "--cache-dir", "file")
    assert (code, err) == (2, ["--cache-dir: file is a file (expected a folder for the export "
                               "cache)"])
    code, err = run(capsys, "run", "--cache-dir", "file/sub")
    assert (code, err) == (2, ["--cache-dir: file is a file (expected a folder for the export "
                               "cache)"])
    monkeypatch.setenv(cli.CACHE_ENV, "file")
    code, err = run(capsys, "run")
    assert (code, err) == (2, [f"{cli.CACHE_ENV}: file is a file (expected a folder for the "
                               "export cache)"])
    code, err = run(capsys, "run", "--cache-dir", "new", "--no-cache")
    assert code == 2 and len(err) == 1 and "--no-cache: not allowed with argument --cache-dir" \
        in err[0]
    code, err = run(capsys, "run", "--no-cache")  # the env's file is not looked at
    assert code == 2 and err[0].startswith("parity.yml: no such file")


def test_usable_cores_follow_the_affinity_mask() -> None:
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs CPU affinity and two cores")
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert cli.usable_cores() == 1  # os.cpu_count() would say every core
    finally:
        os.sched_setaffinity(0, before)
    assert cli.usable_cores() == len(before)


def test_the_cli_default_is_the_cache_modules() -> None:
    assert cli.DEFAULT_CACHE_DIR == export_cache.DEFAULT_DIR
