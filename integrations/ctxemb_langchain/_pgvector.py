"""A LangChain ``VectorStore`` on a stamped PostgreSQL table: :class:`._indexed.IndexedStore` on
``ctxemb_pgvector``'s driver. What is PostgreSQL's own here: the connection, the schema and the
search breadth, and the hybrid index beside the table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import StoreOpenOptions, store_opening
from ctxemb_core.remedy import StoreTerms
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._indexed import IndexedStore
from ctxemb_pgvector import GuardedTable, PgvectorDriver, connect, open_hybrid

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: ``ctxemb_pgvector``'s words for an error's advice (its own ``TERMS``, which the package does
#: not export), with this framework's way to adopt a table.
_ADOPT = "in LangChain ContractPGVector(..., adopt=True)"
_WORDS = {"open": "open_table", "kind": "table", "records": "rows"}
TERMS = StoreTerms.of("pgvector", "--dsn", **_WORDS, frameworks=_ADOPT)


class ContractPGVector(IndexedStore):
    """A LangChain vector store on a PostgreSQL + pgvector table stamped with the contract.

    The table is ``ctxemb_pgvector``'s (Haystack ``PgvectorDocumentStore``'s columns), created
    stamped or opened and verified, so a table written by the CLI, by Haystack or by this store
    opens through the others under the same contract; :class:`ContractEmbeddings` of another
    contract are refused (``ContractMismatchError``, fields named). Every call reads the stamp's
    version first; every write (an upsert, as LangChain's stores do) is one transaction.
    ``similarity_search_with_score`` gives the table's distance (cosine distance for a
    normalised contract: lower is nearer), as ``langchain_postgres.PGVectorStore`` does.

    Args:
        table_name: the table.
        embedding: :class:`ContractEmbeddings`.
        connection: a DSN (``postgresql://user@host/db``) or a ``ctxemb_pgvector.connect``
            connection.
        sample: stored rows re-embedded and compared when the table is opened.
        create: create the table (stamped) when it is missing.
        adopt: stamp an unstamped table once a sample of its rows proves it is the contract's.
        schema: the PostgreSQL schema.
        ef_search: the HNSW search breadth (at least ``k``).

    Attributes:
        table: the guarded index of the table (:class:`~ctxemb_core.index.GuardedIndex`).

    Example:
        >>> store = ContractPGVector("docs", ContractEmbeddings(contract), connection=dsn)
        >>> store.add_texts(["Green tea is steamed."])  # doctest: +SKIP
        >>> store.as_retriever(k=3).invoke("how is green tea made")  # doctest: +SKIP
    """

    def __init__(
        self,
        table_name: str,
        embedding: ContractEmbeddings,
        *,
        connection: Any,
        schema: str = "public",
        ef_search: int = 200,
        **opening: Unpack[StoreOpenOptions],
    ) -> None:
        options = store_opening(opening, "ContractPGVector")
        self._owned = isinstance(connection, str)
        conn = connect(connection) if isinstance(connection, str) else connection
        self._driver = PgvectorDriver(conn, table_name, schema=schema, ef_search=ef_search)
        self._sample = options["sample"]
        self._open(self._driver, embedding, TERMS, **options)

    @property
    def table(self) -> GuardedTable:
        """:attr:`index` in PostgreSQL's shapes, as :func:`ctxemb_pgvector.open_table` returns
        it."""
        return GuardedTable(self.index, ef_search=self._driver.ef_search)

    def close(self) -> None:
        """Close the connection, if this store opened it from a DSN."""
        if self._owned:
            self._driver.close()

    def _open_hybrid(self, **options: Any) -> Any:
        # For ContractHybridRetriever.from_store: the table's hybrid index, opened by
        # ctxemb_pgvector as the CLI opens it (lexical_path required there).
        driver = self._driver
        return open_hybrid(
            driver.conn,
            driver.name,
            self._embeddings.embedder,
            sample=self._sample,
            schema=driver.schema,
            ef_search=driver.ef_search,
            **options,
        )

    @classmethod
    def _for_texts(
        cls, embedding: ContractEmbeddings, *, table_name: str = "langchain", **kwargs: Any
    ) -> ContractPGVector:
        # For from_texts: the table (default "langchain") on connection=, which is required.
        if kwargs.get("connection") is None:
            raise InvalidInputError("ContractPGVector.from_texts needs connection= (a DSN)")
        return cls(table_name, embedding, **kwargs)
