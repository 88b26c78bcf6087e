"""Real sharded runs merge to the unsharded verdict; mismatched results are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import junitparser
import pytest

from parity_gate import __version__, cli

pytestmark = pytest.mark.process  # real worker runs, exports or subprocesses

DATA = Path(__file__).resolve().parent / "data" / "gate"


def cid(module: str) -> str:
    return f"{module}/float32/vec/b2/cpu"


def gate_run(work: Path, out: str, *args: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["run", str(work / "parity.yml"), "--out", str(work / out), "--jobs", "2",
                     "--quiet", *args])
    return code, json.loads((work / out / "results.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An unsharded run and a 2-way sharded run of tests/data/gate, with its baseline."""
    work = tmp_path_factory.mktemp("shards")
    for name in ("parity.yml", "models.py"):
        shutil.copy(DATA / name, work / name)
    shutil.copy(DATA / "baseline.yml", work / "parity-baseline.yml")
    full = gate_run(work, "full")
    timings = str(work / "full" / "results.json")
    shards = [gate_run(work, f"s{k}", "--shard", f"{k}/2", "--timings", timings,
                       "--compare-to", timings) for k in (1, 2)]
    return {"work": work, "full": full, "shards": shards,
            "files": [work / f"s{k}" / "results.json" for k in (1, 2)]}


def test_shards_split_the_cases_and_record_themselves(runs: dict[str, Any]) -> None:
    (_, full), shards = runs["full"], runs["shards"]
    ids = [[c["id"] for c in doc["cases"]] for _, doc in shards]
    assert sorted(ids[0] + ids[1]) == sorted(c["id"] for c in full["cases"])
    assert all(ids) and not set(ids[0]) & set(ids[1])
    assert [doc["shard"] for _, doc in shards] == ["1/2", "2/2"] and full["shard"] is None
    assert {doc["manifest"]["sha256"] for _, doc in shards} == {full["manifest"]["sha256"]}
    for _, doc in shards:  # every shard sees the whole manifest when judging stale entries
        assert [s["entry"] for s in doc["gate"]["stale"]] == ["retired/**"]


def test_merge_reproduces_the_unsharded_verdict(runs: dict[str, Any]) -> None:
    work, (full_code, full) = runs["work"], runs["full"]
    out = work / "merged"
    code = cli.main(["merge", *map(str, runs["files"]), "--json", str(out / "all.json"),
                     "--junit", str(out / "all.xml"), "--summary", str(out / "all.md")])
    merged = json.loads((out / "all.json").read_text())
    assert code == full_code == 1
    assert merged["verdict"] == full["verdict"] and merged["verdict"]["blocks"] is True
    assert [c["id"] for c in merged["cases"]] == [c["id"] for c in full["cases"]]
    for key in ("rulings", "stale", "fail_on", "baseline", "strict", "worsen_factor"):
        assert merged["gate"][key] == full["gate"][key], key
    assert sorted(merged["gate"]["blocking"]) == sorted(full["gate"]["blocking"])
    assert merged["shard"] is None
    assert merged["gate"]["compare_to"]["unchanged"] == 5  # each shard compared its own part
    xml = junitparser.JUnitXml.fromfile(str(out / "all.xml"))
    assert sum(s.tests for s in xml) == 5
    head = (out / "all.md").read_text().splitlines()[0]
    assert head.startswith("## ❌ parity-gate: ") and "— blocking; 3 regressions" in head


def test_merge_re_decides_with_a_baseline(runs: dict[str, Any]) -> None:
    work = runs["work"]
    accepted = work / "accepted.yml"
    assert cli.main(["baseline", "update", "--from", str(work / "full" / "results.json"),
                     "--baseline", str(accepted), "--reason", "export-only offsets"]) == 0
    out = work / "redecided"
    assert cli.main(["merge", *map(str, runs["files"]), "--out", str(out),
                     "--baseline", str(accepted)]) == 0
    doc = json.loads((out / "results.json").read_text())
    g = doc["gate"]
    assert g["baseline"] == str(accepted) and doc["verdict"]["by_ruling"]["regression"] == 0
    assert [r["category"] for r in g["rulings"]].count("known") == 4
    # a tighter factor on merge turns nothing new into a regression: figures are unchanged
    assert cli.main(["merge", *map(str, runs["files"]), "--out", str(out), "--baseline",
                     str(accepted), "--worsen-factor", "1"]) == 0


def edited(src: Path, dest: Path, **changes: Any) -> Path:
    doc = json.loads(src.read_text())
    for dotted, value in changes.items():
        target = doc
        *parents, last = dotted.split("__")
        for p in parents:
            target = target[p]
        target[last] = value
    dest.write_text(json.dumps(doc))
    return dest


def refused(files: list[Path], capsys: pytest.CaptureFixture[str], tmp: Path) -> list[str]:
    assert cli.main(["merge", *map(str, files), "--out", str(tmp / "o")]) == 2
    assert not (tmp / "o").exists()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()


def test_missing_and_duplicate_shards_are_named(runs: dict[str, Any], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    s1, s2 = runs["files"]
    assert refused([s1], capsys, tmp_path) == [f"missing shard 2/2 (got 1/2 from {s1}; "
                                               "expected all 2)"]
    again = shutil.copy(s1, tmp_path / "again.json")
    lines = refused([s1, again, s2], capsys, tmp_path)
    assert lines == [f"{again}: duplicate shard 1/2 (also in {s1}; expected each shard once)"]
    three = edited(s2, tmp_path / "three.json", shard="2/3")
    assert refused([s1, three], capsys, tmp_path)[0].startswith(
        f"{three}: shard 2/3 is from a split into 3")
    whole = runs["work"] / "full" / "results.json"
    assert refused([s1, s2, whole], capsys, tmp_path) == [
        f"{whole}: not a shard result (expected results of `parity-gate run --shard K/N`, "
        "one per shard)"]


def test_different_manifest_or_tool_version_is_refused(runs: dict[str, Any], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    s1, s2 = runs["files"]
    other = edited(s2, tmp_path / "other.json", manifest__sha256="0" * 64)
    lines = refused([s1, other], capsys, tmp_path)
    assert len(lines) == 1 and lines[0].startswith(f"{other}: manifest sha256 000000000000 "
                                                   "differs from")
    assert lines[0].endswith("(expected shards of one run of the same manifest)")
    newer = edited(s2, tmp_path / "newer.json", tool_version="9.9.9")
    assert refused([s1, newer], capsys, tmp_path) == [
        f"{newer}: parity-gate 9.9.9 differs from {s1}'s {__version__} (expected one tool "
        "version)"]


def test_unreadable_results_are_named(runs: dict[str, Any], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    s1 = runs["files"][0]
    broken = tmp_path / "broken.json"
    broken.write_text('{"cases": [\n  {"id": }\n]}')
    assert refused([s1, broken], capsys, tmp_path) == [
        f"{broken}:2:10: invalid JSON: Expecting value (expected the JSON report of "
        "`parity-gate run`)"]
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    assert refused([junk], capsys, tmp_path)[0].startswith(f"{junk}: not a parity-gate "
                                                           "results file")
    assert refused([tmp_path / "none.json"], capsys, tmp_path)[0].startswith(
        f"{tmp_path / 'none.json'}: results file not found")


def test_interrupted_shard_fails_the_merge(runs: dict[str, Any], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    s1, s2 = runs["files"]
    stopped = edited(s2, tmp_path / "stopped.json", interrupted=True)
    out = tmp_path / "o"
    assert cli.main(["merge", str(s1), str(stopped), "--out", str(out),
                     "--fail-on", "never"]) == 1
    assert "a shard was interrupted" in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["interrupted"] is True


def test_merge_re_decides_cases_whose_shard_ruled_them_away(
        runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A shard's rulings are claims: with the rulings of its failing cases deleted, or a
    failing case ruled `known` with no baseline entry, the merge still blocks on it."""
    s1, s2 = runs["files"]
    docs = [json.loads(p.read_text()) for p in (s1, s2)]
    forged = []
    for k, doc in enumerate(docs):
        failing = [c["id"] for c in doc["cases"] if c["outcome"] != "pass"]
        assert failing
        doc["gate"]["blocking"] = []
        doc["gate"]["rulings"] = [{**r, "category": "known", "why": "forged"}
                                  for r in doc["gate"]["rulings"] if k == 0]
        forged.append(tmp_path / f"forged{k}.json")
        forged[-1].write_text(json.dumps(doc))
    out = tmp_path / "merged"
    code = cli.main(["merge", *map(str, forged), "--out", str(out)])
    err = capsys.readouterr().err
    merged = json.loads((out / "results.json").read_text())
    full = runs["full"][1]
    assert code == 1 and merged["verdict"]["blocks"] is True, err
    assert sorted(merged["gate"]["blocking"]) == sorted(full["gate"]["blocking"])
    assert merged["gate"]["rulings"] == full["gate"]["rulings"]
    assert "forged" not in json.dumps(merged["gate"])
    assert err.strip().splitlines()[-1].startswith("parity-gate: FAIL — merged 2 files, 5 cases")


def test_merge_without_the_shards_baseline_is_refused(
        runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s1, s2 = runs["files"]
    gone = str(tmp_path / "gone.yml")
    moved = [edited(s, tmp_path / f"m{k}.json", gate__baseline=gone)
             for k, s in enumerate((s1, s2))]
    lines = refused(moved, capsys, tmp_path)
    assert lines == [f"{moved[0]}: gate.baseline: the shards were gated against {gone}, which "
                     "is not a file here (expected it at that path, as the shards read it, or "
                     "--baseline PATH; the shards' own rulings are never reused)"]
    odd = edited(s2, tmp_path / "odd.json", gate__fail_on="never")
    assert refused([s1, odd], capsys, tmp_path)[0].startswith(
        f"{odd}: gate.fail_on 'never' differs from {s1}'s 'regressions'")
