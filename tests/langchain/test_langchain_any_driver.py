"""The LangChain store on ctxemb's guarded index takes any driver: LangChain's standard vector
store suite runs on it over core's in-memory reference driver (no server, no Chroma), so a new
store's LangChain class is its driver and nothing else (``ContractPGVector`` is that class on
``ctxemb_pgvector``'s driver)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import MINILM
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from ctxemb_core import contract_for
from ctxemb_core.errors import ContractMismatchError
from ctxemb_core.index import MemoryStore
from ctxemb_core.remedy import DEFAULT_TERMS
from ctxemb_langchain import ContractEmbeddings
from ctxemb_langchain._indexed import IndexedStore


@functools.cache
def minilm_embeddings() -> ContractEmbeddings:
    return ContractEmbeddings(contract_for(MINILM))  # one model load for the module


class MemoryIndexStore(IndexedStore):
    """A store whose whole adapter is its driver: core's in-memory reference driver."""

    def __init__(self, embedding: ContractEmbeddings, store: MemoryStore, name: str) -> None:
        self._open(store.driver(name), embedding, DEFAULT_TERMS, sample=0)

    @classmethod
    def from_texts(cls, *args: Any, **kwargs: Any) -> MemoryIndexStore:
        raise NotImplementedError  # LangChain's suite builds its stores through the fixture


class TestIndexedStoreOnTheMemoryDriver(VectorStoreIntegrationTests):
    @staticmethod
    def get_embeddings() -> Embeddings:
        return minilm_embeddings()

    @pytest.fixture
    def vectorstore(self) -> Iterator[VectorStore]:
        yield MemoryIndexStore(minilm_embeddings(), MemoryStore(), "docs")


def test_another_contract_is_refused_on_any_driver() -> None:
    store = MemoryStore()
    MemoryIndexStore(minilm_embeddings(), store, "docs").add_texts(["Green tea is steamed."])
    cls = ContractEmbeddings(contract_for(MINILM, pooling="cls"))
    with pytest.raises(ContractMismatchError) as err:
        MemoryIndexStore(cls, store, "docs")
    assert err.value.fields == ("pooling",)


def test_a_filter_that_matches_nothing_finds_nothing_on_every_search_path() -> None:
    store = MemoryIndexStore(minilm_embeddings(), MemoryStore(), "docs")
    store.add_texts(["Green tea is steamed."], [{"room": "pantry"}], ids=["tea"])
    attic = {"room": "attic"}
    assert store.similarity_search("green tea", k=2, filter=attic) == []
    assert store.max_marginal_relevance_search("green tea", k=2, filter=attic) == []
    assert [d.id for d in store.max_marginal_relevance_search("green tea", k=2)] == ["tea"]


def test_an_unstamped_chroma_collection_is_advised_in_langchains_words_alone(tmp_path):
    # The adopt advice names LangChain's own store, never another framework's.
    import chromadb

    from ctxemb_core.errors import MissingStampError
    from ctxemb_core.testing.conformance import DOCS, tiny_embedder
    from ctxemb_langchain import ContractChroma

    tiny = tiny_embedder()
    client = chromadb.PersistentClient(path=str(tmp_path))
    raw = client.create_collection("plain", embedding_function=None)
    vectors = np.asarray(tiny.embed_documents(list(DOCS.values())))
    raw.add(ids=list(DOCS), embeddings=vectors, documents=list(DOCS.values()))
    with pytest.raises(MissingStampError) as err:
        ContractChroma("plain", ContractEmbeddings(contract=tiny.contract), client=client)
    said = str(err.value)
    assert "in LangChain ContractChroma(..., adopt=True)" in said, said
    assert "Haystack" not in said and "LlamaIndex" not in said, said
