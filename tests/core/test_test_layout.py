"""The test units stand alone: ``pytest tests/<unit>`` collects and runs without the others.

A test file that imports another test file (``from test_stamp import ...``) only works when
pytest happens to have put that file's folder on ``sys.path``; shared helpers live in the
modules beside ``conftest.py`` (``samples``, ``tiny_models``, ``chroma_server``).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_file_imports_another_test_file():
    files = sorted(TESTS.rglob("test_*.py"))
    test_modules = {f.stem for f in files}
    assert len(files) > 50
    offenders = {
        str(f.relative_to(TESTS)): sorted(_imported_modules(f) & test_modules) for f in files
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_every_unit_is_a_folder_of_tests_with_the_shared_helpers_beside_conftest():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert loose == [], "test files live in a unit folder"
    for helper in ("conftest.py", "samples.py", "tiny_models.py", "chroma_server.py"):
        assert (TESTS / helper).is_file(), helper
