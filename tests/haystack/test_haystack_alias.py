"""Haystack opened by alias (issue 45): a real pipeline on an embedded Chroma store follows an
upgrade's cutover, index and query encoder together; its writes reach both indexes while the
alias upgrades; a reader without the new encoder gets ``NoEncoderError``; a saved pipeline
keeps the alias, not the index. Tiny static models (16 dimensions, cut to 8), a few records."""

from __future__ import annotations

import chromadb
import pytest
from haystack import Document, Pipeline
from haystack.components.writers import DocumentWriter
from haystack.core.errors import PipelineRuntimeError

from ctxemb_chroma import catalog as chroma_catalog
from ctxemb_core import Embedder
from ctxemb_core.aliases import (
    Encoders,
    MemoryCatalog,
    backfill,
    begin_upgrade,
    create_alias,
    cutover,
)
from ctxemb_core.errors import InvalidInputError, NoEncoderError, UnknownAliasError
from ctxemb_core.index import GuardedIndex, MemoryStore
from ctxemb_core.testing.aliases import IDS, TEXTS
from ctxemb_core.testing.conformance import tiny_embedder
from ctxemb_haystack import ContractAliasDocumentStore, ContractAliasRetriever

QUERY = "green tea kettles"


@pytest.fixture(scope="module")
def old() -> Embedder:
    return tiny_embedder()


@pytest.fixture(scope="module")
def new(old) -> Embedder:
    return Embedder(old.contract.with_(truncate_dim=8))


def _nearest(index: GuardedIndex, k: int = 3) -> list[tuple[str, float]]:
    return [(m.id, round(m.score, 5)) for m in index.query([QUERY], k)[0]]


def test_a_pipeline_by_alias_follows_a_cutover_and_writes_both_indexes(tmp_path, old, new):
    path = str(tmp_path / "chroma")
    catalog = chroma_catalog(chromadb.PersistentClient(path=path))
    v1 = GuardedIndex.open(catalog.driver("docs-v1"), old)
    v1.add(IDS[:10], TEXTS[:10])
    create_alias(catalog, "docs", "docs-v1")

    store = ContractAliasDocumentStore("docs", encoders=[old, new], path=path)
    query = Pipeline()
    query.add_component("retriever", ContractAliasRetriever(store, top_k=3))
    write = Pipeline()
    write.add_component("writer", DocumentWriter(store))

    def ask() -> list[Document]:
        return query.run({"retriever": {"query": QUERY}})["retriever"]["documents"]

    before = ask()
    assert [(d.id, round(d.score, 5)) for d in before] == _nearest(v1)
    assert {len(d.embedding) for d in before} == {16}

    # While the alias upgrades, a write through the pipeline reaches both indexes.
    shadow = begin_upgrade(catalog, "docs", new).shadow.index
    written = write.run({"writer": {"documents": [Document(id="late", content=TEXTS[12])]}})
    assert written["writer"]["documents_written"] == 1
    store.delete_documents([IDS[0]])
    backfill(catalog, "docs", Encoders(old, new))
    v2 = GuardedIndex.open(catalog.driver(shadow), new, create=False)
    for index in (v1, v2):
        assert "late" in index.ids() and IDS[0] not in index.ids(), index.name

    # The same pipeline, after the cutover: the new index, searched with the new encoder.
    cutover(catalog, "docs", Encoders(old, new))
    after = ask()
    assert [(d.id, round(d.score, 5)) for d in after] == _nearest(v2)
    assert {len(d.embedding) for d in after} == {8}
    assert store.count_documents() == v2.count() == 10
    late = {"field": "id", "operator": "==", "value": "late"}
    assert [d.id for d in store.filter_documents(late)] == ["late"]

    # A reader never given the new contract's encoder gets the typed error, naming it.
    stale = Pipeline()
    stale.add_component(
        "retriever",
        ContractAliasRetriever(ContractAliasDocumentStore("docs", encoders=[old], path=path)),
    )
    with pytest.raises(PipelineRuntimeError) as raised:
        stale.run({"retriever": {"query": QUERY}})
    assert isinstance(raised.value.__cause__, NoEncoderError)
    assert new.contract.fingerprint[:12] in str(raised.value.__cause__)

    # Saved and loaded, the pipeline names the alias (never the index it serves now).
    saved = query.dumps()
    assert "alias: docs" in saved and shadow not in saved and "docs-v1" not in saved
    loaded = Pipeline.loads(saved)
    assert loaded.run({"retriever": {"query": QUERY}})["retriever"]["documents"] == after
    store.close()


def test_the_store_refuses_what_it_cannot_do(old):
    catalog = MemoryCatalog(MemoryStore())
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(IDS[:3], TEXTS[:3])
    create_alias(catalog, "docs", "docs-v1")
    store = ContractAliasDocumentStore("docs", encoders=[old], catalog=catalog)
    with pytest.raises(InvalidInputError, match="catalog= object"):
        store.to_dict()
    with pytest.raises(InvalidInputError, match="name two stores"):
        ContractAliasDocumentStore("docs", path="./x", schema="public")
    with pytest.raises(InvalidInputError, match="is a pgvector option"):
        ContractAliasDocumentStore("docs", store="chroma", path="./x", schema="public")
    with pytest.raises(InvalidInputError, match="say where"):
        ContractAliasDocumentStore("docs")
    with pytest.raises(UnknownAliasError, match="its aliases: docs"):
        ContractAliasDocumentStore("nope", encoders=[old], catalog=catalog).count_documents()
    with pytest.raises(TypeError, match="ContractAliasDocumentStore"):
        ContractAliasRetriever(object())  # type: ignore[arg-type]
    # The documents a writer gives are embedded under each index's contract, by the store.
    written = store.write_documents([Document(id="x", content=TEXTS[5], embedding=[0.0] * 3)])
    assert written == 1 and store.count_documents() == 4


def test_a_postgresql_store_keeps_its_dsn_as_a_secret(old):
    from haystack.utils import Secret

    store = ContractAliasDocumentStore(
        "docs",
        encoders=[old, "http://127.0.0.1:9/"],  # a server: asked only for a contract it may serve
        dsn=Secret.from_env_var("CTXEMB_ALIAS_TEST_DSN"),
        schema="rag",
    )
    saved = store.to_dict()
    params = saved["init_parameters"]
    assert params["store"] == "pgvector" and params["schema"] == "rag"
    assert params["encoders"] == [old.config(), "http://127.0.0.1:9"]
    assert params["dsn"]["type"] == "env_var"  # the variable's name, never a connection string
    assert ContractAliasDocumentStore.from_dict(saved).to_dict() == saved
    with pytest.raises(ValueError, match="token"):  # Haystack's own rule for a plain string
        ContractAliasDocumentStore("docs", dsn="postgresql://u:pw@db/rag").to_dict()
