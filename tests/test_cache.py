"""The export cache: the program digest and the translation key change with what a
translation reads; damaged entries are rebuilt; concurrent writers; pruning."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

import torch

from parity_gate.engine import cache as c

SOURCE = '''
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x)){extra}
'''


def load(tmp: Path, name: str = "cached_net", extra: str = "", head: str = ""
         ) -> torch.nn.Module:
    """A fresh import of the module file (rewritten with `extra`, after `head`), seeded
    identically."""
    path = tmp / f"{name}.py"
    path.write_text(head + SOURCE.format(extra=extra))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return module.Net()


def digest(net: torch.nn.Module, dynamic: bool = True, low: int | None = None) -> str:
    """The digest of the program torch.export captures from `net` (as the gate captures)."""
    from parity_gate.engine.exporting import _capture
    from parity_gate.engine.programs import program_digest

    batch = torch.export.Dim("batch", min=low) if low is not None else torch.export.Dim("batch")
    program = _capture(torch, net.eval(), (torch.ones(3, 4),), {},
                       ({0: batch},) if dynamic else None)
    assert program is not None
    return program_digest(program)


def test_the_program_digest_changes_with_what_the_translation_reads(tmp_path: Path) -> None:
    """Same code and seed: the same digest (no false miss, two captures apart). One weight,
    one source line (the stack traces the translation copies), a new op, a buffer kept out
    of the state dict, a dynamic dim or its range: each a new digest."""
    net = load(tmp_path)
    base = digest(net)
    assert digest(load(tmp_path)) == base
    with torch.no_grad():
        net.fc.weight[0, 0] += 1e-6  # one weight, by one ulp-ish step
    assert digest(net) != base
    assert digest(load(tmp_path, extra=" * 1")) != base  # one source line edited
    assert digest(load(tmp_path, extra=" + 0")) != base  # a new op
    net = load(tmp_path, extra=" * self.scale")
    net.register_buffer("scale", torch.ones(3), persistent=False)  # not in state_dict
    loose = digest(net)
    net.scale /= 2  # a rotary frequency changed in place, say
    assert digest(net) != loose
    assert digest(load(tmp_path), dynamic=False) != base
    assert digest(load(tmp_path), low=2) != base


def test_the_digest_carries_its_parts_and_a_miss_names_what_changed(tmp_path: Path) -> None:
    """Issue 48: the digest's parts (only for explaining a miss) follow the part that
    changed, on real captures; the key is the digest's alone, parts or not."""
    from parity_gate.engine.cached import WorkerCache, stack
    from parity_gate.engine.changes import explain, record
    from parity_gate.engine.programs import ProgramDigest

    def parts(net: torch.nn.Module) -> tuple[ProgramDigest, dict[str, object]]:
        d = digest(net)
        assert isinstance(d, ProgramDigest)
        return d, record("k", d, {"opset_version": 18}, stack()[0], "1.0", "e" * 64)

    net = load(tmp_path)
    base, before = parts(net)
    worker = WorkerCache(c.ExportCache(tmp_path / "cache"))
    assert worker.key(base, {"o": 1}) == worker.key(str(base), {"o": 1})  # parts are no key
    assert {"graph", "weight:fc.weight", "weight:fc.bias", "signature"} <= set(base.parts)
    with torch.no_grad():
        net.fc.weight[0, 0] += 1e-6
    changed, after = parts(net)
    assert [k for k in base.parts if base.parts[k] != changed.parts[k]] == ["weight:fc.weight"]
    assert explain(before, after) == "translation not reused: the weights changed (fc.weight)"
    _, added = parts(load(tmp_path, extra=" + 0"))
    assert "the graph changed" in explain(before, added) and "aten.add.Tensor" in explain(
        before, added)
    _, moved = parts(load(tmp_path, head="# a comment above moves every line\n"))
    said = explain(before, moved)
    assert said.startswith("translation not reused: the code the graph was traced from "
                           "changed (node ") and "its source lines" in said


def test_the_translation_key_covers_the_export_call_and_the_exporter_stack() -> None:
    from parity_gate.engine.cached import TRANSLATION, stack

    cache = c.ExportCache(Path(tempfile.mkdtemp()))
    from parity_gate.engine.cached import WorkerCache

    worker = WorkerCache(cache)
    call = {"opset_version": 18, "optimize": True, "output_names": ["y"],
            "input_names": ["x"], "dynamic_shapes": [("x", {0: "batch"})]}
    base = worker.key("p" * 64, call)
    assert worker.key("p" * 64, dict(call)) == base
    assert worker.key("q" * 64, call) != base  # another program
    for name, value in (("opset_version", 19), ("optimize", False), ("output_names", ["z"]),
                        ("input_names", ["w"]), ("dynamic_shapes", [("x", {})])):
        assert worker.key("p" * 64, {**call, name: value}) != base, name
    versions, editable = stack()
    assert {"torch", "onnxscript", "onnx"} <= set(versions) and editable == []
    assert TRANSLATION == "translation"


def test_a_damaged_entry_is_a_miss_and_removed(tmp_path: Path) -> None:
    store = c.ExportCache(tmp_path / "cache")
    entry = store.put("export", "k" * 64, {"model.onnx": b"onnx bytes"}, {"opset": 18})
    assert store.get("export", "k" * 64) is not None and store.stats.hits == 1
    entry.file("model.onnx").write_bytes(b"onnx byte")  # cut short
    assert store.get("export", "k" * 64) is None
    assert store.stats.corrupt == 1 and not entry.folder.exists()
    store.put("export", "k" * 64, {"model.onnx": b"onnx bytes"})
    meta = json.loads((entry.folder / "entry.json").read_text())
    (entry.folder / "entry.json").write_text(json.dumps({**meta, "key": "other"}))
    assert store.get("export", "k" * 64) is None  # an entry.json for another key
    store.put("export", "k" * 64, {"model.onnx": b"onnx bytes"})
    (entry.folder / "entry.json").write_text("{not json")
    assert store.get("export", "k" * 64) is None


def test_two_writers_at_once_leave_one_whole_entry(tmp_path: Path) -> None:
    store = c.ExportCache(tmp_path / "cache")
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            c.ExportCache(tmp_path / "cache").put("export", "a" * 64,
                                                  {"model.onnx": b"x" * 100_000})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    hit = store.get("export", "a" * 64)
    assert hit is not None and hit.file("model.onnx").read_bytes() == b"x" * 100_000
    assert not list((tmp_path / "cache" / "tmp").iterdir())  # no staging left behind


def test_prune_by_age_then_size(tmp_path: Path) -> None:
    store = c.ExportCache(tmp_path / "cache")
    old = store.put("export", "0" * 64, {"m": b"a" * 1000})
    mid = store.put("export", "1" * 64, {"m": b"b" * 1000})
    new = store.put("export", "2" * 64, {"m": b"c" * 1000})
    now = 1_000_000.0
    os.utime(old.file("entry.json"), (now - 90 * 86400, now - 90 * 86400))
    os.utime(mid.file("entry.json"), (now - 2 * 86400, now - 2 * 86400))
    os.utime(new.file("entry.json"), (now, now))
    removed, _ = store.prune(older_than_s=30 * 86400, now=now)
    assert removed == 1 and not old.folder.exists() and mid.folder.exists()
    size = sum(f.stat().st_size for f in new.folder.iterdir())
    removed, freed = store.prune(max_bytes=size + 10, now=now)
    assert removed == 1 and not mid.folder.exists() and new.folder.exists() and freed > 1000
