"""Files, links, disk and secrets (issue 22, items 3, 4, 6 and 9's file cases), on real files.

Links: nothing outside the gate's own folders is written or removed through a
symbolic link (cache prune, cache entries, the artifacts folder and each file in
it); an entry naming a file outside itself is never trusted; an entry of a newer
format is left alone. Secrets: one real run whose export error and output name
hold a token; no file the gate writes holds it (binary repro files withheld with
a note). A full disk: a real tmpfs under --out filled by the module's factory.
Journal and merge inputs that repeat or invent cases. GITHUB_STEP_SUMMARY that is
a folder, a reader that closes the pipe, two runs into one --out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parity_gate import cli
from parity_gate.engine import cache as export_cache
from parity_gate.errors import UserError
from parity_gate.localise import repro

DATA = Path(__file__).resolve().parent / "data" / "hardening_files"
TOKEN = "ghp_hardening0123456789abcdef"
OUTPUT_CASE = "token_output/float32/vec/b2/cpu"
EXPORT_CASE = "token_export/float32/vec/b2/cpu"
HOUR = 3600.0


def cli_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err.splitlines()


def aged(path: Path, seconds: float) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)
    return path


# -- links: the export cache -------------------------------------------------------------


def test_prune_removes_a_tmp_link_itself_never_what_it_points_to(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "home"
    kept = outside / "project"
    kept.mkdir(parents=True)
    (kept / "work.txt").write_text("mine")
    aged(kept, 2 * HOUR)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "tmp").symlink_to(outside)  # what a pull request can commit
    code, err = cli_run(capsys, "cache", "prune", "--cache-dir", str(cache))
    assert code == 0
    assert (kept / "work.txt").read_text() == "mine"
    assert not os.path.lexists(cache / "tmp")
    assert err == [f"parity-gate cache: removed 0 entries, freed 0.0 MB; kept 0 entries, "
                   f"0.0 MB; removed 1 link in the cache, never followed: {cache / 'tmp'}"]


def test_prune_never_descends_into_a_linked_kind_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "elsewhere"
    lookalike = export_cache.ExportCache(outside).put("export", "a" * 64, {"m": b"x"})
    assert lookalike is not None
    aged(lookalike.file("entry.json"), 100 * 86400)
    cache = tmp_path / "cache"
    real = export_cache.ExportCache(cache).put("reference", "b" * 64, {"m": b"y"})
    assert real is not None
    (cache / "export").symlink_to(outside / "export")
    code, err = cli_run(capsys, "cache", "prune", "--cache-dir", str(cache), "--max-size", "0")
    assert code == 0 and err[0].startswith("parity-gate cache: removed 1 entries")
    assert lookalike.file("entry.json").is_file()  # outside: untouched
    assert not real.folder.exists() and not os.path.lexists(cache / "export")


@pytest.mark.parametrize("link", ["tmp", "export", "export/aa"])
def test_entries_are_never_written_through_a_link(tmp_path: Path, link: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = tmp_path / "cache"
    (cache / link).parent.mkdir(parents=True, exist_ok=True)
    (cache / link).symlink_to(outside)
    store = export_cache.ExportCache(cache)
    assert store.put("export", "a" * 64, {"model.onnx": b"onnx"}) is None
    assert list(outside.iterdir()) == []
    assert "symbolic link" in store.stats.withheld[0]


def test_an_entry_listing_a_file_outside_itself_is_never_trusted(tmp_path: Path) -> None:
    store = export_cache.ExportCache(tmp_path / "cache")
    entry = store.put("export", "c" * 64, {"model.onnx": b"onnx"})
    assert entry is not None
    secret = tmp_path / "private.key"
    secret.write_bytes(b"not the cache's")
    meta = json.loads(entry.file("entry.json").read_text())
    meta["files"]["../../../../private.key"] = export_cache.file_sha256(secret)
    entry.file("entry.json").write_text(json.dumps(meta))
    assert os.path.samefile(entry.folder / "../../../../private.key", secret)
    assert store.get("export", "c" * 64) is None  # a miss, never a hit built on that file
    assert store.stats.corrupt == 1 and secret.read_bytes() == b"not the cache's"


def test_an_entry_of_a_newer_format_is_left_for_the_newer_version(tmp_path: Path) -> None:
    store = export_cache.ExportCache(tmp_path / "cache")
    entry = store.put("export", "d" * 64, {"model.onnx": b"onnx"})
    assert entry is not None
    meta = json.loads(entry.file("entry.json").read_text())
    meta.update(format=export_cache.FORMAT + 1, files={"model.v2": "0" * 64})
    entry.file("entry.json").write_text(json.dumps(meta))
    assert store.get("export", "d" * 64) is None
    assert entry.file("entry.json").is_file() and store.stats.newer == 1


# -- links: repro folders -----------------------------------------------------------------


def _repro(folder: Path) -> Path:
    x = np.ones((2, 4), np.float32)
    case = repro.ReproCase("m/float32/vec/b2/cpu", 1e-5, 1e-3, ["CPUExecutionProvider"], "test")
    return repro.write(folder, case, model=b"onnx", inputs={"x": x}, expected={"y": x},
                       got={"y": x + 1})


def test_a_repro_file_that_is_a_link_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    victim = tmp_path / "victim.py"
    victim.write_text("precious\n")
    folder = tmp_path / "out" / "artifacts" / "m__float32__vec__b2__cpu"
    folder.mkdir(parents=True)
    (folder / "repro.py").symlink_to(victim)
    with pytest.raises(UserError, match=r"repro\.py is a symbolic link"):
        _repro(folder)
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("link", ["artifacts", "artifacts/m__float32__vec__b2__cpu"])
def test_a_linked_artifacts_folder_is_refused(tmp_path: Path, link: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "out" / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "out" / link).symlink_to(outside)
    with pytest.raises(UserError, match="is a symbolic link"):
        _repro(tmp_path / "out" / "artifacts" / "m__float32__vec__b2__cpu")
    assert list(outside.iterdir()) == []


def test_run_refuses_an_artifacts_link_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "artifacts").symlink_to(tmp_path)
    code, err = cli_run(capsys, "run", str(DATA / "secrets.yml"), "--out", str(out),
                        "--no-cache")
    assert code == 2
    assert err == [f"--out: {out / 'artifacts'} is a symbolic link (expected a folder for the "
                   "repro folders, or a path that does not exist yet; parity-gate never writes "
                   "through a link)"]


# -- secrets, in one real run ---------------------------------------------------------------


@pytest.fixture(scope="module")
def secrets_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A real run whose export error (token_export) and output name (token_output) hold a
    token, into a fresh cache; the repro folder's repro.py is a planted link."""
    root = tmp_path_factory.mktemp("secrets")
    out, cache, victim = root / "out", root / "cache", root / "victim.py"
    victim.write_text("precious\n")
    planted = out / "artifacts" / OUTPUT_CASE.replace("/", "__")
    planted.mkdir(parents=True)
    (planted / "repro.py").symlink_to(victim)
    saved = os.environ.get("PG_HARDEN_TOKEN")
    os.environ["PG_HARDEN_TOKEN"] = TOKEN  # the gate's credential, masked in what it writes
    secret_file = root / "secret.txt"  # how the model knows the same value
    secret_file.write_text(TOKEN)
    os.environ["PG_HARDEN_SECRET_FILE"] = str(secret_file)
    try:
        code = cli.main(["run", str(DATA / "secrets.yml"), "--out", str(out), "--cache-dir",
                         str(cache), "--quiet"])
    finally:
        os.environ.pop("PG_HARDEN_SECRET_FILE", None)
        if saved is None:
            os.environ.pop("PG_HARDEN_TOKEN", None)
        else:
            os.environ["PG_HARDEN_TOKEN"] = saved
    assert code == 1
    yield {"out": out, "cache": cache, "victim": victim, "repro": planted}


def _holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
            and needle in p.read_bytes()]


@pytest.mark.process
def test_no_file_the_gate_writes_holds_the_token(secrets_run: dict[str, Path]) -> None:
    out, cache = secrets_run["out"], secrets_run["cache"]
    assert _holding(out, TOKEN.encode()) == [] and _holding(cache, TOKEN.encode()) == []
    results = json.loads((out / "results.json").read_text())
    reasons = {c["id"]: c["reason"] for c in results["cases"]}
    assert "token=***" in reasons[EXPORT_CASE]  # masked, not dropped
    # a failed export is never cached (it runs again in every run): nothing of it is stored
    stored = [json.loads(p.read_text()) for p in cache.rglob("entry.json")]
    assert all("failure" not in e["info"] for e in stored)


@pytest.mark.process
def test_repro_files_holding_the_token_are_withheld_with_a_note(
        secrets_run: dict[str, Path]) -> None:
    folder = secrets_run["repro"]
    case = json.loads((folder / "case.json").read_text())
    assert case["outputs"] == ["logits_***"]
    assert not (folder / "model.onnx").exists() and not (folder / "expected.npz").exists()
    note = (folder / "WITHHELD.txt").read_text().splitlines()
    assert note[0] == ("model.onnx withheld: it holds the value of a secret (a token in a "
                       "tensor or node name, say); the reports show it as ***")
    assert (folder / "inputs.npz").is_file()  # its key `x` holds no secret
    # the planted repro.py link: refused, its target untouched
    assert secrets_run["victim"].read_text() == "precious\n"
    assert (folder / "repro.py").is_symlink()


# -- journal and merge inputs that repeat or invent cases ------------------------------------


@pytest.mark.process
def test_journal_recovery_flags_unplanned_and_conflicting_lines(
        secrets_run: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    lines = (secrets_run["out"] / "journal.jsonl").read_text().splitlines()
    lines = [line for line in lines if not line.startswith('{"end"')]
    doc = next(json.loads(line) for line in lines if f'"{OUTPUT_CASE.split("/")[0]}"' in line
               and line.startswith('{"case"'))
    passing = {**doc["case"], "outcome": "pass", "reason": "", "localisation": None}
    ghost = {**doc["case"], "key": {**doc["case"]["key"], "module": "ghost"}}
    journal = tmp_path / "journal.jsonl"
    journal.write_text("\n".join([*lines, json.dumps({"case": passing}),
                                  json.dumps({"case": ghost})]) + "\n")
    code, _ = cli_run(capsys, "report", "--from-journal", str(journal))
    assert code == 1
    results = json.loads((tmp_path / "results.json").read_text())
    outcomes = {c["id"]: c["outcome"] for c in results["cases"]}
    assert outcomes == {OUTPUT_CASE: "mismatch", EXPORT_CASE: "export_error"}
    flagged = [f["message"] for f in results["findings"] if f["kind"] == "journal"]
    n = len(lines)
    assert flagged == [
        f"{journal}:{n + 1}: case {OUTPUT_CASE} again, now pass where line "
        f"{flagged[0].split('where line ')[1].split(' ')[0]} said mismatch; the failure is kept",
        f"{journal}:{n + 2}: case ghost/float32/vec/b2/cpu was not planned by this run (not "
        "among the header's planned ids); left out"]


@pytest.mark.process
def test_merge_refuses_a_case_twice_in_one_file(
        secrets_run: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((secrets_run["out"] / "results.json").read_text())
    i = next(i for i, c in enumerate(doc["cases"]) if c["id"] == OUTPUT_CASE)
    doc["cases"].append({**doc["cases"][i], "outcome": "pass"})
    shard = tmp_path / "results.json"
    shard.write_text(json.dumps(doc))
    code, err = cli_run(capsys, "merge", str(shard), "--out", str(tmp_path / "merged"))
    assert code == 2
    n = len(doc["cases"]) - 1
    assert err == [f"{shard}: cases[{n}]: case {OUTPUT_CASE} again (also cases[{i}], mismatch "
                   "there, pass here; expected each case once)"]
    assert not (tmp_path / "merged" / "results.json").exists()


@pytest.mark.process
def test_a_step_summary_that_is_a_folder_is_one_line_and_the_reports_are_written(
        secrets_run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    step = tmp_path / "step-summary"
    step.mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    out = tmp_path / "again"
    code, err = cli_run(capsys, "merge", str(secrets_run["out"] / "results.json"), "--out",
                        str(out))
    assert code == 2
    assert err == [f"GITHUB_STEP_SUMMARY: {step} is a folder (expected a regular file or a new "
                   "path; reports never follow links or replace special files)"]
    assert sorted(p.name for p in out.iterdir()) == ["junit.xml", "report.html",
                                                      "results.json", "summary.md"]


# -- real processes: a full disk, a closed pipe, two runs at once ----------------------------


def _project(root: Path, module: str, kwargs: str, batches: str = "[1, 2, 3, 4]") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "parity.yml").write_text(f"""version: 1
python_path: [{DATA}]
defaults:
  batch_sizes: {batches}
  dtypes: [float32]
providers:
  cpu: {{required: true}}
fixtures:
  vec:
    kind: random
    samples: 1
    inputs:
      x: {{shape: [batch, 4]}}
modules:
  - name: {module}
    factory: models:{module}
    kwargs: {kwargs}
    fixtures: [vec]
    inputs:
      - {{name: x, dynamic: {{0: batch}}}}
""")
    return root / "parity.yml"


def _gate(*argv: str, cwd: Path, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(cwd)}  # a crash file would land here
    return subprocess.Popen([sys.executable, "-m", "parity_gate", *argv], cwd=cwd, env=env,
                            text=True, **kw)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or 'not permitted'}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.process
@pytest.mark.parametrize("spare", [0, 16384])
def test_a_full_disk_is_one_line_per_path_after_the_reports_that_fit(
        tmp_path: Path, tmpfs: Path, spare: int) -> None:
    """The factory fills the tmpfs under --out, then frees `spare` bytes: with none left the
    journal stops (said once) and every report fails, the summary going to stdout; with
    four pages the summary (smallest, written first) fits and the rest fail."""
    manifest = _project(tmp_path / "p", "filler", f"{{path: {tmpfs / 'fill'}, spare: {spare}}}")
    out = tmpfs / "out"
    proc = _gate("run", str(manifest), "--out", str(out), "--no-cache", "--quiet",
                 cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr
    full = "No space left on device"
    reports = [f"--out: cannot write {out / name}: {full} (expected room for the reports "
               "there; the smaller ones are written first)"
               for name in ("summary.md", "results.json", "junit.xml", "report.html")]
    if spare == 0:
        assert stderr.splitlines() == [
            f"parity-gate: --out: cannot write {out / 'journal.jsonl'}: {full} (expected a "
            "folder with room for the journal and the reports); the journal stops here, the "
            "run goes on", *reports]
        assert stdout.startswith("## ✅ parity-gate: all 4 cases match eager")
    else:  # the summary fits; of the larger reports, each is written whole or named once
        failed = stderr.splitlines()
        assert failed and set(failed) <= set(reports[1:]) and len(set(failed)) == len(failed)
        for name, line in zip(("results.json", "junit.xml", "report.html"), reports[1:],
                              strict=True):
            assert (line in failed) != (out / name).is_file(), name
        assert (out / "summary.md").read_text().startswith(
            "## ✅ parity-gate: all 4 cases match eager")
        assert stdout == ""
    assert not list(tmp_path.glob("parity-gate-crash-*"))


@pytest.mark.process
def test_a_reader_that_goes_away_ends_nothing_early(tmp_path: Path) -> None:
    """`parity-gate schema | head -1`, and a run whose console is closed: no traceback, no
    crash file; the run still writes its reports and exits with its verdict."""
    schema = _gate("schema", cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert schema.stdout is not None
    schema.stdout.close()  # the reader is gone before the first line
    _, stderr = schema.communicate(timeout=120)
    assert (schema.returncode, stderr) == (0, "")
    manifest = _project(tmp_path / "p", "sleeper", "{seconds: 0}", "[2]")
    run = _gate("run", str(manifest), "--out", str(tmp_path / "out"), "--no-cache",
                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert run.stdout is not None
    run.stdout.close()
    assert run.wait(timeout=300) == 0
    assert json.loads((tmp_path / "out" / "results.json").read_text())["verdict"][
        "result"] == "pass"
    assert not list(tmp_path.glob("parity-gate-crash-*"))


@pytest.mark.process
def test_a_second_run_into_a_live_out_folder_is_refused(tmp_path: Path) -> None:
    manifest = _project(tmp_path / "p", "sleeper", "{seconds: 6}", "[2]")
    out = tmp_path / "out"
    first = _gate("run", str(manifest), "--out", str(out), "--no-cache", "--quiet",
                  cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (out / "journal.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    second = subprocess.run([sys.executable, "-m", "parity_gate", "run", str(manifest),
                             "--out", str(out), "--no-cache", "--quiet"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2
    assert second.stderr.splitlines() == [
        f"--out: {out} is in use by another parity-gate run (pid {first.pid}) (expected one "
        "run per out folder: give this one its own --out, or wait for that one)"]
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert not list(out.glob("journal-*.interrupted.jsonl"))
    assert (out / "journal.jsonl").read_text().splitlines()[-1].startswith('{"end"')
