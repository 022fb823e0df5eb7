"""The ``ChromaDocumentStore`` side of ``ctxemb eval --via haystack-chroma``."""

from __future__ import annotations

from typing import Any

from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_chroma import connect, open_collection, stored_or_none
from ctxemb_core import Embedder
from ctxemb_core.eval.frameworks import PairedStores


class ChromaStores(PairedStores):
    """``ChromaDocumentStore``\\ s on one folder (``path``) or server (``host``, ``port``):
    the documents in ``collection``, the sentence pairs in ``<collection>-pairs``."""

    def __init__(self, embedder: Embedder, collection: str, **where: Any) -> None:
        # ids are looked up with a client of our own: any ChromaDocumentStore call would create
        # the collection unstamped before the first guarded write.
        super().__init__(collection, connect(**where), embedder)
        self.where = {"persist_path": where["path"]} if "path" in where else where

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
