"""A reader runs an example again: the snippets that write into a folder of the working
directory run twice there (and the pgvector page's two snippets, which share ./pgdata, one after
the other, twice) and print the same each time. They write with ``upsert``, which replaces the
records of ids already there, where ``add`` refuses them (ExistingIdsError)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_readme import PYTHON, _explain, matches, run_python

pytestmark = pytest.mark.heavy  # six snippet processes, each loading the model

#: The snippets run again, by page, in the order a reader runs them.
RERUN = {
    "README.md": ['PersistentClient("./index")'],
    "docs/pgvector.md": ['local_server("./pgdata")  # a throwaway', "ForeignVectorsError"],
}


def _blocks(source: str) -> list:
    found = []
    for marker in RERUN[source]:
        (block,) = [b for b in PYTHON if b.source == source and marker in b.text]
        found.append(block)
    return found


@pytest.mark.parametrize("source", sorted(RERUN))
def test_snippets_run_again_in_the_same_folder(source: str, tmp_path: Path) -> None:
    blocks = _blocks(source)
    for round in (1, 2):
        for block in blocks:
            assert block.output is not None
            expected = block.output.text.splitlines()
            actual = run_python(block, tmp_path).splitlines()
            assert matches(expected, actual), _explain(
                f"{block.name} (run {round})", expected, actual
            )
