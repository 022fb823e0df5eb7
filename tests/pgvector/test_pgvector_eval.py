"""The published figures through PostgreSQL: ``ctxemb eval --via pgvector`` on SciFact and
STS-B reproduces MiniLM's MTEB scores, with an exact scan and through the HNSW index."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from ctxemb_core.cli import main

#: MTEB's published all-MiniLM-L6-v2 figures.
SCIFACT_NDCG10, STSB_SPEARMAN = 0.64508, 0.82032


def _eval(*args: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["eval", *args])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue().strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")
def test_scifact_and_sts_through_pgvector_exact_and_hnsw(pg, data_dir, minilm_contract):
    dsn = ("--dsn", pg.ctxemb_dsn)
    scifact = ("--data", str(data_dir / "scifact"), "--k", "10")
    exact = _eval("--via", "pgvector", *dsn, *scifact, "--exact")
    assert (exact["documents"], exact["queries"]) == (5183, 300)
    assert exact["fingerprint"] == minilm_contract.fingerprint
    assert exact["store"]["search"] == "exact"
    assert abs(exact["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.0005, exact
    hnsw = _eval("--via", "pgvector", *dsn, *scifact)
    assert hnsw["indexed_now"] == 0  # the same stamped table, opened verified
    assert abs(hnsw["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.005, hnsw
    # Haystack's and LangChain's paths query the same stamped table (written above by the
    # CLI's path: nothing is indexed again).
    for via in ("haystack-pgvector", "langchain-pgvector"):
        framework = _eval("--via", via, *dsn, *scifact)
        assert framework["indexed_now"] == 0, via
        assert abs(framework["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.005, framework
    sts = _eval(
        "--via", "pgvector", *dsn, "--task", "sts", "--data", str(data_dir / "stsbenchmark")
    )
    assert sts["pairs"] == 1379
    assert abs(sts["unrounded"]["spearman"] - STSB_SPEARMAN) <= 0.0005, sts


def test_the_pgvector_via_refuses_chroma_options_and_needs_a_dsn(capsys, monkeypatch):
    monkeypatch.delenv("CTXEMB_PG_DSN", raising=False)
    assert main(["eval", "--via", "pgvector", "--path", "./chroma"]) == 2
    assert "--via pgvector does not use --path" in capsys.readouterr().err
    assert main(["eval", "--via", "chroma", "--exact"]) == 2
    assert "--via chroma does not use --exact" in capsys.readouterr().err
