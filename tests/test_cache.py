"""The export cache: every key component invalidates, damaged entries are rebuilt."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
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


def load(tmp: Path, name: str = "cached_net", extra: str = "") -> torch.nn.Module:
    """A fresh import of the module file (rewritten with `extra`), seeded identically."""
    path = tmp / f"{name}.py"
    path.write_text(SOURCE.format(extra=extra))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return module.Net()


def key(net: torch.nn.Module, **change: object) -> str:
    parts: dict[str, object] = {"inputs": [{"name": "x", "dynamic": {0: "batch"}}],
                                "dtype": "float32", "export": {"exporter": "dynamo"},
                                "example": ["random", 0, 2],
                                "versions": {"torch": "2.13.0", "onnxscript": "0.7.2",
                                             "onnx": "1.19.0"}}
    parts.update(change)
    return c.export_key(c.module_fingerprint(net), parts["inputs"], str(parts["dtype"]),
                        parts["export"], parts["example"], parts["versions"])  # type: ignore[arg-type]


def test_every_component_of_the_key_invalidates(tmp_path: Path) -> None:
    net = load(tmp_path)
    base = key(net)
    assert key(load(tmp_path)) == base  # same code, same seed: same key (no false miss)
    with torch.no_grad():
        net.fc.weight[0, 0] += 1e-6  # one weight, by one ulp-ish step
    assert key(net) != base
    edited = load(tmp_path, extra=" * 1")  # one source line edited
    assert key(edited) != base
    net = load(tmp_path)
    assert key(net, export={"exporter": "dynamo", "opset": 18}) != base
    assert key(net, versions={"torch": "2.13.0", "onnxscript": "0.7.3", "onnx": "1.19.0"}) \
        != base
    assert key(net, dtype="float16") != base
    assert key(net, inputs=[{"name": "x", "dynamic": {}}]) != base
    assert key(net, example=["random", 0, 4]) != base
    net.register_buffer("scale", torch.ones(1))  # a new buffer is part of the weights
    assert key(net) != base
    net = load(tmp_path)
    net.register_buffer("inv_freq", torch.ones(2), persistent=False)  # not in state_dict
    loose = key(net)
    assert loose != base
    net.inv_freq /= 2  # a rotary frequency changed in place, say
    assert key(net) != loose
    fp = c.module_fingerprint(load(tmp_path))
    stored = c.export_key(fp, [], "float32", {}, "x", {"torch": "2.13.0"})
    assert c.export_key(fp, [], "float32", {}, "x", {"torch": "2.13.0"},
                        context=[{"baked-dim": "fail"}]) != stored  # hazard settings, say
    ref = c.reference_key(fp, "float32", "cpu", ["digest"], [], {"torch": "2.13.0"})
    for other in (c.reference_key(fp, "float32", "cpu", ["other"], [], {"torch": "2.13.0"}),
                  c.reference_key(fp, "float32", "cpu", ["digest"], [{"name": "y"}],
                                  {"torch": "2.13.0"}),
                  c.reference_key(fp, "float32", "cpu", ["digest"], [], {"torch": "2.14.0"})):
        assert other != ref  # other inputs, output specs or torch: a miss


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


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64"])
def test_references_round_trip_exactly(dtype: str) -> None:
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    first = [1.5, -0.0, np.inf] if dtype != "int64" else [1, 0, -7]
    arrays = [[np.array(first, dtype=np.float64).astype(np_dtype)],
              [np.array([2, 3, 4]).astype(np_dtype)]]
    blob = c.save_arrays(arrays)
    with tempfile.NamedTemporaryFile(suffix=".npz") as fh:
        fh.write(blob)
        fh.flush()
        back = c.load_arrays(Path(fh.name), 2, 1, [dtype])
    for a, b in zip(arrays, back, strict=True):
        assert b[0].dtype == a[0].dtype
        assert a[0].tobytes() == b[0].tobytes()


def test_plain_attributes_and_configs_are_part_of_the_fingerprint(tmp_path: Path) -> None:
    """What a forward reads besides its weights: a float, a builtin activation, a
    config object, a tensor kept as a plain attribute, a partial."""
    import functools

    class Config:
        def __init__(self, heads: int) -> None:
            self.heads = heads

        def to_dict(self) -> dict[str, int]:
            return {"heads": self.heads}

    def fresh() -> torch.nn.Module:
        net = load(tmp_path)
        net.eps = 1e-5  # type: ignore[assignment]
        net.act = torch.relu  # type: ignore[assignment]
        net.config = Config(4)  # type: ignore[assignment]
        net.table = torch.arange(3.0)  # type: ignore[assignment]
        net.norm = functools.partial(torch.nn.functional.layer_norm, eps=1e-5)  # type: ignore[assignment]
        return net

    base = c.module_fingerprint(fresh())
    assert c.module_fingerprint(fresh()) == base  # rebuilt the same: no false miss
    changes = [("eps", 1e-6), ("act", torch.tanh), ("config", Config(8)),
               ("table", torch.arange(4.0)),
               ("norm", functools.partial(torch.nn.functional.layer_norm, eps=1e-6))]
    for name, value in changes:
        net = fresh()
        setattr(net, name, value)
        assert c.module_fingerprint(net) != base, name
    assert c.module_fingerprint(fresh(), extra={"kwargs": {"width": 9}}) != base
