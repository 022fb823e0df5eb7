"""The :class:`ContractQdrantVectorStore` side of ``ctxemb eval --via llamaindex-qdrant``."""

from __future__ import annotations

from typing import Any

import ctxemb_qdrant
from ctxemb_core.eval.frameworks import PairedStores
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._qdrant import ContractQdrantVectorStore
from ctxemb_llamaindex._store import ContractVectorStore


class QdrantStores(PairedStores):
    """:class:`ContractQdrantVectorStore`\\ s on one local folder (``path``) or server
    (``url``): the documents in ``collection``, the pairs in
    ``<collection>-pairs``."""

    def __init__(self, embedder: ContractEmbedding, collection: str, **where: Any) -> None:
        # where: ctxemb_qdrant.connect's path= or url= (core's store_where)
        super().__init__(collection, ctxemb_qdrant.connect(**where), embedder)

    def make(self, pairs: bool) -> ContractVectorStore:
        return ContractQdrantVectorStore(self.name(pairs), self.embedder, client=self._client)

    def close(self) -> None:
        """A local folder's client is shared by the process (``ctxemb_qdrant.connect`` joins
        it): it stays open for the others."""
        self._client = None
