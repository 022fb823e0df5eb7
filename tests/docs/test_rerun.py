"""A reader runs an example again: the snippets that write into a folder of the working
directory run twice there (the pgvector page's two snippets, which share ./pgdata, one after the
other, twice) and print the same each time. They write with ``upsert``, which replaces the
records of ids already there, where ``add`` refuses them (ExistingIdsError).

What is re-run is what a folder keeps between runs, so the runs share one process (one import
of the model, ~5 CPU-s, instead of six), each snippet executed in fresh globals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import PYTHON, _env, _explain, matches

pytestmark = pytest.mark.heavy  # the model loaded, PostgreSQL started: ~10 s

#: The snippets run again, by page, in the order a reader runs them.
RERUN = {
    "README.md": ['PersistentClient("./index")'],
    "docs/pgvector.md": ['local_server("./pgdata")  # a throwaway', "ForeignVectorsError"],
}

# Runs each (folder, snippet) in turn in fresh globals; prints one JSON list of their outputs.
_DRIVER = """
import contextlib, io, json, os, sys
outs = []
for folder, code in json.loads(sys.stdin.read()):
    os.chdir(folder)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "snippet.py", "exec"), {"__name__": "__main__"})
    outs.append(out.getvalue())
print(json.dumps(outs))
"""


def test_snippets_run_again_in_the_same_folder(tmp_path: Path) -> None:
    runs = []
    for source, markers in RERUN.items():
        folder = tmp_path / source.replace("/", "-")
        folder.mkdir()
        for marker in markers * 2:
            (block,) = [b for b in PYTHON if b.source == source and marker in b.text]
            runs.append((str(folder), block))
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", _DRIVER],
        input=json.dumps([(folder, block.text) for folder, block in runs]),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    outputs = json.loads(done.stdout.splitlines()[-1])
    for n, ((_, block), out) in enumerate(zip(runs, outputs, strict=True)):
        assert block.output is not None
        expected = block.output.text.splitlines()
        name = f"{block.name} (run {n + 1} in its folder's sequence)"
        assert matches(expected, out.splitlines()), _explain(name, expected, out.splitlines())
