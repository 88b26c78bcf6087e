"""A worker that runs jobs from two manifests whose folders each hold a `models.py`
builds each job's model from its own folder (a warm worker, or the process that spawned
it, must not hand one manifest the other's module)."""

from __future__ import annotations

import sys
from pathlib import Path

from parity_gate.engine.factory import import_factory_module as _import_factory_module


def test_each_job_imports_its_own_folders_module(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pg_same_name.py").write_text(f"WHO = {name!r}\n")
    saved = list(sys.path)
    try:
        first = _import_factory_module("pg_same_name", [str(tmp_path / "a")])
        assert first.WHO == "a"
        second = _import_factory_module("pg_same_name", [str(tmp_path / "b")])
        assert second.WHO == "b"
        assert sys.path[0] == str(tmp_path / "b")  # the job's folder first, once
        assert sys.path.count(str(tmp_path / "b")) == 1
        again = _import_factory_module("pg_same_name", [str(tmp_path / "b")])
        assert again is second  # the same file is not imported twice
    finally:
        sys.path[:] = saved
        sys.modules.pop("pg_same_name", None)
