"""What of a ``PgvectorDocumentStore`` is PostgreSQL's own: its connection string, its table's
name, width and search breadth, what a row can hold, and the hybrid index beside the table.

The guard is :class:`._index.IndexGuard`'s, on ``ctxemb_pgvector``'s
:class:`~ctxemb_pgvector.PgvectorDriver` and a connection of the guard's own (made on first use
from the store's ``connection_string``), so the table a ctxemb pipeline writes is created
stamped by ``ctxemb_pgvector`` and the store's own calls then find it existing. The search
orders by the contract's distance (the table's layout), whatever the store's
``vector_function``.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from haystack import Document
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

from ctxemb_core import EmbeddingContract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.remedy import StoreTerms
from ctxemb_core.validate import check_json_metadata
from ctxemb_haystack._binding import made_empty
from ctxemb_haystack._writes import Row
from ctxemb_pgvector import PgvectorDriver, check_name, connect, open_hybrid

logger = logging.getLogger(__name__)

#: ``ctxemb_pgvector``'s words for an error's advice (its own ``TERMS``, which the package does
#: not export), with this framework's way to adopt a table.
_ADOPT = "in Haystack ContractRetriever(..., adopt=True) or ContractDocumentWriter(..., adopt=True)"
_WORDS = {"open": "open_table", "kind": "table", "records": "rows"}
TERMS = StoreTerms.of("pgvector", "--dsn", **_WORDS, frameworks=_ADOPT)


class PgvectorBinding:
    """The table behind a ``PgvectorDocumentStore`` (see :class:`._binding.Binding`)."""

    terms = TERMS

    def __init__(self, store: PgvectorDocumentStore) -> None:
        self.store = store
        self.name = check_name(store.table_name)
        self.schema = check_name(store.schema_name, "schema name")
        self._driver: PgvectorDriver | None = None

    def driver(self) -> PgvectorDriver:
        """The table's driver, on the guard's connection to the store's database (made again
        when it was closed)."""
        if self._driver is None or self._driver.conn.closed:
            dsn = self.store.connection_string.resolve_value()
            conn = connect(dsn or "", create_extension=self.store.create_extension)
            options: dict[str, Any] = {}
            if self.store.hnsw_ef_search is not None:
                options["ef_search"] = self.store.hnsw_ef_search
            self._driver = PgvectorDriver(conn, self.name, schema=self.schema, **options)
            # A component dropped without close() (a pipeline that goes out of scope) closes
            # the guard's connection with it, rather than leaving it to psycopg's warning.
            weakref.finalize(self, conn.close)
        return self._driver

    def close(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None

    def opened(self) -> None:
        return None

    def metadata(self, document: Document) -> dict[str, Any]:
        if document.blob is not None:
            logger.warning("document %s: its blob is not stored by ctxemb", document.id)
        return dict(document.meta)

    def check_batch(self, contract: EmbeddingContract, rows: list[Row]) -> None:
        """What PostgreSQL would refuse while writing, refused before the table is created."""
        if self.store.embedding_dimension != contract.output_dim:
            raise InvalidInputError(
                f"PgvectorDocumentStore(embedding_dimension={self.store.embedding_dimension}) "
                f"but the contract's vectors are {contract.output_dim} wide "
                f"({contract.describe()}): build the store with "
                f"embedding_dimension={contract.output_dim}"
            )
        for i, text, _ in rows:
            if "\x00" in text:
                raise InvalidInputError(
                    f"document {i!r} holds a NUL character, which PostgreSQL text cannot store"
                )
        check_json_metadata([i for i, _, _ in rows], [m for _, _, m in rows], what="document")

    def made_empty(self) -> str:
        drop = "Drop it with store.delete_table() or use another table_name"
        return made_empty("table", "PgvectorDocumentStore", drop)

    def open_hybrid(self, contract: EmbeddingContract, **options: Any) -> Any:
        driver = self.driver()
        return open_hybrid(driver.conn, self.name, contract, schema=self.schema, **options)
