"""Threads sharing one psycopg connection: each guarded call runs whole, one after another.

A psycopg connection holds one transaction at a time; two threads opening theirs on it would
nest one inside the other, and the first to finish would commit or roll back the other's work
(psycopg raises ``OutOfOrderTransactionNesting``). ``ctxemb_pgvector`` holds a lock per
connection around each call of its driver, alias book and lexical side, so a table, its hybrid
index and its aliases can be shared by threads, on a real PostgreSQL.
"""

from __future__ import annotations

import threading

import pytest

import ctxemb_pgvector
from ctxemb_core.testing.conformance import tiny_embedder

THREADS, ROUNDS = 4, 15


@pytest.fixture(scope="module")
def embedder():
    return tiny_embedder()


def _run(work) -> list[str]:
    errors: list[str] = []

    def guarded(n: int) -> None:
        try:
            work(n)
        except Exception as exc:  # reported by the assertion below, with its thread
            errors.append(f"thread {n}: {exc!r}")

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


def test_threads_sharing_a_connection_keep_every_write_of_a_table(pg, embedder):
    table = ctxemb_pgvector.open_table(pg, "shared", embedder, create=True)

    def work(n: int) -> None:
        for i in range(ROUNDS):
            table.add(ids=[f"{n}-{i}"], documents=[f"thread {n} wrote text {i}"])
            assert table.query(query_texts=["text"], n_results=3)["ids"][0]
            table.upsert(ids=[f"{n}-0"], documents=[f"thread {n} rewrote its first text"])

    assert _run(work) == []
    assert table.count() == THREADS * ROUNDS
    got = table.get(ids=[f"{n}-0" for n in range(THREADS)])
    assert sorted(got["documents"]) == sorted(
        f"thread {n} rewrote its first text" for n in range(THREADS)
    )
    # Nothing was left open on the connection, and a new open verifies what the threads wrote.
    assert pg.info.transaction_status.name == "IDLE"
    reopened = ctxemb_pgvector.open_table(pg, "shared", embedder)
    assert ctxemb_pgvector.verify(reopened, embedder, all=True, progress=False).ok


def test_threads_sharing_a_connection_keep_both_sides_of_a_hybrid_index(pg, embedder):
    hybrid = ctxemb_pgvector.open_hybrid(pg, "both", embedder.contract, hnsw=False)

    def work(n: int) -> None:
        for i in range(ROUNDS):
            hybrid.sync([f"{n}-{i}"], [f"thread {n} wrote about tea {i}"])
            assert hybrid.query("tea", 3)

    assert _run(work) == []
    assert hybrid.count() == THREADS * ROUNDS
    report = hybrid.verify()  # both sides hold every document, the statistics agree
    assert report["ok"], report
    assert report["documents"] == THREADS * ROUNDS
    assert pg.info.transaction_status.name == "IDLE"
