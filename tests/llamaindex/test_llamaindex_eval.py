"""``ctxemb eval --via llamaindex`` and ``--via llamaindex-pgvector`` reproduce the published
figures of the bundled MiniLM (SciFact nDCG@10, STS-B test Spearman), as every other path does.

SciFact-scale (5,183 documents embedded, or read from the run's evaluation cache): kept apart
from tests/llamaindex/test_llamaindex.py so CI can carry it or not.
"""

from __future__ import annotations

import json

import pytest

from ctxemb_core.cli import main

pytest.importorskip("llama_index.core", reason="the llamaindex extra is not installed")

SCIFACT_NDCG10 = 0.64508  # MTEB's published figure for all-MiniLM-L6-v2
STSB_SPEARMAN = 0.82032


def _eval(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["eval", *args]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
def test_llamaindex_paths_reproduce_the_published_figures(capsys, data_dir, pg):
    scifact = ("--data", str(data_dir / "scifact"))
    sts = ("--task", "sts", "--data", str(data_dir / "stsbenchmark"))
    dsn = ("--dsn", pg.ctxemb_dsn)
    memory = _eval(capsys, "--via", "llamaindex", *scifact)
    assert abs(memory["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.0005, memory
    table = _eval(capsys, "--via", "llamaindex-pgvector", *dsn, *scifact)
    assert abs(table["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.005, table
    # The CLI's own path reads the table LlamaIndex wrote: nothing is indexed again.
    assert _eval(capsys, "--via", "pgvector", *dsn, *scifact)["indexed_now"] == 0
    for via in ("llamaindex", "llamaindex-pgvector"):
        pairs = _eval(capsys, "--via", via, *(dsn if "pg" in via else ()), *sts)
        assert abs(pairs["unrounded"]["spearman"] - STSB_SPEARMAN) <= 0.0005, pairs
