"""LangChain's own standard suites (``langchain_tests``) run on the ctxemb adapter: the embeddings,
ContractChroma on an embedded store and a Chroma server, ContractVectorStore around
InMemoryVectorStore (and around a plain ``langchain_chroma.Chroma``), and ContractRetriever over
both kinds of store.

The suites' default ``get_embeddings()`` is a 6-dimensional fake; our stores accept only
``ContractEmbeddings``, so every suite runs on the bundled MiniLM instead (one instance for the
module, so the model loads once). Nothing is overridden: ``test_no_overrides_DO_NOT_OVERRIDE``
of each suite proves it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import chromadb
import pytest
from conftest import MINILM, fresh_name
from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_tests.integration_tests import (
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)
from langchain_tests.unit_tests import EmbeddingsUnitTests

from ctxemb_core import EmbeddingContract, contract_for
from ctxemb_langchain import (
    ContractChroma,
    ContractEmbeddings,
    ContractRetriever,
    ContractVectorStore,
)


@functools.cache
def minilm_contract() -> EmbeddingContract:
    return contract_for(MINILM)


@functools.cache
def minilm_embeddings() -> ContractEmbeddings:
    """The module's one ContractEmbeddings (the suites' ``get_embeddings`` is a staticmethod,
    so it cannot take a fixture)."""
    return ContractEmbeddings(minilm_contract())


# -- embeddings ----------------------------------------------------------------------------------


class TestContractEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return ContractEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"contract": minilm_contract()}


class TestContractEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return ContractEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"contract": minilm_contract()}


# -- vector stores -------------------------------------------------------------------------------


class _MiniLM:
    """Mixin: the suites' embeddings are the bundled MiniLM under its contract."""

    @staticmethod
    def get_embeddings() -> Embeddings:
        return minilm_embeddings()


class TestContractChromaEmbedded(_MiniLM, VectorStoreIntegrationTests):
    @pytest.fixture(scope="class")
    @classmethod
    def chroma(cls, tmp_path_factory: pytest.TempPathFactory) -> Any:
        return chromadb.PersistentClient(path=str(tmp_path_factory.mktemp("lc-std-embedded")))

    @pytest.fixture
    def vectorstore(self, chroma: Any) -> Iterator[VectorStore]:
        # sample=0: a new collection has no records to sample; the stamp is still verified.
        store = ContractChroma(fresh_name(), self.get_embeddings(), client=chroma, sample=0)
        try:
            yield store
        finally:
            store.delete_collection()


class TestContractChromaServer(_MiniLM, VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, server: int) -> Iterator[VectorStore]:
        client = chromadb.HttpClient(host="127.0.0.1", port=server)
        store = ContractChroma(fresh_name(), self.get_embeddings(), client=client, sample=0)
        try:
            yield store
        finally:
            store.delete_collection()


class TestContractVectorStoreInMemory(_MiniLM, VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self) -> Iterator[VectorStore]:
        inner = InMemoryVectorStore(self.get_embeddings())
        try:
            yield ContractVectorStore(inner)
        finally:
            inner.store.clear()


class TestContractVectorStoreOverChroma(_MiniLM, VectorStoreIntegrationTests):
    """The document-level guard is for any ``VectorStore``: here a plain ``Chroma``."""

    @pytest.fixture
    def vectorstore(self, tmp_path: Any) -> Iterator[VectorStore]:
        inner = Chroma(
            fresh_name(),
            self.get_embeddings(),
            client=chromadb.PersistentClient(path=str(tmp_path)),
        )
        try:
            yield ContractVectorStore(inner)
        finally:
            inner.delete_collection()


# -- retrievers ----------------------------------------------------------------------------------

#: Five documents: the suites ask for up to three, so k decides how many come back.
RETRIEVER_TEXTS = [
    "Green tea leaves are steamed soon after picking.",
    "Water around eighty degrees suits most green teas.",
    "Black tea is fully oxidised before drying.",
    "A bicycle chain lasts longer when it is oiled.",
    "The Moon shows phases as it orbits the Earth.",
]


class _RetrieverSuite(RetrieversIntegrationTests):
    """Each subclass fills one store for the class (``stored``) and retrieves from it."""

    store: VectorStore

    @property
    def retriever_constructor(self) -> type[ContractRetriever]:
        return ContractRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"vectorstore": self.store, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "how is green tea made"


class TestContractRetrieverChroma(_RetrieverSuite):
    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def stored(cls, server: int) -> Iterator[None]:
        client = chromadb.HttpClient(host="127.0.0.1", port=server)
        store = ContractChroma(fresh_name(), minilm_embeddings(), client=client, sample=0)
        store.add_texts(RETRIEVER_TEXTS)
        cls.store = store
        try:
            yield
        finally:
            store.delete_collection()


class TestContractRetrieverInMemory(_RetrieverSuite):
    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def stored(cls) -> Iterator[None]:
        store = ContractVectorStore(InMemoryVectorStore(minilm_embeddings()))
        store.add_texts(RETRIEVER_TEXTS)
        cls.store = store
        yield
