"""The ``PgvectorDocumentStore`` side of ``ctxemb eval --via haystack-pgvector``."""

from __future__ import annotations

from haystack.utils import Secret
from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

from ctxemb_core import Embedder
from ctxemb_core.eval.frameworks import PairedStores
from ctxemb_pgvector import check_name, connect, open_table, stored_or_none


class PgvectorStores(PairedStores):
    """``PgvectorDocumentStore``\\ s on one database (``dsn``): the documents in the table
    ``collection``, the sentence pairs in ``<collection>-pairs`` (a ``meta.<key> ==`` filter is
    a containment test PostgreSQL runs)."""

    def __init__(self, embedder: Embedder, collection: str, dsn: str) -> None:
        for name in (collection, f"{collection}-pairs"):
            check_name(name)  # before anything connects
        # ids are looked up through the guard, on a connection of our own.
        super().__init__(collection, connect(dsn), embedder)
        self.dsn = dsn

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
        if stored_or_none(self._client, self.name(pairs)) is None:
            return set()
        return open_table(self._client, self.name(pairs), self.embedder, create=False).ids()
