"""The side effects of a probe: an isolated environment per package set, one run of the
selected cases in it, its results.json read back and judged.

An environment is an overlay: a fresh venv whose site-packages first holds the probed
versions and then, through a `.pth` file, the base environment's packages (read, never
written), so a probe installs only what differs from where bisect runs, and a
15 MB onnxruntime wheel, not torch, is the price of a probe. Installs go through pip,
whose resolver sees the shared packages as installed and only adds what the probed
versions need (uv, when present, creates the venvs; `uv pip` resolves as if the venv
were empty and would copy torch, numpy and the rest into each one). Environments are
cached by their package set under the cache folder; wheels in pip's own cache.
Nothing is installed into the environment bisect runs in.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import filelock
from packaging.utils import canonicalize_name

import parity_gate
from parity_gate.bisect.judge import failure_signature, flaky_cases, judge
from parity_gate.bisect.sets import same_release
from parity_gate.errors import UserError
from parity_gate.model.bisect import Phase, Probe, Verdict
from parity_gate.model.results import CaseResult, RunResult

# Packages whose probe would download a multi-GB build: refused unless --allow-heavy.
HEAVY = {"torch": "a multi-GB build", "onnxruntime-gpu": "a CUDA build",
         "torchvision": "it pins its own torch"}
DEFAULT_CACHE = Path.home() / ".cache" / "parity-gate" / "bisect"
BASE_PTH = "_parity_gate_base.pth"


class Installer(Protocol):
    """Makes an environment holding `pins` (over the base one): its python, or why not."""

    def prepare(self, pins: Mapping[str, str]) -> tuple[Path | None, str]: ...


class Runner(Protocol):
    """Runs `cases` with `python`: each case's result by id, or why none."""

    def run(self, python: Path, name: str,
            cases: list[str]) -> tuple[dict[str, CaseResult] | None, str]: ...


def installed(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The versions of `names` installed where bisect runs (the overlay's base)."""
    from importlib import metadata

    out: dict[str, str] = {}
    for name in names:
        try:
            out[canonicalize_name(name)] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def refusal(pins: Mapping[str, str], base: Mapping[str, str], allow_heavy: bool) -> str:
    """Why this set may not be probed here ("" when it may): a heavy package that would be
    installed because the base environment holds another release of it (`2.13.0+cpu`
    running is release 2.13.0: reused, never heavy)."""
    if allow_heavy:
        return ""
    heavy = [f"{p} {v} ({HEAVY[p]})" for p, v in pins.items()
             if p in HEAVY and not same_release(base.get(p), v)]
    return (f"refused: installing {', '.join(heavy)}; --allow-heavy allows it"
            if heavy else "")


@dataclass
class OverlayInstaller:
    """venv + `.pth` onto the base environment's site-packages + pip for what differs."""

    root: Path
    base_python: str = sys.executable
    index_args: list[str] = field(default_factory=list)  # e.g. --index-url for the installs
    timeout: float = 900.0

    def _key(self, todo: Mapping[str, str]) -> str:
        text = json.dumps([sorted(todo.items()), self.base_python, sys.prefix,
                           self.index_args])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def prepare(self, pins: Mapping[str, str]) -> tuple[Path | None, str]:
        base = installed(list(pins))
        todo = {p: v for p, v in sorted(pins.items()) if not same_release(base.get(p), v)}
        env = self.root / "envs" / self._key(todo)
        env.parent.mkdir(parents=True, exist_ok=True)
        # two bisects sharing the cache build it once (filelock: portable, unlike fcntl)
        with filelock.FileLock(env.parent / f"{env.name}.lock", timeout=self.timeout):
            return self._prepare(env, todo)

    def _prepare(self, env: Path, todo: Mapping[str, str]) -> tuple[Path | None, str]:
        python = env / "bin" / "python"
        if (env / ".ready").is_file() and python.exists():
            return python, ""
        shutil.rmtree(env, ignore_errors=True)
        uv = shutil.which("uv")
        make = ([uv, "venv", "-q", "--python", self.base_python, str(env)] if uv else
                [self.base_python, "-m", "venv", "--without-pip", str(env)])
        why = _call(make, "cannot create the environment", 300)
        if why:
            return None, why
        purelib = Path(subprocess.run(
            [str(python), "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip())
        shared = sysconfig.get_paths()["purelib"]
        (purelib / BASE_PTH).write_text(f"import site; site.addsitedir({shared!r})\n")
        if todo:
            spec = [f"{p}=={v}" for p, v in todo.items()]
            cmd = [self.base_python, "-m", "pip", "--python", str(python), "install", "-q",
                   "--disable-pip-version-check", *self.index_args, *spec]
            why = _call(cmd, "cannot install " + " ".join(spec), self.timeout,
                        {"PIP_CONSTRAINT": "", "PIP_REQUIRE_VIRTUALENV": ""})
            if why:
                return None, why
        got = subprocess.run([str(python), "-c", "import json,sys\nfrom importlib import "
                              "metadata as m\nprint(json.dumps({n: m.version(n) for n in "
                              "sys.argv[1:]}))", *todo], capture_output=True, text=True)
        seen = json.loads(got.stdout or "{}") if got.returncode == 0 else {}
        wrong = [f"{p} {seen.get(p, 'missing')} (wanted {v})" for p, v in todo.items()
                 if not same_release(seen.get(p), v)]
        if wrong:
            return None, f"installed the wrong versions: {', '.join(wrong)}"
        share(purelib, self.root / "store")
        (env / ".ready").write_text(json.dumps(todo) + "\n")
        return python, ""


def share(folder: Path, store: Path, smallest: int = 4096) -> int:
    """Hard-link each file of a new environment to the one copy of its content in `store`
    (bytes saved): a release installed in two package sets is kept once on disk. Files are
    never changed in place once an environment is ready, so sharing them is safe; a file
    system without hard links keeps its copies."""
    saved = 0
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size < smallest:
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        kept = store / digest[:2] / digest
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            if not kept.exists():
                os.link(path, kept)
                continue
            if os.path.samefile(kept, path):
                continue
            tmp = path.with_name(f".{path.name}.share")
            os.link(kept, tmp)
            os.replace(tmp, path)
            saved += path.stat().st_size
        except OSError:  # another file system, or no hard links: keep the copy
            continue
    return saved


def _call(cmd: list[str], what: str, timeout: float,
          env: Mapping[str, str] | None = None) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return f"{what}: timed out after {timeout:g} s"
    except OSError as exc:
        return f"{what}: {exc}"
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).splitlines()
                 if ln.strip() and not ln.startswith("WARNING: Location")]
        return f"{what}: {lines[-1].strip() if lines else f'exit {done.returncode}'}"
    return ""


def gate_path() -> str:
    """The folder to put first on the probe's import path so it runs this very gate: the
    checkout it was imported from (an installed gate reaches the probe through the .pth)."""
    root = Path(parity_gate.__file__).resolve().parent.parent
    return "" if root.name in ("site-packages", "dist-packages") else str(root)


@dataclass
class CaseRunner:
    """Runs the selected cases with a probe's python: `run` on a manifest, or `ops`."""

    out: Path
    cases: list[str]
    manifest: Path | None = None   # None: op-sweep cases (`parity-gate ops`)
    ops_args: list[str] = field(default_factory=list)
    timeout: float = 900.0

    def command(self, python: Path, out: Path, cases: list[str] | None = None) -> list[str]:
        select = [a for c in (self.cases if cases is None else cases)
                  for a in ("--select", c)]
        if self.manifest is None:
            return [str(python), "-m", "parity_gate", "ops", *select, *self.ops_args,
                    "--no-baseline", "--quiet", "--jobs", "1", "--out", str(out)]
        return [str(python), "-m", "parity_gate", "run", str(self.manifest), *select,
                "--out", str(out), "--no-cache", "--no-localise", "--fail-on", "never",
                "--allow-all-skipped", "--quiet", "--jobs", "1"]

    def run(self, python: Path, name: str,
            cases: list[str] | None = None) -> tuple[dict[str, CaseResult] | None, str]:
        out = self.out / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PARITY_GATE_CACHE_DIR", "VIRTUAL_ENV")}
        if gate_path():
            env["PYTHONPATH"] = gate_path()
        log = out / "probe.log"
        with log.open("w") as sink:
            proc = subprocess.Popen(self.command(python, out, cases), stdout=sink,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return None, f"timed out after {self.timeout:g} s (log: {log})"
        results = out / "results.json"
        if not results.is_file():
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            return None, (f"the run wrote no results (exit {code}"
                          + (f"; signal {-code}" if code < 0 else "")
                          + f"): {tail[-1][:200] if tail else 'no output'}")
        try:
            run = RunResult.from_dict(json.loads(results.read_text()), str(results))
        except (UserError, json.JSONDecodeError) as exc:
            return None, f"unreadable results: {exc}"
        return {c.id: c for c in run.cases}, ""


# A run of every selected case in one set, kept for the command's other failures: the good
# set and the repeats of the bad set run once per command, not once per failure.
Memo = dict[str, tuple[dict[str, CaseResult] | None, str, float]]
SHARED = (Phase.CONFIRM, Phase.REPEAT)


@dataclass
class Prober:
    """install → run → judge: the `probe` that the search calls."""

    installer: Installer
    runner: Runner
    bad: dict[str, str]     # the selected cases' signatures in the bad run
    count: int = 0
    everyone: list[str] = field(default_factory=list)  # all selected cases, every failure
    memo: Memo = field(default_factory=dict)           # shared by the command's probers
    asked: dict[str, int] = field(default_factory=dict)

    def _shared_key(self, phase: Phase, pins: Mapping[str, str]) -> str:
        head = f"{phase.value} {sorted(pins.items())}"
        self.asked[head] = self.asked.get(head, 0) + 1
        return f"{head} #{self.asked[head]}"

    def __call__(self, phase: Phase, package: str, version: str,
                 pins: dict[str, str]) -> Probe:
        key = self._shared_key(phase, pins) if phase in SHARED else ""
        label = f"{package} {version}" if package else (
            "bad set" if phase in (Phase.TOGETHER, Phase.REPEAT) else "good set")
        if key in self.memo:
            kept, kept_why, _ = self.memo[key]
            return self._judged(phase, package, version, kept, kept_why, 0.0, reused=True)
        self.count += 1
        start = time.monotonic()
        print(f"parity-gate bisect: probe {self.count}: {label} ({phase.value}) ...",
              file=sys.stderr, flush=True)
        python, why = self.installer.prepare(pins)
        cases: dict[str, CaseResult] | None = None
        if python is not None:
            name = f"{self.count:02d}-{package or label.replace(' ', '-')}-{version or phase.value}"
            run = self.everyone if key and self.everyone else list(self.bad)
            cases, why = self.runner.run(python, name, run)
        seconds = round(time.monotonic() - start, 1)
        if key:
            self.memo[key] = (cases, why, seconds)
        probe = self._judged(phase, package, version, cases, why, seconds)
        seen = probe.why or probe.signature
        print(f"parity-gate bisect: probe {self.count}: {label}: {probe.verdict.value}"
              + (f" ({seen})" if seen else "") + f", {seconds:g} s",
              file=sys.stderr, flush=True)
        return probe

    def _judged(self, phase: Phase, package: str, version: str,
                cases: dict[str, CaseResult] | None, why: str, seconds: float,
                reused: bool = False) -> Probe:
        if cases is None:
            return Probe(phase=phase, package=package, version=version, verdict=Verdict.SKIP,
                         why=why, seconds=seconds, reused=reused)
        mine = {c: cases[c] for c in self.bad if c in cases}
        verdict, sig, why = judge(self.bad, mine)
        return Probe(phase=phase, package=package, version=version, verdict=verdict,
                     signature=sig, why=why, seconds=seconds, reused=reused,
                     seen={c: failure_signature(r) for c, r in mine.items()},
                     flaky=flaky_cases(self.bad, mine, phase is Phase.REPEAT))
