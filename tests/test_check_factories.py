"""`parity-gate check` imports every factory, in one sandboxed process, and calls none: a
misspelt, missing or non-callable factory is a located manifest error (exit 2) before any
run, not an error outcome once a worker starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

MODULE = """\
  - name: {name}
    factory: {factory}
    inputs: [{{name: x, dynamic: {{0: batch}}}}]
    fixtures: [feats]
"""


def manifest(root: Path, factories: dict[str, str]) -> Path:
    path = root / "parity.yml"
    path.write_text(textwrap.dedent("""\
        version: 1
        python_path: [src]
        fixtures:
          feats:
            kind: random
            inputs:
              x: {shape: [batch, 4]}
        modules:
        """) + "".join(MODULE.format(name=n, factory=f) for n, f in factories.items()))
    return path


def team_code(root: Path) -> None:
    """`src/acmeml`: each import notes its pid and whether it saw a token; a call to a
    factory leaves a file (check must call none)."""
    pkg = root / "src" / "acmeml"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ranker.py").write_text(textwrap.dedent(f"""\
        import os
        with open({str(root / "imports.log")!r}, "a") as fh:
            fh.write(f"{{os.getpid()}} {{'GITHUB_TOKEN' in os.environ}}\\n")
        CONFIG = {{"width": 4}}

        def build():
            open({str(root / "called")!r}, "w").close()

        def build_small():
            build()
        """))
    (pkg / "needs_dep.py").write_text("import acme_private_dependency_not_installed\n")
    (pkg / "dies.py").write_text("import os\nos._exit(0)\n")


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parity_gate", "check", str(path)],
                          capture_output=True, text=True, timeout=300, cwd=path.parent,
                          env={**os.environ, "GITHUB_TOKEN": "ghs_not_for_model_code"})


def test_a_good_manifest_imports_each_factory_in_the_sandbox_and_calls_none(
        tmp_path: Path) -> None:
    team_code(tmp_path)
    path = manifest(tmp_path, {"ranker": "acmeml.ranker:build",
                               "small": "acmeml.ranker:build_small"})
    done = check(path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{path}: OK (2 modules, 1 fixture sets)"
    imports = (tmp_path / "imports.log").read_text().split()
    assert imports[1:] == ["False"]  # imported once, without the token
    assert int(imports[0]) != os.getpid()
    assert not (tmp_path / "called").exists()


def test_misspelt_missing_and_non_callable_factories_are_located_lines(
        tmp_path: Path) -> None:
    team_code(tmp_path)
    path = manifest(tmp_path, {
        "good": "acmeml.ranker:build",
        "typo": "acmeml.ranker:biuld",
        "gone": "json.decodr:JSONDecoder",  # an installed package: only an import can tell
        "data": "acmeml.ranker:CONFIG",
        "deep": "acmeml.ranker:build.inner",
        "dep": "acmeml.needs_dep:build",
    })
    done = check(path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    expected = "(expected a function or class that returns the nn.Module)"
    assert done.stderr.splitlines() == [
        f"{path}:14:14: modules[1].factory: module 'acmeml.ranker' has no attribute "
        f"'biuld'; did you mean `build`? {expected}",
        f"{path}:18:14: modules[2].factory: no module named 'json.decodr'; did you mean "
        "`decoder`? (expected a module under the manifest folder or `python_path`, or an "
        "installed package)",
        f"{path}:22:14: modules[3].factory: 'acmeml.ranker:CONFIG' is a dict, not callable "
        f"{expected}",
        f"{path}:26:14: modules[4].factory: 'acmeml.ranker:build' has no attribute 'inner' "
        f"{expected}",
        f"{path}:30:14: modules[5].factory: importing 'acmeml.needs_dep' failed: its "
        "dependency 'acme_private_dependency_not_installed' is not installed (expected "
        "every package the factory imports to be installed where the gate runs)",
    ]
    pids = {line.split()[0] for line in (tmp_path / "imports.log").read_text().splitlines()}
    assert len(pids) == 1  # every factory of the manifest in one process
    assert not (tmp_path / "called").exists()


def test_a_local_module_that_does_not_exist_is_found_before_any_import(
        tmp_path: Path) -> None:
    team_code(tmp_path)
    path = manifest(tmp_path, {"good": "acmeml.ranker:build", "gone": "acmeml.rankr:build"})
    done = check(path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"{path}:14:14: modules[1].factory: cannot find module 'acmeml.rankr' (expected a "
        "file acmeml/rankr.py under the manifest folder or `python_path`, or an installed "
        "package)"]
    assert not (tmp_path / "imports.log").exists()


def test_an_import_that_ends_the_process_is_named_and_the_rest_still_checked(
        tmp_path: Path) -> None:
    team_code(tmp_path)
    path = manifest(tmp_path, {"dies": "acmeml.dies:build", "typo": "acmeml.ranker:buld"})
    done = check(path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (f"{path}:10:14: modules[0].factory: importing 'acmeml.dies' ended "
                        "the process with status 0 (expected the module to import as a "
                        "worker imports it)")
    assert lines[1].startswith(f"{path}:14:14: modules[1].factory: module 'acmeml.ranker' "
                               "has no attribute 'buld'; did you mean `build`?")
    assert len(lines) == 2
