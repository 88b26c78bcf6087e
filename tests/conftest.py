"""Suite-wide rules: the two lanes, and every results document must match the shipped schema.

Lanes: a test that starts a process (a worker pool, the CLI's run, a subprocess,
a shell) or exports a real model is marked `process`; every other test is
`pure` and must not start one: in a pure test, starting a process fails it
(an audit hook on subprocesses, and a guard on multiprocessing), so the mark
cannot drift. `pytest -m pure` is the fast lane; plain `pytest` runs both.

Tests write reports into pytest's temporary folders (module runs, the op sweep,
merged shards, the Action's entrypoint); at the end of the session each JSON
file there that carries a `schema_version` is validated against
`parity_gate/results.schema.json`, and the session fails if one does not match.
"""

from __future__ import annotations

import json
import multiprocessing.process
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from parity_gate.model.schema import RESULTS_SCHEMA_FILE

_PROCESS_EVENTS = ("subprocess.Popen", "os.posix_spawn", "os.system", "os.exec", "os.fork",
                   "os.spawn")
_guard: dict[str, str | None] = {"test": None}


def _audit(event: str, _args: Any) -> None:
    test = _guard["test"]
    if test is not None and event.startswith(_PROCESS_EVENTS):
        raise RuntimeError(f"{test} is a pure test but started a process ({event}); "
                           "mark it @pytest.mark.process")


sys.addaudithook(_audit)

# One export cache for the whole session, never the working folder's `.parity-cache`: runs
# of the same module in several tests share their exports, as a team's CI runs would.
os.environ.setdefault("PARITY_GATE_CACHE_DIR", tempfile.mkdtemp(prefix="parity-test-cache-"))


# Module-scoped fixtures that run the real gate (set up before the per-test guard).
PROCESS_FIXTURES = {"example_run", "faulty_run", "real", "runs"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
        if item.get_closest_marker("process") is None:
            item.add_marker(pytest.mark.pure)


@pytest.fixture(autouse=True)
def _pure_tests_start_no_process(request: pytest.FixtureRequest,
                                 monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("process") is not None:
        yield
        return
    start = multiprocessing.process.BaseProcess.start

    def refuse(self: multiprocessing.process.BaseProcess) -> None:
        raise RuntimeError(f"{request.node.nodeid} is a pure test but started a worker "
                           "process; mark it @pytest.mark.process")

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    _guard["test"] = request.node.nodeid
    try:
        yield
    finally:
        _guard["test"] = None
        monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    try:
        base = factory.getbasetemp()
    except (OSError, ValueError):
        return
    validator = jsonschema.Draft202012Validator(json.loads(RESULTS_SCHEMA_FILE.read_text()))
    checked, bad = 0, []
    for path in Path(base).rglob("*.json"):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("schema_version") != 2:
            continue
        checked += 1
        error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
        if error is not None:
            bad.append(f"{path}: {'/'.join(map(str, error.absolute_path))}: {error.message}")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"results schema: {checked} results files validated, "
                            f"{len(bad)} invalid")
        for line in bad[:20]:
            reporter.write_line(f"  {line}")
    if bad:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="module")
def hf_offline() -> Iterator[None]:
    """transformers models are built from configs here: nothing may reach the hub."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield
