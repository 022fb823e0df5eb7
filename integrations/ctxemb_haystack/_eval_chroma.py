"""The ``ChromaDocumentStore`` side of ``ctxemb eval --via haystack-chroma``."""

from __future__ import annotations

from typing import Any

from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_chroma import connect, open_collection, stored_or_none
from ctxemb_core import Embedder
from ctxemb_core.errors import InvalidInputError


class ChromaStores:
    """``ChromaDocumentStore``\\ s on one folder or server: the documents in ``collection``,
    the sentence pairs in ``<collection>-pairs``."""

    #: All the pairs in one collection: Chroma filters on its metadata index, not by testing
    #: each record.
    pairs_per_store: int | None = None

    def __init__(
        self, embedder: Embedder, collection: str, path: Any, host: str | None, port: int
    ) -> None:
        if (path is None) == (host is None):
            raise InvalidInputError(
                "a Chroma evaluation path needs either a folder (path) or a server (host, port)"
            )
        self.embedder = embedder
        self.collection = collection
        self.where: dict[str, Any] = (
            {"persist_path": str(path)} if path is not None else {"host": host, "port": port}
        )
        # ids are looked up with a client of our own: any ChromaDocumentStore call would create
        # the collection unstamped before the first guarded write.
        self._client: Any = (
            connect(str(path)) if path is not None else connect(host=host, port=port)
        )

    def name(self, pairs: bool) -> str:
        return f"{self.collection}-pairs" if pairs else self.collection

    def make(self, pairs: bool) -> ChromaDocumentStore:
        return ChromaDocumentStore(collection_name=self.name(pairs), **self.where)

    def retriever(self, store: ChromaDocumentStore) -> ChromaEmbeddingRetriever:
        return ChromaEmbeddingRetriever(store)

    def present(self, store: ChromaDocumentStore, pairs: bool) -> set[str]:
        """The ids stored, read through the ``ctxemb_chroma`` guard: a collection of another
        contract is refused here, before anything is embedded or looked up."""
        if stored_or_none(self._client, self.name(pairs)) is None:
            return set()
        return open_collection(self._client, self.name(pairs), self.embedder, create=False).ids()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
