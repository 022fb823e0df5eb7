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
#: At SciFact's size, PostgreSQL's planner orders the rows by a scan of every one rather than by
#: the HNSW index (its costs do not count reading each row's vector back from TOAST, which makes
#: the scan ~20 ms a query against the index's ~3): left to it, the "HNSW" figures below would be
#: the exact scan's again. This connection option makes the index the planner's way to order
#: rows; ``--exact`` turns index scans off for its own transaction (SET LOCAL), which leaves the
#: scan of every row as its only plan.
INDEX_FIRST = "options=-c%20enable_seqscan%3Doff"


def _plan(dsn: str, table: str, *, exact: bool = False) -> str:
    """The plan of the search the runs make (one of the table's own vectors as the query), as
    ``--exact`` runs it (index scans off) or not."""
    import psycopg
    from psycopg import sql

    query = sql.SQL(
        "EXPLAIN SELECT id FROM {t} ORDER BY embedding <=> (SELECT embedding FROM {t} LIMIT 1) "
        "LIMIT 10"
    ).format(t=sql.Identifier(table))
    with psycopg.connect(dsn) as conn:
        if exact:
            conn.execute("SET enable_indexscan = off")
        return "\n".join(row[0] for row in conn.execute(query))


def _eval(*args: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["eval", *args])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue().strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")
def test_scifact_and_sts_through_pgvector_exact_and_hnsw(pg, data_dir, minilm_contract):
    separator = "&" if "?" in pg.ctxemb_dsn else "?"
    dsn = ("--dsn", f"{pg.ctxemb_dsn}{separator}{INDEX_FIRST}")
    scifact = ("--data", str(data_dir / "scifact"), "--k", "10")
    exact = _eval("--via", "pgvector", *dsn, *scifact, "--exact")
    assert (exact["documents"], exact["queries"]) == (5183, 300)
    assert exact["fingerprint"] == minilm_contract.fingerprint
    assert exact["store"]["search"] == "exact"
    assert abs(exact["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.0005, exact
    table = exact["collection"]
    assert f'Index Scan using "{table}_ctxemb_hnsw"' in _plan(dsn[1], table)
    assert "Seq Scan" in _plan(dsn[1], table, exact=True)
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
