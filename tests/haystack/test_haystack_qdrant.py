"""Haystack on Qdrant: ``QdrantDocumentStore`` (qdrant-haystack) through ContractDocumentWriter and
ContractRetriever around its own ``QdrantEmbeddingRetriever``, in Qdrant's local mode: the
collection is created stamped by ``ctxemb_qdrant`` and opens there, the store then works on it
with the same client (its folder admits one), another contract is refused, a filter beyond
metadata equality selects as Haystack's own filter does, and what the store cannot be is
refused before anything is written. A tiny static model stands in for a trained one."""

from __future__ import annotations

import pytest
from haystack import Document, Pipeline
from haystack.core.errors import PipelineRuntimeError
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.retrievers.qdrant import QdrantEmbeddingRetriever
from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

import ctxemb_qdrant
from ctxemb_core.errors import ContractMismatchError, InvalidInputError, MissingStampError
from ctxemb_core.testing.conformance import tiny_embedder
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
    DuplicateDocumentsError,
)

DOCS = [
    Document(id="tea", content="green tea leaves are steamed", meta={"room": "pantry", "n": 1}),
    Document(id="oil", content="oil the bicycle chain", meta={"room": "shed", "n": 5}),
    Document(id="moon", content="moon phases follow its orbit", meta={"room": "sky", "n": 9}),
]


@pytest.fixture(scope="module")
def contract():
    return tiny_embedder().contract


def _store(path, **options) -> QdrantDocumentStore:
    return QdrantDocumentStore(path=str(path), index="docs", progress_bar=False, **options)


def _retrieved(store, contract, text="green tea", **inputs) -> list[Document]:
    query = Pipeline()
    query.add_component("embedder", ContractTextEmbedder(contract=contract))
    retriever = QdrantEmbeddingRetriever(document_store=store, top_k=2)
    query.add_component("retriever", ContractRetriever(retriever))
    query.connect("embedder.embedding", "retriever.query_embedding")
    query.connect("embedder.fingerprint", "retriever.fingerprint")
    found = query.run({"embedder": {"text": text}, "retriever": inputs})
    return found["retriever"]["documents"]


def test_a_qdrant_document_store_is_written_stamped_and_read_through_the_guard(contract, tmp_path):
    store = _store(tmp_path, embedding_dim=contract.output_dim)
    embedded = ContractDocumentEmbedder(contract=contract).run(DOCS)["documents"]
    writer = ContractDocumentWriter(store)
    assert writer.run(embedded)["documents_written"] == 3
    with pytest.raises(DuplicateDocumentsError):
        writer.run(embedded[:1])
    found = _retrieved(store, contract)
    assert len(found) == 2 and found[0].id == "tea" and 0.3 < found[0].score <= 1.0
    assert found[0].content == DOCS[0].content and found[0].meta["room"] == "pantry"
    shed = {"field": "meta.room", "operator": "==", "value": "shed"}  # the driver's filter
    assert [d.id for d in _retrieved(store, contract, filters=shed)] == ["oil"]
    beyond = {"field": "meta.n", "operator": ">", "value": 4}  # Haystack's own, tested here
    assert {d.id for d in _retrieved(store, contract, filters=beyond)} == {"oil", "moon"}
    # The collection is ctxemb_qdrant's, on the folder's one client, which the store now uses.
    client = ctxemb_qdrant.connect(tmp_path)
    assert store._client is client and store.count_documents() == 3
    opened = ctxemb_qdrant.open_collection(client, "docs", contract, create=False)
    assert opened.ids() == {"tea", "oil", "moon"}
    with pytest.raises(PipelineRuntimeError) as refused:
        _retrieved(store, contract.with_(pooling="cls"))
    assert isinstance(refused.value.__cause__, ContractMismatchError)
    assert refused.value.__cause__.fields == ("pooling",)


def test_what_the_store_cannot_be_is_refused_before_anything_is_written(contract, tmp_path):
    embedded = ContractDocumentEmbedder(contract=contract).run(DOCS[:1])["documents"]
    for store, why in (
        (_store(tmp_path, embedding_dim=384), "embedding_dim=16"),
        (_store(tmp_path, embedding_dim=16, use_sparse_embeddings=True), "one dense vector"),
    ):
        with pytest.raises(InvalidInputError, match=why):
            ContractDocumentWriter(store).run(embedded)
    assert ctxemb_qdrant.stored_or_none(ctxemb_qdrant.connect(tmp_path), "docs") is None
    # A call of the store first makes its collection unstamped: refused, with what to do.
    store = _store(tmp_path / "own", embedding_dim=contract.output_dim)
    assert store.count_documents() == 0
    with pytest.raises(MissingStampError, match="delete_collection"):
        ContractDocumentWriter(store).run(embedded, policy=DuplicatePolicy.SKIP)
    store.close()
