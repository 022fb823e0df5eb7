"""The Haystack guard takes any driver: a store is its binding (how to reach its driver, what
metadata it keeps) and nothing else. Here the binding of core's in-memory reference driver,
which no Haystack document store has, writes and retrieves under every check."""

from __future__ import annotations

from typing import Any

import pytest
from haystack import Document
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy

from ctxemb_core import EmbeddingContract
from ctxemb_core.errors import ContractMismatchError
from ctxemb_core.index import MemoryDriver, MemoryStore
from ctxemb_core.remedy import DEFAULT_TERMS
from ctxemb_haystack import ContractDocumentEmbedder, ContractTextEmbedder, DuplicateDocumentsError
from ctxemb_haystack._index import IndexGuard
from ctxemb_haystack._writes import Row


class MemoryBinding:
    """The whole of a store's Haystack piece, for core's in-memory driver."""

    terms = DEFAULT_TERMS

    def __init__(self, store: MemoryStore, name: str) -> None:
        self.name = name
        self._driver = store.driver(name)

    def driver(self) -> MemoryDriver:
        return self._driver

    def opened(self) -> None:
        return None

    def metadata(self, document: Document) -> dict[str, Any]:
        return dict(document.meta)

    def check_batch(self, contract: EmbeddingContract, rows: list[Row]) -> None:
        return None

    def made_empty(self) -> str:
        return ""

    def open_hybrid(self, contract: EmbeddingContract, **options: Any) -> Any:
        raise NotImplementedError


def _documents(contract: EmbeddingContract) -> list[Document]:
    embedder = ContractDocumentEmbedder(contract=contract, progress_bar=False)
    given = [
        Document(id="tea", content="Green tea is steamed.", meta={"room": "pantry"}),
        Document(id="kettle", content="Kettles boil water.", meta={"room": "kitchen"}),
    ]
    return embedder.run(given)["documents"]


def test_the_guard_writes_and_retrieves_through_any_driver(minilm_contract):
    store = MemoryStore()
    guard = IndexGuard(MemoryBinding(store, "docs"), sample=0)
    docs = _documents(minilm_contract)
    assert guard.write(docs, DuplicatePolicy.FAIL) == 2
    with pytest.raises(DuplicateDocumentsError):
        guard.write(docs[:1], DuplicatePolicy.FAIL)
    assert guard.write(docs[:1], DuplicatePolicy.SKIP) == 0
    query = ContractTextEmbedder(contract=minilm_contract).run("how is green tea made")
    retriever = InMemoryEmbeddingRetriever(InMemoryDocumentStore(), top_k=1)
    found = guard.retrieve(retriever, query["embedding"], query["fingerprint"])
    assert [d.id for d in found] == ["tea"] and len(found[0].embedding or []) == 384
    assert 0.3 < found[0].score <= 1.0
    kitchen = {"field": "meta.room", "operator": "==", "value": "kitchen"}
    found = guard.retrieve(retriever, query["embedding"], query["fingerprint"], filters=kitchen)
    assert [d.id for d in found] == ["kettle"]
    for nothing in (  # a filter that matches nothing, in the index's own form and beyond it
        {"field": "meta.room", "operator": "==", "value": "attic"},
        {"field": "meta.room", "operator": "in", "value": ["attic"]},
    ):
        assert guard.retrieve(retriever, query["embedding"], query["fingerprint"], nothing) == []
    # Another contract's documents are refused, naming the field, and nothing is written.
    cls = _documents(minilm_contract.with_(pooling="cls"))
    with pytest.raises(ContractMismatchError) as err:
        guard.write(cls, DuplicatePolicy.OVERWRITE)
    assert err.value.fields == ("pooling",)
    assert sorted(store.driver("docs").ids(0, 10)) == ["kettle", "tea"]
