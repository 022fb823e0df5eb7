"""The :class:`ContractPGVector` side of ``ctxemb eval --via langchain-pgvector``."""

from __future__ import annotations

from langchain_core.documents import Document

from ctxemb_core.eval.frameworks import PairedStores
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._pgvector import ContractPGVector
from ctxemb_pgvector import connect


class PgvectorStores(PairedStores):
    """:class:`ContractPGVector` stores in one database (``dsn``): the documents in
    ``collection``, the sentence pairs in ``<collection>-pairs`` (each searched with an indexed
    metadata containment on its id)."""

    def __init__(self, embeddings: ContractEmbeddings, collection: str, dsn: str) -> None:
        super().__init__(collection, connect(dsn), embeddings)

    def make(self, pairs: bool) -> ContractPGVector:
        return ContractPGVector(self.name(pairs), self.embedder, connection=self._client)

    def similarities(
        self, store: ContractPGVector, query: str, found: list[tuple[Document, float]]
    ) -> list[float]:
        """The distance given (1 - the contract's similarity), as the similarity."""
        return [1.0 - s for _, s in found]
