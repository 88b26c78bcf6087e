"""`parity-gate check` resolves every module's factory (imports its module, finds the
callable) without calling it, so a misspelt or missing factory is a manifest error before
any run rather than an error outcome once a worker starts.

The imports run user code, so they run in the sandbox the workers use (engine.sandbox: own
process group, no credential, a deadline), all factories of a manifest in one process:
importing torch and the team's package once is most of the cost. The child part of this
module needs only the stdlib, `errors` and `model.text`; it writes one JSON line per factory
as it goes, so a module whose import kills the process is the first one without a line
(named, and the rest checked in a fresh process).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import json
import pkgutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parity_gate.errors import ended_how
from parity_gate.model.text import strip_control

if TYPE_CHECKING:
    from parity_gate.manifest.models import Manifest

# Importing a package that imports torch and transformers takes seconds, not minutes.
TIMEOUT_S = 300.0
EXPECTED = "expected a function or class that returns the nn.Module"


def factory_problems(manifest: Manifest, path: Path | str,
                     timeout_s: float = TIMEOUT_S) -> list[str]:
    """One located line (`file:line:col: modules[i].factory: ...`) per factory that does not
    resolve to a callable; [] when every one does."""
    from parity_gate.engine import sandbox

    base = Path(path).resolve().parent
    roots = [str((base / p).resolve()) for p in manifest.python_path] + [str(base)]
    factories = [m.factory for m in manifest.modules]
    limits = [int(m.worker_memory) for m in [manifest.defaults, *manifest.modules]
              if m.worker_memory]
    verdicts: list[str | None] = []
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="parity-gate-check-") as tmp:
        request, answers = Path(tmp) / "request.json", Path(tmp) / "answers.jsonl"
        while len(verdicts) < len(factories):  # again after the one whose import killed it
            request.write_text(json.dumps({"paths": roots,
                                           "factories": factories[len(verdicts):]}))
            answers.unlink(missing_ok=True)
            ended = sandbox.run([sys.executable, "-c", _CHILD, _package_root(), str(request),
                                 str(answers)], base, max(0.0, deadline - time.monotonic()),
                                max(limits, default=None))
            verdicts += _answers(answers)[:len(factories) - len(verdicts)]
            if len(verdicts) < len(factories):
                verdicts.append(f"importing {factories[len(verdicts)].split(':')[0]!r} "
                                f"{_how_it_ended(ended, timeout_s)} (expected the module to "
                                "import as a worker imports it)")
                if ended.returncode is None:
                    break  # out of time: the rest stay unchecked
    return [f"{module.locate('factory')}: {_line(problem)}"  # out of time: fewer verdicts
            for module, problem in zip(manifest.modules, verdicts, strict=False) if problem]


def _answers(path: Path) -> list[str | None]:
    """The child's verdicts, in order, up to the first line it did not finish."""
    out: list[str | None] = []
    with contextlib.suppress(OSError):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                problem = json.loads(line)["problem"]
            except (ValueError, KeyError, TypeError):
                break
            if problem is not None and not isinstance(problem, str):
                break
            out.append(problem)
    return out


def _how_it_ended(ended: Any, timeout_s: float) -> str:
    code = ended.returncode
    if code is None:
        return f"did not finish within {timeout_s:g} s"
    if code < 0:
        try:
            how = f"killed the process ({signal.Signals(-code).name})"
        except ValueError:
            how = f"killed the process (signal {-code})"
    else:
        how = f"ended the process with status {code}"
    last = next((ln for ln in map(_line, reversed(ended.stderr.splitlines())) if ln), "")
    return how + (f": {last[-200:]}" if last else "")


def _line(text: str) -> str:
    """User code's words (an exception, its stderr) on one terminal line, no escapes."""
    return " ".join(strip_control(text).split())


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


# The child: the gate's package found, then dropped from the path again, so that the
# factories' modules are found as a worker finds them (the job's folders first).
_CHILD = ("import sys; sys.path.append(sys.argv[1]); "
          "from parity_gate.engine.factory_check import resolve_all; "
          "sys.path.remove(sys.argv[1]); resolve_all(sys.argv[2], sys.argv[3])")


def resolve_all(request: str, answers: str) -> None:
    """Child: resolve each factory of `request`, one JSON line each to `answers`."""
    asked = json.loads(Path(request).read_text(encoding="utf-8"))
    if sys.path and sys.path[0] in ("", "."):  # `python -c` puts the working folder first
        del sys.path[0]
    paths = [str(p) for p in asked["paths"]]
    sys.path[:0] = paths
    failed: dict[str, str] = {}  # a module that failed to import fails every factory in it
    with open(answers, "w", encoding="utf-8") as out:
        for factory in asked["factories"]:
            out.write(json.dumps({"problem": resolve(factory, paths, failed)}) + "\n")
            out.flush()


def resolve(factory: str, paths: Sequence[str], failed: dict[str, str]) -> str | None:
    """What is wrong with `factory` (`pkg.mod:attr.path`) in words, None when it names a
    callable. Imports its module; calls nothing."""
    module_name, _, attr = factory.partition(":")
    if module_name not in failed:
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            failed[module_name] = _not_found(module_name, exc, paths)
        except BaseException as exc:  # the user's module: it may exit or interrupt too
            failed[module_name] = f"importing {module_name!r} {ended_how(exc)}" + (
                " (expected it to import without error)" if isinstance(exc, Exception)
                else "")
    if module_name in failed:
        return failed[module_name]
    target: Any = sys.modules[module_name]
    holder = f"module {module_name!r}"
    parts = attr.split(".")
    for k, part in enumerate(parts):
        try:
            target = getattr(target, part)
        except AttributeError:
            hint = _close(part, _public(target, callables=k == len(parts) - 1))
            return f"{holder} has no attribute {part!r}{hint} ({EXPECTED})"
        except BaseException as exc:  # a property or a module __getattr__ of the user's
            return f"reading {part!r} of {holder} {ended_how(exc)} ({EXPECTED})"
        holder = f"'{module_name}:{'.'.join(parts[:k + 1])}'"
    if not callable(target):
        return f"{factory!r} is a {type(target).__name__}, not callable ({EXPECTED})"
    return None


def _not_found(module_name: str, exc: ModuleNotFoundError, paths: Sequence[str]) -> str:
    """The factory's own module (or a package above it) missing, with the closest sibling;
    a module it imports missing is a dependency the environment lacks."""
    missing = exc.name or ""
    if missing and not (module_name == missing or module_name.startswith(missing + ".")):
        return (f"importing {module_name!r} failed: its dependency {missing!r} is not "
                "installed (expected every package the factory imports to be installed "
                "where the gate runs)")
    parent, _, leaf = (missing or module_name).rpartition(".")
    try:
        where = getattr(sys.modules.get(parent), "__path__", None) if parent else list(paths)
        siblings = [m.name for m in pkgutil.iter_modules(where)] if where is not None else []
    except Exception:
        siblings = []
    return (f"no module named {missing or module_name!r}{_close(leaf, siblings)} (expected a "
            "module under the manifest folder or `python_path`, or an installed package)")


def _public(holder: Any, callables: bool) -> list[str]:
    """Public names of `holder` (callables only, when asked), read without calling a
    module's lazy __getattr__."""
    names: list[str] = []
    try:
        listed = dir(holder)
    except Exception:  # a module's own __dir__
        return names
    for name in listed:
        if name.startswith("_"):
            continue
        try:
            value = inspect.getattr_static(holder, name)
        except AttributeError:  # a lazy attribute: it may well be one
            names.append(name)
            continue
        if not callables or callable(value) or isinstance(value, (staticmethod, classmethod)):
            names.append(name)
    return names


def _close(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""
