"""Opening a table through the guard: core's :class:`~ctxemb_core.index.GuardedIndex` over the
table's driver (created stamped in one transaction, or verified), in this adapter's words."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.guard import as_embedder, check_count, check_flag
from ctxemb_core.index import OpenOptions
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._repair import repair as repair_table
from ctxemb_pgvector._store import stored_or_none
from ctxemb_pgvector._table import GuardedTable

if TYPE_CHECKING:
    from typing_extensions import Unpack


def open_table(
    conn: Any,
    name: str,
    contract: EmbeddingContract | Embedder,
    *,
    hnsw: bool = True,
    ef_search: int = 200,
    schema: str = "public",
    **opening: Unpack[OpenOptions],
) -> GuardedTable:
    """Create a stamped table, or open one and verify its stamp, column and stored rows.

    Args:
        conn: a psycopg 3 connection (:func:`ctxemb_pgvector.connect`).
        name: the table's name (1-48 characters of ``A-Za-z0-9_-``).
        contract: the caller's contract (or an :class:`~ctxemb_core.Embedder` built from it).
        hnsw: give a new table an HNSW index (the operator class follows the contract: cosine
            for a normalised contract, inner product otherwise, Hamming for binary).
        ef_search: the HNSW search breadth queries use (at least their ``n_results``).
        schema: the PostgreSQL schema of the table (and of its stamp row).
        **opening: ``create``, ``adopt``, ``repair``, ``sample``, ``stamp``: as every store's
            open (:class:`~ctxemb_core.index.OpenOptions`). Here ``create`` makes the table,
            its HNSW index and its stamp row in one transaction, under an advisory lock (two
            processes creating one table make it once; the second opens it); ``adopt`` takes
            Haystack's or LangChain's table with the same columns; ``repair`` writes back the
            column layout recorded beside the stamp, and an HNSW index of the contract's
            operator class when there is none (``repaired`` on the table says what was done;
            a column of another type is never repaired: its vectors were rounded or cut);
            ``sample`` re-embeds the rows written or changed since the table last passed
            under this contract first.

    Raises:
        ContractMismatchError: the table was written under another contract.
        EncoderDriftError: same contract, but the canary re-embeds to other vectors.
        ForeignVectorsError: sampled rows were not made under this contract.
        StorageMismatchError: the embedding column is not of the type the contract stores.
        MissingStampError: an unstamped table, without ``adopt=True``.
        DamagedStampError: a stamp row that cannot be read or contradicts itself.
        InvalidInputError: a bad argument, or no table with ``create=False``.
        StoreUnavailableError: the server cannot be reached.

    Example:
        >>> conn = ctxemb_pgvector.connect("postgresql://localhost/rag")   # doctest: +SKIP
        >>> docs = open_table(conn, "docs", contract_for("all-MiniLM-L6-v2"))  # doctest: +SKIP
        >>> docs.add(["d1"], ["Green tea is steamed."])                   # doctest: +SKIP
    """
    driver = PgvectorDriver(conn, name, schema=schema, hnsw=hnsw, ef_search=ef_search)
    embedder = as_embedder(contract)
    check_count(ef_search, "ef_search")
    check_flag(hnsw, "hnsw")
    repaired: list[str] = []
    if check_flag(opening.get("repair", False), "repair"):
        stored = stored_or_none(conn, name, schema)
        if stored is not None and stored.stamped:
            # Once the stamp and canary pass: what was changed around ctxemb is written back.
            stamp = IndexStamp.from_metadata(stored.metadata)
            stamp.verify(embedder)
            repaired = repair_table(stored, stamp)
    table = GuardedTable.open(driver, embedder, **opening)
    table.repaired = repaired
    return table
