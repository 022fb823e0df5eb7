"""The :class:`ContractQdrant` side of ``ctxemb eval --via langchain-qdrant``."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document

import ctxemb_qdrant
from ctxemb_core.eval.frameworks import PairedStores
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._qdrant import ContractQdrant


class QdrantStores(PairedStores):
    """:class:`ContractQdrant` stores on one local folder (``path``) or server (``url``): the
    documents in ``collection``, the sentence pairs in ``<collection>-pairs``."""

    def __init__(self, embeddings: ContractEmbeddings, collection: str, **where: Any) -> None:
        # where: ctxemb_qdrant.connect's path= or url= (core's store_where)
        super().__init__(collection, ctxemb_qdrant.connect(**where), embeddings)

    def make(self, pairs: bool) -> ContractQdrant:
        return ContractQdrant(self._client, self.name(pairs), self.embedder)

    def similarities(
        self, store: ContractQdrant, query: str, found: list[tuple[Document, float]]
    ) -> list[float]:
        """The distance given (1 - the contract's similarity), as the similarity."""
        return [1.0 - s for _, s in found]

    def close(self) -> None:
        """A local folder's client is shared by the process (``ctxemb_qdrant.connect`` joins
        it): it stays open for the others."""
        self._client = None
