"""LangChain opened by alias (issue 45): a vector store and its retriever, open while an upgrade
runs, follow the cutover (index and query encoder together) and keep writing both indexes; a
reader without the new encoder gets ``NoEncoderError``; and the same store on PostgreSQL by its
DSN. Tiny static models (16 dimensions, cut to 8), a few records."""

from __future__ import annotations

import threading

import pytest

from ctxemb_core import Embedder
from ctxemb_core.aliases import (
    Encoders,
    MemoryCatalog,
    backfill,
    begin_upgrade,
    create_alias,
    cutover,
    rollback,
)
from ctxemb_core.errors import InvalidInputError, NoEncoderError
from ctxemb_core.index import GuardedIndex, MemoryStore
from ctxemb_core.testing.aliases import IDS, TEXTS
from ctxemb_core.testing.conformance import tiny_embedder
from ctxemb_langchain import ContractAliasVectorStore, ContractEmbeddings, ContractRetriever

QUERY = "green tea kettles"


@pytest.fixture(scope="module")
def old() -> Embedder:
    return tiny_embedder()


@pytest.fixture(scope="module")
def new(old) -> Embedder:
    return Embedder(old.contract.with_(truncate_dim=8))


def _nearest(index: GuardedIndex, k: int = 3) -> list[tuple[str, float]]:
    return [(m.id, round(1.0 - m.score, 5)) for m in index.query([QUERY], k)[0]]


def _found(store: ContractAliasVectorStore, k: int = 3) -> list[tuple[str, float]]:
    return [(d.id, round(s, 5)) for d, s in store.similarity_search_with_score(QUERY, k)]


def test_a_store_open_across_an_upgrade_follows_the_alias(old, new):
    catalog = MemoryCatalog(MemoryStore())
    v1 = GuardedIndex.open(catalog.driver("docs-v1"), old)
    v1.add(IDS[:10], TEXTS[:10])
    create_alias(catalog, "docs", "docs-v1")
    v1_embeddings, v2_embeddings = (
        ContractEmbeddings(old.contract),
        ContractEmbeddings(new.contract),
    )
    store = ContractAliasVectorStore("docs", [v1_embeddings, v2_embeddings], catalog=catalog)
    assert store.embeddings is v1_embeddings
    stale = ContractAliasVectorStore("docs", [old], catalog=catalog)  # never given the new one
    retriever = store.as_retriever(k=3)
    assert isinstance(retriever, ContractRetriever)
    assert _found(store) == _nearest(v1) == _found(stale)

    shadow = begin_upgrade(catalog, "docs", new).shadow.index
    ids = store.add_texts([TEXTS[12], TEXTS[13]], metadatas=[{"k": 1}, None], ids=["a", "b"])
    assert ids == ["a", "b"] and store.delete(["b", IDS[0]])
    backfill(catalog, "docs", Encoders(old, new))
    v2 = GuardedIndex.open(catalog.driver(shadow), new, create=False)
    for index in (v1, v2):
        assert "a" in index.ids() and not {"b", IDS[0]} & set(index.ids()), index.name
    assert _found(store) == _nearest(v1)  # still the current index until the cutover

    cutover(catalog, "docs", Encoders(old, new))
    assert _found(store) == _nearest(v2) and store.embeddings is v2_embeddings
    assert [d.id for d in retriever.invoke(QUERY)] == [i for i, _ in _nearest(v2)]
    assert store.get_by_ids(["a"])[0].metadata == {"k": 1}
    assert len(store.max_marginal_relevance_search(QUERY, k=2, fetch_k=5)) == 2
    assert stale.embeddings is None and stale.as_retriever() is not None  # no encoder needed
    with pytest.raises(NoEncoderError) as raised:
        stale.similarity_search(QUERY)
    assert raised.value.contract == new.contract and raised.value.alias == "docs"
    with pytest.raises(NoEncoderError):
        stale.add_texts(["document about tea"])  # nothing written anywhere
    assert "document about tea" not in [r.text for r in v1.page(0, 100)]

    # After a rollback the store is back on the first index, which got every write.
    store.add_texts([TEXTS[14]], ids=["c"])
    rollback(catalog, "docs", Encoders(old, new))
    assert _found(store) == _nearest(v1) and "c" in v1.ids()
    with pytest.raises(InvalidInputError, match="searches by text"):
        store.similarity_search_by_vector([0.0] * 16)


def test_a_store_by_alias_on_postgresql(pg, old, new):
    from ctxemb_pgvector import catalog as pg_catalog

    catalog = pg_catalog(pg)
    v1 = GuardedIndex.open(catalog.driver("docs_v1"), old)
    v1.add(IDS[:5], TEXTS[:5])
    create_alias(catalog, "docs", "docs_v1")
    store = ContractAliasVectorStore("docs", [old, new], dsn=pg.ctxemb_dsn)
    assert _found(store) == _nearest(v1)
    shadow = begin_upgrade(catalog, "docs", new).shadow.index
    store.add_texts([TEXTS[20]], ids=["late"])
    backfill(catalog, "docs", Encoders(old, new))
    cutover(catalog, "docs", Encoders(old, new))
    v2 = GuardedIndex.open(catalog.driver(shadow), new, create=False)
    assert _found(store) == _nearest(v2) and store.index.name == shadow
    assert "late" in v1.ids() and "late" in v2.ids()
    store.close()


def test_a_reader_querying_through_the_cutover_never_mixes(old, new):
    catalog = MemoryCatalog(MemoryStore())
    v1 = GuardedIndex.open(catalog.driver("docs-v1"), old)
    v1.add(IDS[:10], TEXTS[:10])
    create_alias(catalog, "docs", "docs-v1")
    shadow = begin_upgrade(catalog, "docs", new).shadow.index
    backfill(catalog, "docs", Encoders(old, new))
    v2 = GuardedIndex.open(catalog.driver(shadow), new, create=False)
    before, after = _nearest(v1), _nearest(v2)
    assert before != after  # the two indexes rank (or score) the query apart
    store = ContractAliasVectorStore("docs", [old, new], catalog=catalog)
    seen: list[list[tuple[str, float]]] = []
    done = threading.Event()

    def read() -> None:
        late = 0  # queries begun after the cutover returned
        while late < 2:
            begun_after = done.is_set()
            seen.append(_found(store))
            late += begun_after

    reader = threading.Thread(target=read)
    reader.start()
    cutover(catalog, "docs", Encoders(old, new))
    done.set()
    reader.join(10)
    assert not reader.is_alive()
    # Every answer is one index's, searched with its own encoder; one begun after the cutover
    # is the new index's.
    assert {tuple(r) for r in seen} <= {tuple(before), tuple(after)}
    assert seen[-1] == after
