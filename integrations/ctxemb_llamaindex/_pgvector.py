"""A LlamaIndex vector store on a stamped PostgreSQL + pgvector table:
:class:`._store.ContractVectorStore` on ``ctxemb_pgvector``'s driver. What is PostgreSQL's own
here: the connection, the schema and the search breadth."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxemb_core.index import StoreOpenOptions, store_opening
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._store import ContractVectorStore
from ctxemb_pgvector import GuardedTable, PgvectorDriver, connect, open_hybrid

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ContractPGVectorStore(ContractVectorStore):
    """LlamaIndex's vector store on a PostgreSQL + pgvector table stamped with the contract, in
    place of ``PGVectorStore``.

    The table is ``ctxemb_pgvector``'s (the columns Haystack's ``PgvectorDocumentStore`` and
    ``ctxemb index --store pgvector`` use, not ``PGVectorStore``'s ``data_*`` table), so a
    table written by the CLI, Haystack or LangChain opens here under the same contract and the
    other way round; under another contract it is refused (fields named). Every write is one
    transaction.

    Args:
        table_name: the table.
        embed_model: a :class:`ContractEmbedding`; ``None``: the contract of the table's stamp.
        connection: a DSN (``postgresql://user@host/db``) or a ``ctxemb_pgvector.connect``
            connection.
        sample, create, adopt: as :class:`~ctxemb_llamaindex.ContractChromaVectorStore`'s.
        schema: the PostgreSQL schema.
        ef_search: the HNSW search breadth (at least ``similarity_top_k``).

    Example:
        >>> store = ContractPGVectorStore("docs", embed, connection=dsn)  # doctest: +SKIP
    """

    _adapter = (GuardedTable, PgvectorDriver, open_hybrid)

    def __init__(
        self,
        table_name: str,
        embed_model: ContractEmbedding | None = None,
        *,
        connection: Any,
        schema: str = "public",
        ef_search: int = 200,
        **opening: Unpack[StoreOpenOptions],
    ) -> None:
        options = store_opening(opening, "ContractPGVectorStore")
        super().__init__()
        conn = connect(connection) if isinstance(connection, str) else connection
        scope = {"schema": schema, "ef_search": ef_search}
        self._open_store(conn, table_name, embed_model, options, scope)

    @classmethod
    def class_name(cls) -> str:
        return "ContractPGVectorStore"
