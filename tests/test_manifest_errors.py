"""Malformed manifests: each problem is one located line, all at once, exit 2, no traceback."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from parity_gate.cli import main

BASE = textwrap.dedent("""\
    version: 1
    defaults:
      batch_sizes: [1, 4]
      dtypes: [float32]
      tolerances:
        float32: {atol: 1e-5, rtol: 1e-3}
    providers:
      cpu: {required: true}
    fixtures:
      images:
        kind: random
        samples: 2
        inputs:
          x: {shape: [batch, 3, 8, 8]}
      recorded:
        kind: file
        path: data.npz
    modules:
      - name: cnn
        factory: models:build
        inputs:
          - name: x
            dynamic: {0: batch}
        fixtures: [images, recorded]
    """)


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "models.py").write_text("def build():\n    return None\n")
    import numpy as np

    np.savez(tmp_path / "data.npz", x=np.zeros((4, 3, 8, 8), np.float32))
    path = tmp_path / "parity.yml"
    path.write_text(text)
    return path


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    path = write(tmp_path, text)
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    for line in lines:
        assert line.startswith(f"{path}:"), line
    return [ln[len(str(path)) + 1:] for ln in lines]


CASES = [
    # (id, old text, new text, expected "LINE:COL: key.path: fragment")
    ("misspelled top key", "modules:\n", "moduls:\n",
     "18:1: moduls: unknown key; did you mean `modules`?"),
    ("misspelled nested key", "    samples: 2", "    sampels: 2",
     "12:5: fixtures.images.sampels: unknown key; did you mean `samples`?"),
    ("bad dtype", "dtypes: [float32]", "dtypes: [flaot32]",
     "4:12: defaults.dtypes[0]: invalid value 'flaot32'; did you mean `float32`?"),
    ("negative atol", "{atol: 1e-5,", "{atol: -1,",
     "6:21: defaults.tolerances.float32.atol: got -1 (expected a number >= 0"),
    ("batch size zero", "batch_sizes: [1, 4]", "batch_sizes: [0, 4]",
     "3:17: defaults.batch_sizes[0]: got 0 (expected a number >= 1)"),
    ("infinite rtol", "rtol: 1e-3}", "rtol: .inf}",
     "6:33: defaults.tolerances.float32.rtol: got inf (expected a finite number)"),
    ("batch size a boolean", "batch_sizes: [1, 4]", "batch_sizes: [true, 4]",
     "3:17: defaults.batch_sizes[0]: got True (expected an integer)"),
    ("dynamic dim beyond the rank", "dynamic: {0: batch}", "dynamic: {0: batch, 7: seq}",
     "23:32: modules[0].inputs[0].dynamic[7]: dim 7 of input 'x' is beyond its rank 4 in "
     "fixture set 'images' (expected an index from 0 to 3)"),
    ("batch size not a number", "batch_sizes: [1, 4]", "batch_sizes: [1, four]",
     "3:20: defaults.batch_sizes[1]: got 'four' (expected an integer)"),
    ("unknown fixture kind", "kind: random", "kind: randm",
     "11:11: fixtures.images.kind: unknown fixture kind 'randm'; did you mean `random`?"),
    ("missing factory", "    factory: models:build\n", "",
     "19:5: modules[0].factory: required key `factory` is missing"),
    ("factory without colon", "factory: models:build", "factory: models.build",
     "20:14: modules[0].factory: got 'models.build' (expected `package.module:callable`)"),
    ("factory module absent", "factory: models:build", "factory: nowhere.models:build",
     "20:14: modules[0].factory: cannot find module 'nowhere.models'"),
    ("unknown fixture set", "fixtures: [images, recorded]", "fixtures: [imagse, recorded]",
     "24:16: modules[0].fixtures[0]: unknown fixture set 'imagse'; did you mean `images`?"),
    ("fixture misses an input", "      - name: x\n", "      - name: y\n",
     "24:16: modules[0].fixtures[0]: fixture set 'images' has no tensor for input(s) y"),
    ("unknown dim symbol", "[batch, 3, 8, 8]", "[batch, 3, h, 8]",
     "14:29: fixtures.images.inputs.x.shape[2]: unknown dim symbol 'h'"),
    ("missing data file", "path: data.npz", "path: missing.npz",
     "17:11: fixtures.recorded.path: file 'missing.npz' not found"),
    ("unsupported file type", "path: data.npz", "path: data.csv",
     "17:11: fixtures.recorded.path: unsupported file type '.csv'"),
    ("unknown provider", "  cpu: {required: true}", "  gpu: {required: true}",
     "8:3: providers.gpu: invalid value 'gpu'; did you mean `cpu`?"),
    ("required not a bool", "{required: true}", "{required: maybe}",
     "8:19: providers.cpu.required: got 'maybe' (expected true or false)"),
    ("duplicate key", "version: 1\n", "version: 1\nversion: 1\n",
     "2:1: version: duplicate key"),
    ("bad version", "version: 1", "version: 2",
     "1:10: version: invalid value 2 (expected 1)"),
    ("samples out of range", "samples: 2", "samples: 0",
     "12:14: fixtures.images.samples: got 0 (expected a number >= 1)"),
    ("modules empty", "modules:\n", "modules: []\nx_modules:\n",
     "18:10: modules: got an empty list (expected at least one entry here)"),
    ("exporter misspelled", "defaults:\n", "defaults:\n  export: {exporter: dynamic}\n",
     "3:22: defaults.export.exporter: invalid value 'dynamic'; did you mean `dynamo`?"),
    ("invalid yaml", "  images:\n", "  images: [\n",
     "invalid YAML"),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_malformed_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str,
                            new: str, expected: str) -> None:
    assert old in BASE
    lines = check(tmp_path, BASE.replace(old, new, 1), capsys)
    assert any(expected in line for line in lines), "\n".join(lines)


def test_misspelt_required_key_is_reported_once_at_the_typo(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = check(tmp_path, BASE.replace("modules:\n", "moduls:\n", 1), capsys)
    assert lines == ["18:1: moduls: unknown key; did you mean `modules`? (expected one of: "
                     "defaults, fixtures, include, localise, modules, providers, python_path, "
                     "seed, version)"]


@pytest.mark.process  # check imports the factories in a process of their own
def test_valid_base_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(write(tmp_path, BASE))]) == 0


def test_every_problem_reported_at_once(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    text = (BASE.replace("dtypes: [float32]", "dtypes: [flaot32]")
            .replace("fixtures: [images, recorded]", "fixtures: [imagse, recorded]")
            .replace("    samples: 2", "    sampels: 2"))
    lines = check(tmp_path, text, capsys)
    assert len(lines) == 3, lines
    assert [ln.split(":")[0] for ln in lines] == ["4", "12", "24"]  # sorted by line


def test_missing_manifest_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "nope.yml")]) == 2
    assert "manifest not found" in capsys.readouterr().err


def test_bad_cli_usage_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--jobs", "zero"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs" in err[0]


# ------------------------------------------------------------------ include

SHARED = textwrap.dedent("""\
    version: 1
    defaults:
      batch_sizes: [2]
    fixtures:
      images:
        kind: random
        inputs:
          x: {shape: [batch, 3, 8, 8]}
      recorded:
        kind: file
        path: data.npz
    """)

MAIN = textwrap.dedent("""\
    version: 1
    include: [shared/fixtures.yml]
    defaults:
      dtypes: [float32, float16]
    modules:
      - name: cnn
        factory: models:build
        inputs: [{name: x}]
        fixtures: [images, recorded]
    """)


def write_pair(tmp_path: Path, main_text: str = MAIN, shared_text: str = SHARED) -> Path:
    import numpy as np

    (tmp_path / "models.py").write_text("def build():\n    return None\n")
    (tmp_path / "shared").mkdir(exist_ok=True)
    np.savez(tmp_path / "shared" / "data.npz", x=np.zeros((4, 3, 8, 8), np.float32))
    (tmp_path / "shared" / "fixtures.yml").write_text(shared_text)
    path = tmp_path / "parity.yml"
    path.write_text(main_text)
    return path


def test_include_joins_fixtures_and_defaults(tmp_path: Path) -> None:
    from parity_gate.manifest.load import load_manifest
    from parity_gate.manifest.models import FileFixture, resolve_settings

    manifest = load_manifest(write_pair(tmp_path))
    assert list(manifest.fixtures) == ["images", "recorded"]
    recorded = manifest.fixtures["recorded"]
    assert isinstance(recorded, FileFixture)  # a path relative to the file that wrote it
    assert Path(recorded.path) == tmp_path / "shared" / "data.npz"
    settings = resolve_settings(manifest, manifest.modules[0])
    assert settings.batch_sizes == [2] and settings.dtypes == ["float32", "float16"]
    assert manifest.modules[0].locate("inputs[0].name") == f"{tmp_path / 'parity.yml'}:8:21: " \
        "modules[0].inputs[0].name"


def test_every_top_level_key_survives_include(tmp_path: Path) -> None:
    """An included file's setting of any top-level key reaches the merged manifest (the
    merge copied only some keys: `localise:` in an included file was silently dropped).
    Each key the schema lists is set, in the included file only, to a non-default value."""
    from parity_gate.manifest.load import load_manifest
    from parity_gate.manifest.models import Manifest

    values = {
        "python_path": "python_path: [lib]",
        "seed": "seed: 7",
        "defaults": "defaults:\n  timeout_s: 77",
        "providers": "providers:\n  cuda: {required: false}",
        "localise": "localise:\n  max_cases: 9\n  artefacts: pass",
    }
    own = {"version", "include", "fixtures", "modules"}  # the pair sets these already
    assert set(Manifest.model_fields) - own == set(values), "a new top-level key: add it here"
    (tmp_path / "shared" / "lib").mkdir(parents=True)
    path = write_pair(tmp_path, shared_text=SHARED.replace(
        "defaults:\n  batch_sizes: [2]\n", "") + "\n".join(values.values()) + "\n")
    manifest = load_manifest(path)
    assert manifest.python_path[-1] == str(tmp_path / "shared" / "lib")
    assert manifest.seed == 7
    assert manifest.defaults.timeout_s == 77
    assert "cuda" in manifest.providers
    assert manifest.localise.max_cases == 9 and manifest.localise.artefacts == "pass"


def test_problems_in_an_included_file_point_into_it(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "shared" / "lib").mkdir(parents=True)
    path = write_pair(tmp_path, shared_text=SHARED.replace("kind: random", "kind: randm"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{tmp_path / 'shared' / 'fixtures.yml'}:6:11: fixtures.images.kind: unknown "
                   "fixture kind 'randm'; did you mean `random`? (expected one of: random, "
                   "edge, file)"]


def test_a_bad_fixture_file_of_an_included_set_points_into_that_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_pair(tmp_path)
    (tmp_path / "shared" / "data.npz").write_bytes(b"not a zip")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"{tmp_path / 'shared' / 'fixtures.yml'}:11:11: fixtures.recorded.path: "), err
    assert "has no NumPy header (a text file?)" in err[0]


@pytest.mark.parametrize(("main_text", "shared_text", "expected"), [
    (MAIN.replace("shared/fixtures.yml", "shared/nope.yml"), SHARED,
     "parity.yml:2:11: include[0]: file 'shared/nope.yml' not found (expected a manifest "
     "relative to this file)"),
    (MAIN, SHARED + "include: [../parity.yml]\n",
     "fixtures.yml:12:11: include[0]: '../parity.yml' includes this file again (expected no "
     "include cycle)"),
    (MAIN.replace("modules:", "fixtures:\n  images: {kind: random, inputs: {x: {shape: [1]}}}\n"
                  "modules:"), SHARED,
     "parity.yml:6:3: fixtures.images: fixture set 'images' is also defined in "),
    (MAIN, SHARED + "modules:\n  - {name: cnn, factory: 'models:build', inputs: [{name: x}], "
     "fixtures: [images]}\n",
     "parity.yml:6:11: modules[0].name: module 'cnn' is also defined in "),
    (MAIN.replace("include: [shared/fixtures.yml]\n", ""), SHARED,
     "parity.yml:8:16: modules[0].fixtures[0]: unknown fixture set 'images'"),
])
def test_include_problems_are_located(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      main_text: str, shared_text: str, expected: str) -> None:
    path = write_pair(tmp_path, main_text, shared_text)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert any(expected in line for line in err.splitlines()), err


def test_several_sizes_of_a_dim_must_be_sizes(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE.replace("samples: 2\n", "samples: 2\n    dims: {n: [8, -1]}\n")
    lines = check(tmp_path, text, capsys)
    assert any(ln.startswith("13:") and "fixtures.images.dims.n" in ln and ">= 0" in ln
               for ln in lines), lines


# `check` opens file fixture sets as a run would: (how data.npz is spoiled, the one line)
FILE_FIXTURE_BAD = {
    "corrupt": (lambda p: p.write_bytes(p.read_bytes()[:40]),
                r"^17:11: fixtures\.recorded\.path: .*data\.npz: is not a valid zip archive"),
    "text": (lambda p: p.write_text("x,y\n1,2\n"),
             r"^17:11: fixtures\.recorded\.path: .*data\.npz: .*\(expected a NumPy \.npz"),
    "no-array": (lambda p: __import__("numpy").savez(p, y=__import__("numpy").zeros(2),
                                                      z=__import__("numpy").zeros(2)),
                 r"^17:11: fixtures\.recorded\.path: module 'cnn': data\.npz: no array 'x' for "
                 r"input 'x' \(has: y, z\)"),
    "no-rows": (lambda p: __import__("numpy").savez(p, x=__import__("numpy").float32(1)),
                r"^17:11: fixtures\.recorded\.path: module 'cnn': data\.npz: array 'x' needs "
                r"rows along axis 0"),
}


@pytest.mark.parametrize("kind", list(FILE_FIXTURE_BAD))
def test_check_opens_file_fixtures(kind: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A fixture file a run could not read is found by `check`, at the set's `path`."""
    spoil, expected = FILE_FIXTURE_BAD[kind]
    path = write(tmp_path, BASE)
    spoil(tmp_path / "data.npz")
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:"), err
    assert re.search(expected, lines[0][len(str(path)) + 1:]), lines[0]


def test_check_names_the_dynamic_dim_a_file_array_lacks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    text = BASE.replace("dynamic: {0: batch}", "dynamic: {0: batch, 2: height}").replace(
        "path: data.npz", "path: data.npz\n    keys: {x: images}")
    path = write(tmp_path, text)
    np.savez(tmp_path / "data.npz", images=np.zeros((4, 3), np.float32))
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().endswith(
        "fixtures.recorded.keys: module 'cnn': the array for input 'x' has 2 dim(s) (shape "
        "[1, 3]) but the input declares dynamic dim 2 ('height') (expected at least 3 dims, "
        "rows along axis 0)"), err


@pytest.mark.process  # check imports the factories in a process of their own
def test_check_reports_the_fixture_files_it_read(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(write(tmp_path, BASE))]) == 0
    assert capsys.readouterr().out.strip().endswith(
        ": OK (1 modules, 2 fixture sets, 1 fixture file(s) read)")
