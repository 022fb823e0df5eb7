"""The ``PgvectorDocumentStore`` side of ``ctxemb eval --via haystack-pgvector``."""

from __future__ import annotations

from typing import Any

from haystack.utils import Secret
from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

from ctxemb_core import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_pgvector import check_name, connect, open_table, stored_or_none


class PgvectorStores:
    """``PgvectorDocumentStore``\\ s on one database: the documents in the table
    ``collection``, the sentence pairs in ``<collection>-pairs``."""

    #: All the pairs in one table: a ``meta.<key> ==`` filter is a containment test PostgreSQL
    #: runs, not a Python loop over documents.
    pairs_per_store: int | None = None

    def __init__(self, embedder: Embedder, collection: str, dsn: str | None) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise InvalidInputError(
                "a pgvector evaluation path needs dsn (a PostgreSQL connection string)"
            )
        self.embedder = embedder
        self.collection = collection
        self.dsn = dsn
        for pairs in (False, True):
            check_name(self.name(pairs))  # before anything connects
        # ids are looked up through the guard, on a connection of our own.
        self._conn: Any = connect(dsn)

    def name(self, pairs: bool) -> str:
        return f"{self.collection}-pairs" if pairs else self.collection

    def make(self, pairs: bool) -> PgvectorDocumentStore:
        contract = self.embedder.contract
        return PgvectorDocumentStore(
            connection_string=Secret.from_token(self.dsn),
            table_name=self.name(pairs),
            embedding_dimension=contract.output_dim,
            vector_type="halfvec" if contract.precision == "float16" else "vector",
            vector_function="cosine_similarity" if contract.normalize else "inner_product",
            # Index names are the schema's: one per table, should Haystack's store make one.
            keyword_index_name=f"{self.name(pairs)}_keyword",
        )

    def retriever(self, store: PgvectorDocumentStore) -> PgvectorEmbeddingRetriever:
        return PgvectorEmbeddingRetriever(document_store=store)

    def present(self, store: PgvectorDocumentStore, pairs: bool) -> set[str]:
        """The ids stored, read through the ``ctxemb_pgvector`` guard: a table of another
        contract is refused here, before anything is embedded or looked up."""
        if stored_or_none(self._conn, self.name(pairs)) is None:
            return set()
        return open_table(self._conn, self.name(pairs), self.embedder, create=False).ids()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
