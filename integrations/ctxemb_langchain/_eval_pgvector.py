"""The :class:`ContractPGVector` side of ``ctxemb eval --via langchain-pgvector``."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document

from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._eval_path import PAIR_KEY
from ctxemb_langchain._pgvector import ContractPGVector
from ctxemb_pgvector import connect


class PgvectorStores:
    """:class:`ContractPGVector` stores in one database: the documents in ``collection``, the
    sentence pairs in ``<collection>-pairs`` (each searched with a metadata filter on its id)."""

    #: All the pairs in one table: the filter is an indexed metadata containment.
    pairs_per_store: int | None = None

    def __init__(self, embeddings: ContractEmbeddings, collection: str, dsn: str) -> None:
        self.embeddings = embeddings
        self.collection = collection
        self._conn: Any = connect(dsn)

    def make(self, pairs: bool) -> ContractPGVector:
        name = f"{self.collection}-pairs" if pairs else self.collection
        return ContractPGVector(name, self.embeddings, connection=self._conn)

    def pair_filter(self, pair: str) -> dict[str, str]:
        return {PAIR_KEY: pair}

    def similarities(
        self, store: ContractPGVector, query: str, found: list[tuple[Document, float]]
    ) -> list[float]:
        """The distance given (1 - the contract's similarity), as the similarity."""
        return [1.0 - s for _, s in found]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
