"""``ctxemb eval --via llamaindex`` and ``--via llamaindex-pgvector`` reproduce the published
figures of the bundled MiniLM (SciFact nDCG@10, STS-B test Spearman), as every other path does.

SciFact-scale, the vectors read from the run's evaluation cache (tests/conftest.py's
EVALUATION_SETS). The PostgreSQL path (an HNSW build of the corpus, ~60 CPU-s) is marked
``figures_extra``: ``make bench-check`` runs it, ``make test`` leaves it out while CI is at its
900 s.
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
def test_the_llamaindex_path_reproduces_the_published_figures(capsys, data_dir):
    memory = _eval(capsys, "--via", "llamaindex", "--data", str(data_dir / "scifact"))
    assert abs(memory["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.0005, memory
    sts = ("--task", "sts", "--data", str(data_dir / "stsbenchmark"))
    pairs = _eval(capsys, "--via", "llamaindex", *sts)
    assert abs(pairs["unrounded"]["spearman"] - STSB_SPEARMAN) <= 0.0005, pairs


@pytest.mark.slow
@pytest.mark.figures_extra
def test_the_llamaindex_pgvector_path_reproduces_the_published_figures(capsys, data_dir, pg):
    scifact = ("--data", str(data_dir / "scifact"))
    sts = ("--task", "sts", "--data", str(data_dir / "stsbenchmark"))
    dsn = ("--dsn", pg.ctxemb_dsn)
    table = _eval(capsys, "--via", "llamaindex-pgvector", *dsn, *scifact)
    assert abs(table["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.005, table
    # The CLI's own path reads the table LlamaIndex wrote: nothing is indexed again.
    assert _eval(capsys, "--via", "pgvector", *dsn, *scifact)["indexed_now"] == 0
    pairs = _eval(capsys, "--via", "llamaindex-pgvector", *dsn, *sts)
    assert abs(pairs["unrounded"]["spearman"] - STSB_SPEARMAN) <= 0.0005, pairs
