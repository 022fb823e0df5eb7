"""Aliases in PostgreSQL (issue 45): one row per alias, switched in one transaction, and an
upgrade through it; of several connections swapping one generation at once, one wins."""

from __future__ import annotations

import threading

import pytest

from ctxemb_core import Embedder
from ctxemb_core.aliases import (
    AliasedIndex,
    Encoders,
    begin_upgrade,
    create_alias,
    cutover,
    retire,
    rollback,
)
from ctxemb_core.errors import AliasConflictError, DamagedAliasError, UnknownAliasError
from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.conformance import tiny_embedder
from ctxemb_pgvector._aliases import PgCatalog


@pytest.fixture(scope="module")
def old() -> Embedder:
    return tiny_embedder()


@pytest.fixture(scope="module")
def new(old: Embedder) -> Embedder:
    return Embedder(old.contract.with_(truncate_dim=8))


@pytest.fixture
def catalog(pg, old) -> PgCatalog:
    catalog = PgCatalog(pg)
    GuardedIndex.open(catalog.driver("docs_v1"), old).add(
        [f"d{k}" for k in range(20)], [f"document {k} about green tea" for k in range(20)]
    )
    create_alias(catalog, "docs", "docs_v1")
    return catalog


def test_an_upgrade_through_a_postgresql_alias(catalog, old, new):
    reader = AliasedIndex.open(catalog, "docs", Encoders(old, new))
    record = begin_upgrade(catalog, "docs", new)
    reader.upsert(["w1"], ["green tea document"])
    reader.delete(["d2"])
    switched = cutover(catalog, "docs", Encoders(old, new))
    answered = reader.search("green tea", 3)
    assert (answered.index, answered.fingerprint) == (
        record.shadow.index,
        new.contract.fingerprint,
    )
    assert answered.generation == switched.generation
    assert "w1" in reader.ids() and "d2" not in reader.ids()
    rollback(catalog, "docs", Encoders(old, new))
    assert reader.search("green tea").index == "docs_v1"
    retire(catalog, "docs")
    assert not catalog.exists(record.shadow.index)


def test_postgresql_alias_refusals(catalog, old, pg):
    with pytest.raises(AliasConflictError):
        create_alias(catalog, "docs_v1", "docs_v1")
    with pytest.raises(UnknownAliasError, match="docs"):
        AliasedIndex.open(catalog, "nope", old)
    pg.execute("UPDATE ctxemb_aliases SET record = '{\"schema\": 1}' WHERE name = 'docs'")
    with pytest.raises(DamagedAliasError):
        AliasedIndex.open(catalog, "docs", old)


def test_of_several_connections_swapping_one_generation_one_wins(catalog, pg):
    import ctxemb_pgvector

    seen = catalog.aliases.read("docs")
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def swap() -> None:
        conn = ctxemb_pgvector.connect(pg.ctxemb_dsn)
        try:
            book = PgCatalog(conn).aliases
            barrier.wait()
            results.append(book.swap(seen.next("test"), expected=seen.generation))
        finally:
            conn.close()

    threads = [threading.Thread(target=swap) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert catalog.aliases.read("docs").generation == seen.generation + 1
