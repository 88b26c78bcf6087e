"""A warm run cannot pass stale: every input a model's code can reach, changed between two
warm runs, gives the verdict a cold run gives.

One manifest holds one module per hidden input. Each factory reads its input in its own way
(`os.path.exists`, an optional file, a listing, `os.environb`, a copy of the environment,
`PYTHONPATH`, a helper shadowed earlier on `python_path`, a repointed link, `torch.from_file`,
a file rewritten with its size and mtime restored, a native `fopen`, a subprocess, a
`sitecustomize`, a local HTTP server, `os.urandom`, the clock). A "shape" input switches the
model to one that keeps the export's batch size (a real export defect: the cold verdict is a
failure); a "weights" input changes its weights (the cold verdict is a pass, and a stale
translation would fail it). The run with the warm cache must agree with a run without one,
case by case, and the control module proves the cache was used at all.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from parity_gate.model.results import RunResult

pytestmark = pytest.mark.process  # real exports in real workers

MODELS = '''
import builtins, ctypes, importlib, os, subprocess, time, urllib.request
import numpy as np
import torch

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inputs")


def _w(data):
    return torch.from_numpy(np.frombuffer(data[:64], dtype=np.float32).copy()).reshape(4, 4)


class Net(torch.nn.Module):
    def __init__(self, weight, baked):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        with torch.no_grad():
            self.fc.weight.copy_(weight)
        self.baked = baked

    def forward(self, x):
        h = self.fc(x)
        if self.baked:  # the batch size the export saw, kept by the model's own code
            n = int(h.shape[0])
            h = h.reshape(n, -1) + 0
        return h


def _native(path):
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fread.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    fh = libc.fopen(path.encode(), b"rb")
    buf = ctypes.create_string_buffer(64)
    libc.fread(buf, 1, 64, fh)
    libc.fclose(fh)
    return buf.raw


def _seeded(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 4, generator=g)


def build(scenario):
    w, baked = torch.eye(4), False
    j = lambda name: os.path.join(D, name)
    if scenario == "exists":
        baked = os.path.exists(j("override.flag"))
    elif scenario == "optional":
        try:
            with open(j("optional.bin"), "rb") as fh:
                w = _w(fh.read())
        except FileNotFoundError:
            pass
    elif scenario == "listdir":
        baked = any(n.endswith(".flag") for n in os.listdir(j("listing")))
    elif scenario == "environb":
        baked = os.environb.get(b"PG_STALE_ENVIRONB") == b"1"
    elif scenario == "environ_copy":
        baked = dict(os.environ).get("PG_STALE_COPY") == "1"
    elif scenario == "pythonpath":
        baked = importlib.import_module("pg_stale_pp").BAKED
    elif scenario == "shadow":
        baked = importlib.import_module("pg_stale_shadow").BAKED
    elif scenario == "symlink":
        with open(j("weights.link"), "rb") as fh:
            w = _w(fh.read())
    elif scenario == "from_file":
        w = torch.from_file(j("from_file.bin"), size=16, dtype=torch.float32).reshape(4, 4)
    elif scenario == "same_stat":
        with open(j("same_stat.bin"), "rb") as fh:
            w = _w(fh.read())
    elif scenario == "native":
        w = _w(_native(j("native.bin")))
    elif scenario == "subprocess":
        out = subprocess.run(["cat", j("sub.txt")], capture_output=True, text=True).stdout
        baked = out.strip() == "baked"
    elif scenario == "sitecustomize":
        baked = getattr(builtins, "PG_STALE_SITE", False)
    elif scenario == "network":
        with urllib.request.urlopen(os.environ["PG_STALE_URL"], timeout=30) as reply:
            baked = reply.read() == b"baked"
    elif scenario == "urandom":
        w = _seeded(int.from_bytes(os.urandom(4), "little"))
    elif scenario == "clock":
        w = _seeded(time.time_ns() % 2**31)
    return Net(w, baked)
'''

# scenario → "shape" (the change makes the model keep its export batch: a failure) or
# "weights" (the change gives it other weights: a pass, which a stale translation fails)
SCENARIOS = {
    "exists": "shape", "optional": "weights", "listdir": "shape", "environb": "shape",
    "environ_copy": "shape", "pythonpath": "shape", "shadow": "shape", "symlink": "weights",
    "from_file": "weights", "same_stat": "weights", "native": "weights",
    "subprocess": "shape", "sitecustomize": "shape", "network": "shape",
}
ALWAYS_NEW = ("urandom", "clock")  # a new value every run, changed or not

MANIFEST = """
version: 1
python_path: [shadow, src]
defaults:
  batch_sizes: [1, 3]
  dtypes: [float32]
providers:
  cpu: {required: true}
fixtures:
  rows:
    kind: random
    inputs:
      x: {shape: [batch, 4]}
modules:
"""


def floats(value: float) -> bytes:
    return np.full(16, value, dtype=np.float32).tobytes()


class Served:
    """A local HTTP server whose one body the test changes (a network read, faked here)."""

    body = b"good"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(Served.body)))
        self.end_headers()
        self.wfile.write(Served.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/config"
    finally:
        httpd.shutdown()
        httpd.server_close()


def project(root: Path) -> Path:
    """The project in its "before" state: every hidden input absent or at its first value."""
    src, inputs = root / "src", root / "src" / "inputs"
    for folder in (src, inputs / "listing", root / "shadow", root / "pp_a", root / "pp_b",
                   root / "site"):
        folder.mkdir(parents=True, exist_ok=True)
    (src / "stale_models.py").write_text(MODELS)
    (src / "pg_stale_shadow.py").write_text("BAKED = False\n")
    (root / "pp_a" / "pg_stale_pp.py").write_text("BAKED = False\n")
    (root / "pp_b" / "pg_stale_pp.py").write_text("BAKED = True\n")
    (root / "site" / "sitecustomize.py").write_text(
        "import builtins\nbuiltins.PG_STALE_SITE = True\n")
    (inputs / "listing" / "a.txt").write_text("x")
    (inputs / "a.bin").write_bytes(floats(0.5))
    (inputs / "b.bin").write_bytes(floats(1.5))
    (inputs / "weights.link").symlink_to("a.bin")
    for name in ("from_file.bin", "same_stat.bin", "native.bin"):
        (inputs / name).write_bytes(floats(0.5))
    (inputs / "sub.txt").write_text("good\n")
    names = [*SCENARIOS, *ALWAYS_NEW, "control"]
    modules = "".join(f"  - name: {n}\n    factory: stale_models:build\n"
                      f"    kwargs: {{scenario: {n}}}\n"
                      "    inputs: [{name: x, dynamic: {0: batch}}]\n"
                      "    fixtures: [rows]\n" for n in names)
    manifest = root / "parity.yml"
    manifest.write_text(textwrap.dedent(MANIFEST) + modules)
    return manifest


def change(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every hidden input changed, each the way the issue saw it go stale."""
    inputs = root / "src" / "inputs"
    (inputs / "override.flag").write_text("")
    (inputs / "optional.bin").write_bytes(floats(2.0))
    (inputs / "listing" / "new.flag").write_text("")
    monkeypatch.setenv("PG_STALE_ENVIRONB", "1")
    monkeypatch.setenv("PG_STALE_COPY", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root / "pp_b"), str(root / "site")]))
    (root / "shadow" / "pg_stale_shadow.py").write_text("BAKED = True\n")
    (inputs / "weights.link").unlink()
    (inputs / "weights.link").symlink_to("b.bin")  # another file of the same size
    (inputs / "from_file.bin").write_bytes(floats(3.0))
    same = inputs / "same_stat.bin"
    before = same.stat()
    same.write_bytes(floats(4.0))
    os.utime(same, ns=(before.st_atime_ns, before.st_mtime_ns))
    (inputs / "native.bin").write_bytes(floats(5.0))
    (inputs / "sub.txt").write_text("baked\n")
    Served.body = b"baked"


def gate(manifest: Path, cache: Path | None, out: Path) -> RunResult:
    """`parity-gate run` as a process of its own, in the environment the test set: the
    gate's own start-up (PYTHONPATH, sitecustomize) is part of what is tested."""
    cmd = [sys.executable, "-m", "parity_gate", "run", str(manifest), "--out", str(out),
           "--quiet", "--no-localise", "--jobs", "2",
           *(["--cache-dir", str(cache)] if cache is not None else ["--no-cache"])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return RunResult.from_dict(json.loads((out / "results.json").read_text()))


def outcomes(run: RunResult) -> dict[str, str]:
    return {c.id: c.outcome.value for c in run.cases}


def reused(run: RunResult, module: str) -> bool:
    return all(c.provenance is not None and c.provenance.export_cached
               for c in run.cases if c.key.module == module)


def test_every_hidden_input_changed_between_warm_runs_gives_the_cold_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str) -> None:
    root, cache = tmp_path / "p", tmp_path / "cache"
    manifest = project(root)
    monkeypatch.setenv("PG_STALE_URL", server)
    monkeypatch.setenv("PYTHONPATH", str(root / "pp_a"))
    Served.body = b"good"
    first = gate(manifest, cache, tmp_path / "first")
    assert first.verdict.result == "pass", [(c.id, c.reason) for c in first.cases if c.failed]

    change(root, monkeypatch)
    warm = gate(manifest, cache, tmp_path / "warm")
    cold = gate(manifest, None, tmp_path / "cold")
    assert outcomes(warm) == outcomes(cold)
    assert warm.verdict.result == cold.verdict.result == "fail"
    for name, kind in SCENARIOS.items():
        cases = [c for c in warm.cases if c.key.module == name]
        if kind == "shape":  # the change is a real defect, and the warm run sees it
            assert any(c.failed for c in cases), name
        else:  # new weights: a new program, translated afresh, and it passes
            assert not any(c.failed for c in cases), (name, [c.reason for c in cases])
            assert not reused(warm, name), name
    for name in ALWAYS_NEW:
        assert not reused(warm, name) and not any(
            c.failed for c in warm.cases if c.key.module == name), name
    assert reused(warm, "control")  # the cache was used: the agreement is not by its absence


def test_a_failure_on_a_reused_translation_is_checked_on_a_fresh_one(tmp_path: Path) -> None:
    """A wrong translation under the right key (a key that missed an input, a damaged entry
    that kept its digests): the failing cases run again on a fresh translation, which
    replaces the entry, and the run says so; no false alarm comes out of the cache."""
    import onnx
    from onnx import numpy_helper

    root, cache = tmp_path / "p", tmp_path / "cache"
    manifest = project(root)
    text = manifest.read_text()
    manifest.write_text(text[:text.index("  - name:")] + text[text.index("  - name: control"):])
    assert gate(manifest, cache, tmp_path / "first").verdict.result == "pass"
    (entry,) = [p.parent for p in (cache / "translation").glob("*/*/entry.json")]
    model = onnx.load(entry / "model.onnx")
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 2 + 1, init.name))
    (entry / "model.onnx").write_bytes(model.SerializeToString())
    meta = json.loads((entry / "entry.json").read_text())
    from parity_gate.engine.cache import file_sha256

    meta["files"]["model.onnx"] = file_sha256(entry / "model.onnx")
    (entry / "entry.json").write_text(json.dumps(meta))

    warm = gate(manifest, cache, tmp_path / "warm")
    assert warm.verdict.result == "pass", [(c.id, c.reason) for c in warm.cases]
    assert not reused(warm, "control")  # the cases that count ran on the fresh one
    notes = [f.message for f in warm.findings if f.kind == "cache"]
    assert any("fresh translation of the same program differs" in n for n in notes), notes
    again = gate(manifest, cache, tmp_path / "again")  # the entry was replaced: reused, right
    assert reused(again, "control") and again.verdict.result == "pass"


if sys.platform != "linux":  # ctypes.CDLL(None) and `cat`: the Linux runners CI has
    pytestmark = [pytestmark, pytest.mark.skip(reason="Linux only")]
