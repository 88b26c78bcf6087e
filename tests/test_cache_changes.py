"""Why an export missed the cache (engine.changes): the difference of two records of a
key's parts, a pure function of data. The records come from real captures in
tests/test_cache.py and from real runs in tests/test_cache_runs.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parity_gate.engine.changes import explain, record, what_changed
from parity_gate.engine.programs import ProgramDigest

VERSIONS = {"torch": "2.13.0", "onnxscript": "0.7.2"}
CALL = {"opset_version": 18, "optimize": True, "input_names": ["x"]}
NODES = [["p_fc_weight", "placeholder", "c0", "m0", "t0"],
         ["x", "placeholder", "c1", "m1", "t1"],
         ["linear", "aten.linear.default", "c2", "m2", "t2"],
         ["relu", "aten.relu.default", "c3", "m3", "t3"],
         ["output", "output", "c4", "m4", "t4"]]
PARTS = {"graph": "g0", "weight:fc.weight": "w0", "weight:fc.bias": "b0",
         "buffer:bn.running_mean": "r0", "signature": "s0", "ranges": "q0", "calls": "k0"}


def rec(parts: dict[str, str] | None = None, nodes: list[list[str]] | None = None,
        call: dict[str, Any] | None = None, versions: dict[str, str] | None = None,
        own: str = "1.0", code: str = "e" * 64) -> dict[str, Any]:
    program = ProgramDigest("d" * 64)
    program.parts = {**PARTS, **(parts or {})}
    program.nodes = nodes if nodes is not None else NODES
    return record("key", program, call if call is not None else CALL,
                  versions if versions is not None else VERSIONS, own, code)


def test_the_same_parts_say_the_entry_is_gone() -> None:
    assert what_changed(rec(), rec()) == []
    assert "nothing it depends on changed" in explain(rec(), rec())


def test_each_part_is_named() -> None:
    base = rec()
    assert what_changed(base, rec({"weight:fc.weight": "w1"})) == [
        "the weights changed (fc.weight)"]
    assert what_changed(base, rec({"buffer:bn.running_mean": "r1"})) == [
        "the buffers changed (bn.running_mean)"]
    assert what_changed(base, rec(call={**CALL, "opset_version": 20})) == [
        "the export call changed (opset_version 18 → 20)"]
    assert what_changed(base, rec(call={**CALL, "dynamo_flag": 1})) == [
        "the export call changed (dynamo_flag absent → 1)"]
    assert what_changed(base, rec(versions={**VERSIONS, "onnxscript": "0.7.3"})) == [
        "onnxscript 0.7.2 → 0.7.3"]
    assert what_changed(base, rec(own="1.1")) == ["parity-gate 1.0 → 1.1"]
    assert what_changed(base, rec(code="f" * 64)) == [
        "parity-gate's export code changed (engine/exporting.py)"]
    assert what_changed(base, rec({"ranges": "q1"})) == ["the dynamic dims' ranges changed"]


def test_weights_added_removed_and_many() -> None:
    parts = dict(PARTS)
    del parts["weight:fc.bias"]
    program = ProgramDigest("d" * 64)
    program.parts, program.nodes = {**parts, "weight:head.weight": "h"}, NODES
    after = record("key", program, CALL, VERSIONS, "1.0", "e" * 64)
    assert what_changed(rec(), after) == ["the weights changed (fc.bias (gone), head.weight (new))"]
    many = rec({f"weight:layer{i}.weight": "x" for i in range(5)})
    assert what_changed(rec(), many) == [
        "the weights changed (layer0.weight (new), layer1.weight (new), layer2.weight (new) "
        "and 2 more)"]


def test_the_graph_names_its_first_differing_node() -> None:
    def graph(nodes: list[list[str]]) -> list[str]:
        return what_changed(rec(), rec({"graph": "g1"}, nodes))

    swapped = [*NODES[:3], ["gelu", "aten.gelu.default", "c9", "m3", "t3"], NODES[4]]
    assert graph(swapped) == ["the graph changed (node 3 (gelu): aten.relu → aten.gelu)"]
    added = [*NODES[:4], ["add", "aten.add.Tensor", "c8", "m8", "t8"], NODES[4]]
    assert graph(added) == ["the graph changed (node 4 (add) added: aten.add.Tensor)"]
    removed = [*NODES[:3], NODES[4]]
    assert graph(removed) == ["the graph changed (node 3 (relu) removed: aten.relu)"]
    argued = [*NODES[:3], ["relu", "aten.relu.default", "c9", "m3", "t3"], NODES[4]]
    assert graph(argued) == ["the graph changed (node 3 (relu): aten.relu's arguments)"]
    shaped = [*NODES[:2], ["linear", "aten.linear.default", "c2", "m9", "t2"], *NODES[3:]]
    assert graph(shaped) == [
        "the graph changed (node 2 (linear): the shapes, dtypes or symbols of its values)"]
    moved = [*NODES[:2], ["linear", "aten.linear.default", "c2", "m2", "t9"], *NODES[3:]]
    assert graph(moved) == [
        "the code the graph was traced from changed (node 2 (linear), aten.linear: its "
        "source lines or module path; code above it moved, say)"]
    assert graph(NODES) == ["the graph changed (a tensor a subgraph holds)"]


def test_the_sentence_names_the_first_few_most_telling_first() -> None:
    after = rec({"graph": "g1", "weight:fc.weight": "w1", "ranges": "q1"},
                [*NODES[:3], ["gelu", "aten.gelu.default", "c9", "m3", "t3"], NODES[4]],
                call={**CALL, "optimize": False}, versions={**VERSIONS, "torch": "2.14.0"})
    assert explain(rec(), after) == (
        "translation not reused: torch 2.13.0 → 2.14.0; the export call changed (optimize "
        "true → false); the weights changed (fc.weight); and 2 more changes")


def test_a_long_call_value_is_cut_but_still_compared_whole() -> None:
    table = {"custom_translation_table": "x" * 100}
    a = rec(call={**CALL, **table})
    b = rec(call={**CALL, "custom_translation_table": "x" * 99 + "y"})
    (said,) = what_changed(a, b)
    assert said.startswith("the export call changed (custom_translation_table \"xxx")
    assert len(said) < 160 and "#" in said
    assert what_changed(a, rec(call={**CALL, **table})) == []


def test_a_plain_digest_is_one_part() -> None:
    a = record("k1", "a" * 64, CALL, VERSIONS, "1.0", "e" * 64)
    b = record("k2", "b" * 64, CALL, VERSIONS, "1.0", "e" * 64)
    assert what_changed(a, b) == ["the captured program changed"]


def test_the_worker_explains_a_miss_against_the_last_export_that_was_kept(
        tmp_path: Path) -> None:
    """The record is the last export whose translation the cache holds: a miss is explained
    against it, a failed translation (never stored) does not replace it, a hit does; the
    key is the same with the parts or without."""
    from parity_gate.engine.cache import ExportCache
    from parity_gate.engine.cached import PARTS as RECORDS
    from parity_gate.engine.cached import WorkerCache
    from parity_gate.engine.exporting import Translated

    worker = WorkerCache(ExportCache(tmp_path / "cache"), owner=(str(tmp_path), "ranker"))

    def export(program: ProgramDigest, translated: bool = True) -> str:
        worker.begin("float32")
        plain = worker.key(str(program), CALL)
        key = worker.key(program, CALL)  # the last key's parts are recorded
        assert key is not None and key == plain
        if worker.get(key) is None and translated:
            worker.put(key, Translated(b"onnx"))
        return worker.end()

    def program(weight: str) -> ProgramDigest:
        d = ProgramDigest(weight * 64)
        d.parts, d.nodes = {**PARTS, "weight:embed.weight": weight}, NODES
        return d

    assert export(program("a")) == ""  # no earlier export: nothing to explain
    said = "translation not reused: the weights changed (embed.weight)"
    assert export(program("b"), translated=False) == said  # its translation failed
    assert export(program("b")) == said  # still against "a", the last one kept
    assert export(program("a")) == ""  # a hit: says nothing, and is the record now
    assert export(program("c")) == said
    worker = WorkerCache(worker.store, owner=(str(tmp_path), "other"))
    assert export(program("d")) == ""  # another module has its own record
    assert len(list((tmp_path / "cache" / RECORDS).glob("*/*/entry.json"))) == 2
