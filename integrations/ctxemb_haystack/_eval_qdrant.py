"""The ``QdrantDocumentStore`` side of ``ctxemb eval --via haystack-qdrant``."""

from __future__ import annotations

from typing import Any

from haystack.utils import Secret
from haystack_integrations.components.retrievers.qdrant import QdrantEmbeddingRetriever
from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

import ctxemb_qdrant
from ctxemb_core import Embedder
from ctxemb_core.eval.frameworks import PairedStores
from ctxemb_qdrant.cli import API_KEY_ENV


class QdrantStores(PairedStores):
    """``QdrantDocumentStore``\\ s on one local folder (``path``) or server (``url``): the
    documents in the collection ``collection``, the sentence pairs in ``<collection>-pairs``."""

    def __init__(self, embedder: Embedder, collection: str, **where: Any) -> None:
        # ids are looked up through the guard, on the client the stores share (a local folder
        # admits one client per process: ctxemb_qdrant.connect joins it).
        # where: ctxemb_qdrant.connect's path= or url= (core's store_where), which
        # QdrantDocumentStore takes under the same names.
        super().__init__(collection, ctxemb_qdrant.connect(**where), embedder)
        # A server's key as ctxemb_qdrant.connect takes it (its own variable, not Haystack's
        # QDRANT_API_KEY), as a Secret that names the variable and holds no key.
        key = {"api_key": Secret.from_env_var(API_KEY_ENV, strict=False)} if "url" in where else {}
        self.where = {**where, **key}

    def make(self, pairs: bool) -> QdrantDocumentStore:
        contract = self.embedder.contract
        return QdrantDocumentStore(
            index=self.name(pairs),
            embedding_dim=contract.output_dim,
            similarity="cosine" if contract.normalize else "dot_product",
            progress_bar=False,
            **self.where,
        )

    def retriever(self, store: QdrantDocumentStore) -> QdrantEmbeddingRetriever:
        return QdrantEmbeddingRetriever(document_store=store)

    def present(self, store: QdrantDocumentStore, pairs: bool) -> set[str]:
        """The ids stored, read through the ``ctxemb_qdrant`` guard: a collection of another
        contract is refused here, before anything is embedded or looked up."""
        name = self.name(pairs)
        if ctxemb_qdrant.stored_or_none(self._client, name) is None:
            return set()
        opened = ctxemb_qdrant.open_collection(self._client, name, self.embedder, create=False)
        return set(opened.ids())

    def close(self) -> None:
        """The shared client stays open for the process's other users of the folder."""
        self._client = None
