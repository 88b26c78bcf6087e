"""The package's shape: no import cycle anywhere, and the stage layers import downwards.

Both are read from the real import graph (grimp, which import-linter is built on),
lazy imports inside functions included. The cycle check counts `if TYPE_CHECKING:`
imports too (a cycle of types is still a cycle of meaning); the layer contract
leaves them out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("parity_gate", exclude_type_checking_imports=False, cache_dir=None)


def test_no_import_cycle() -> None:
    graph = _graph()
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                cycles.append(" → ".join((module, *back)))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.process
def test_layer_contract_is_kept() -> None:
    """pyproject's [tool.importlinter] layers: the same check CI's lint-imports runs."""
    script = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(script), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_a_cycle_would_be_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle check itself can fail: two modules importing each other are caught."""
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyc import b\n")
    (pkg / "b.py").write_text("import cyc.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyc", cache_dir=None)
    assert graph.find_shortest_chain(importer="cyc.b", imported="cyc.a") == ("cyc.b", "cyc.a")
    assert graph.find_shortest_chain(importer="cyc.a", imported="cyc.b") == ("cyc.a", "cyc.b")
