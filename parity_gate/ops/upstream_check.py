"""Run upstream repros and find each lowering, in a process of its own (it imports torch).

`python -m parity_gate.ops.upstream_check` reads one JSON request on stdin:
`{"repros": [{"key", "script", "stages"}], "overloads": [...]}` and writes one
JSON line per answer on stdout as it goes, so the caller keeps what finished
if a repro kills the process (a crash is that defect's symptom): `{"key",
"stage", "error", "output", "nodes"}` per repro, then `{"lowerings": {overload:
[function, "file:line"]}}`. A script runs as `__main__` in a fresh namespace;
the stage is the one its failing line belongs to ("ok": it finished).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import os
import select
import signal
import subprocess
import sys
import sysconfig
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from parity_gate.engine.sandbox import without_credentials

FILENAME = "<upstream-repro>"
NODE_LIMIT = 12


def run_one(script: str, stages: dict[int, str]) -> dict[str, Any]:
    """Execute one repro; where it failed (by line), its error and what it printed."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    out = io.StringIO()
    stage, error = "ok", ""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(script, FILENAME, "exec"), namespace)
        except BaseException as exc:
            lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
                     if f.filename == FILENAME]
            line = (lines[-1] or 0) if lines else 0
            stage = stages.get(line, f"line {line}")
            error = f"{type(exc).__name__}: {str(exc).strip()}"
            if len(error) > 3000:  # the exporter's summary of the cause comes last
                error = f"{error[:1500]} ... {error[-1500:]}"
    return {"stage": stage, "error": error, "output": out.getvalue()[-4000:],
            "nodes": _nodes(namespace.get("onnx_program"))}


def _nodes(program: Any) -> list[str]:
    """The exported graph's nodes as ONNX text (a one-op model has few)."""
    if program is None:
        return []
    try:
        import onnx

        graph = program.model_proto.graph
        return [onnx.printer.to_text(n).strip() for n in graph.node[:NODE_LIMIT + 1]]
    except Exception:
        return []


def lowering(overload: str) -> tuple[str, str] | None:
    """The torchlib function registered for an ATen overload, and its `file:line` relative
    to the installed package's site-packages (`onnxscript/.../core.py:1234`)."""
    from onnxscript.function_libs.torch_lib import (
        ops,  # noqa: F401 - registers them
        registration,
    )

    parts = overload.replace("::", ".").split(".")
    if len(parts) < 2:
        return None
    namespace, name = parts[0], parts[1]
    rest = parts[2] if len(parts) > 2 else "default"
    registry = registration.default_registry
    for key in (f"{namespace}::{name}.{rest}", f"{namespace}::{name}"):
        if key in registry and registry[key].overloads:
            func = registry[key].overloads[0]
            py = getattr(func, "func", None) or getattr(func, "function", None)
            if py is None:
                return str(getattr(func, "name", key)), ""
            path = Path(inspect.getsourcefile(py) or "")
            line = inspect.getsourcelines(py)[1]
            return py.__name__, f"{_relative(path)}:{line}"
    return None


def _relative(path: Path) -> str:
    for root in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            continue
    return path.as_posix()


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        import onnxruntime  # noqa: F401
        import torch  # noqa: F401 - imported once, before the first script
    except ImportError as exc:  # a job without the exporter: say so once, run nothing
        print(json.dumps({"unavailable": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 0

    for item in request.get("repros", []):
        stages = {int(k): v for k, v in item.get("stages", {}).items()}
        answer = run_one(item["script"], stages)
        print(json.dumps({"key": item["key"], **answer}), flush=True)
    found: dict[str, list[str]] = {}
    for overload in request.get("overloads", []):
        try:
            hit = lowering(overload)
        except Exception:
            hit = None
        if hit is not None:
            found[overload] = list(hit)
    print(json.dumps({"lowerings": found}), flush=True)
    return 0



# ---- the caller's side (torch-free): run them in that process, survive a crash


@dataclass
class Checked:
    """What the repro process answered: per key, and the lowerings it found."""

    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    lowerings: dict[str, list[str]] = field(default_factory=dict)
    ran: int = 0        # scripts run in the process (the rest came from the cache)
    unavailable: str = ""  # why nothing could run here (torch or onnxruntime missing)


def check_all(repros: list[dict[str, Any]], overloads: list[str], cache: Path | None = None,
              salt: str = "", per_script_s: float = 120.0) -> Checked:
    """Run `repros` ({"key", "script", "stages"}) in a torch process, one after another;
    a script that kills it is answered "died" (the signal) and the rest go on in a new
    one. Answers are cached by script (and `salt`: the versions) in `cache`."""
    done = Checked()
    stored = _read_cache(cache)
    todo = []
    for item in repros:
        digest = hashlib.sha256(f"{salt}\n{item['script']}".encode()).hexdigest()
        if digest in stored:
            done.answers[item["key"]] = stored[digest]
        else:
            todo.append((digest, item))
    lowerings = [o for o in overloads if f"lowering:{salt}:{o}" not in stored]
    for o in overloads:
        hit = stored.get(f"lowering:{salt}:{o}")
        if hit and hit.get("at"):
            done.lowerings[o] = hit["at"]
    while todo or lowerings:
        batch = [item for _, item in todo]
        got, finished = _one_process(batch, lowerings, per_script_s)
        if "" in got:  # nothing can run in this environment: nothing is cached either
            done.unavailable = str(got[""]["error"])
            return done
        done.ran += len(got)
        for digest, item in todo:
            if item["key"] in got:
                done.answers[item["key"]] = stored[digest] = got[item["key"]]
        if finished is not None:
            for o in lowerings:
                stored[f"lowering:{salt}:{o}"] = {"at": finished.get(o, [])}
                if o in finished:
                    done.lowerings[o] = finished[o]
            lowerings = []
        todo = [(d, i) for d, i in todo if i["key"] not in done.answers]
    _write_cache(cache, stored)
    return done


def _one_process(batch: list[dict[str, Any]], overloads: list[str], per_script_s: float
                 ) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]] | None]:
    """Answers until the process ends; the script it died on is answered "died"."""
    proc = subprocess.Popen([sys.executable, "-m", "parity_gate.ops.upstream_check"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env=without_credentials(os.environ))  # no token reaches a repro
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"repros": batch, "overloads": overloads}))
    proc.stdin.close()
    got: dict[str, dict[str, Any]] = {}
    lowerings = None
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], per_script_s)
        line = proc.stdout.readline() if ready else None
        if line is None:  # a script that hangs: killed, answered as a timeout
            proc.kill()
            proc.wait()
            _answer_death(batch, got, "timeout")
            break
        if not line:
            code = proc.wait()
            if len(got) < len(batch):
                _answer_death(batch, got, _signal_name(code))
            elif lowerings is None:
                lowerings = {}
            break
        data = json.loads(line)
        if "unavailable" in data:
            proc.wait()
            return {"": {"error": data["unavailable"]}}, None
        if "lowerings" in data:
            lowerings = data["lowerings"]
        else:
            got[data["key"]] = {k: v for k, v in data.items() if k != "key"}
    return got, lowerings


def _answer_death(batch: list[dict[str, Any]], got: dict[str, dict[str, Any]], how: str
                  ) -> None:
    pending = next((i for i in batch if i["key"] not in got), None)
    if pending is not None:
        got[pending["key"]] = {"stage": "died", "error": f"the process died ({how})",
                               "output": "", "nodes": []}


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    stage: str
    error: str
    output: str
    nodes: list[str]


class _Lowering(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    at: list[str]


_CACHE = TypeAdapter(dict[str, dict[str, Any]])


def _read_cache(path: Path | None) -> dict[str, Any]:
    """The cached answers, validated as a whole: a file with one wrong entry is dropped
    (one warning; every script runs again), never half-trusted into a draft."""
    if path is None or not path.exists():
        return {}
    where: tuple[Any, ...] = ()
    try:
        data = _CACHE.validate_json(path.read_bytes())
        for key, entry in data.items():
            where = (key,)
            (_Lowering if key.startswith("lowering:") else _Answer).model_validate(entry)
    except (OSError, ValidationError) as err:
        first = err.errors()[0] if isinstance(err, ValidationError) else None
        inner: tuple[Any, ...] = tuple(first["loc"]) if first else ()
        msg = first["msg"] if first else str(err)
        loc = ".".join(str(p) for p in (*where, *inner))
        print(f"parity-gate: warning: {path}: malformed repro-check cache "
              f"({loc + ': ' if loc else ''}{msg}); checking every repro again",
              file=sys.stderr)
        return {}
    return data


def _write_cache(path: Path | None, data: dict[str, Any]) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
    except OSError:  # a cache that cannot be written is only a slower next run
        pass


if __name__ == "__main__":
    raise SystemExit(main())
