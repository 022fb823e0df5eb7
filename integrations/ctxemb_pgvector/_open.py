"""Opening a table through the guard: core's :class:`~ctxemb_core.index.GuardedIndex` over the
table's driver (created stamped in one transaction, or verified), in this adapter's words."""

from __future__ import annotations

from typing import Any

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.guard import OPEN_SAMPLE, as_embedder, check_count, check_flag
from ctxemb_core.index import GuardedIndex
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._repair import repair as repair_table
from ctxemb_pgvector._store import missing_table, stored_or_none
from ctxemb_pgvector._table import GuardedTable


def open_table(
    conn: Any,
    name: str,
    contract: EmbeddingContract | Embedder,
    *,
    create: bool = True,
    adopt: bool = False,
    repair: bool = False,
    sample: int = OPEN_SAMPLE,
    hnsw: bool = True,
    ef_search: int = 200,
    schema: str = "public",
    stamp: IndexStamp | None = None,
) -> GuardedTable:
    """Create a stamped table, or open one and verify its stamp, column and stored rows.

    Args:
        conn: a psycopg 3 connection (:func:`ctxemb_pgvector.connect`).
        name: the table's name (1-48 characters of ``A-Za-z0-9_-``).
        contract: the caller's contract (or an :class:`~ctxemb_core.Embedder` built from it).
        create: create the table if it does not exist: the table, its HNSW index and its stamp
            row are one transaction, under an advisory lock (two processes creating one table
            make it once; the second opens it).
        adopt: stamp an existing unstamped table (Haystack's or LangChain's, with the same
            columns) after re-embedding a sample of its rows and finding them this contract's.
        repair: once the stamp and canary pass, write back what was changed around ctxemb:
            the column layout recorded beside the stamp, and an HNSW index of the contract's
            operator class when there is none (``repaired`` on the table says what was done).
            A column of another type is never repaired (its vectors were rounded or cut).
        sample: stored rows re-embedded and compared on open: those written or changed since
            the table last passed under this contract, then random others (0: stamp, canary
            and column only).
        hnsw: give a new table an HNSW index (the operator class follows the contract: cosine
            for a normalised contract, inner product otherwise, Hamming for binary).
        ef_search: the HNSW search breadth queries use (at least their ``n_results``).
        schema: the PostgreSQL schema of the table (and of its stamp row).
        stamp: the stamp a new table gets instead of one made now: another index's of the same
            contract, carried with its vectors (:func:`migrate`); it must pass its canary here.

    Raises:
        ContractMismatchError: the table was written under another contract.
        EncoderDriftError: same contract, but the canary re-embeds to other vectors.
        ForeignVectorsError: sampled rows were not made under this contract.
        StorageMismatchError: the embedding column is not of the type the contract stores.
        MissingStampError: an unstamped table, without ``adopt=True``.
        DamagedStampError: a stamp row that cannot be read or contradicts itself.
        InvalidInputError: a bad argument.
        StoreUnavailableError: the server cannot be reached.

    Example:
        >>> conn = ctxemb_pgvector.connect("postgresql://localhost/rag")   # doctest: +SKIP
        >>> docs = open_table(conn, "docs", contract_for("all-MiniLM-L6-v2"))  # doctest: +SKIP
        >>> docs.add(["d1"], ["Green tea is steamed."])                   # doctest: +SKIP
    """
    driver = PgvectorDriver(conn, name, schema=schema, hnsw=hnsw, ef_search=ef_search)
    embedder = as_embedder(contract)
    check_count(ef_search, "ef_search")
    for flag, value in (("repair", repair), ("hnsw", hnsw)):
        check_flag(value, flag)
    if stamp is not None:
        stamp.check_contract(embedder.contract)
    repaired: list[str] = []
    if repair or create is False:
        stored = stored_or_none(conn, name, schema)
        if stored is None and create is False:
            raise missing_table(conn, name, schema, " (create=False)")
        if repair and stored is not None and stored.stamped:
            # Once the stamp and canary pass: what was changed around ctxemb is written back.
            IndexStamp.from_metadata(stored.metadata).verify(embedder)
            repaired = repair_table(stored, IndexStamp.from_metadata(stored.metadata))
    index = GuardedIndex.open(
        driver, embedder, create=create, adopt=adopt, sample=sample, stamp=stamp
    )
    return GuardedTable(index, ef_search=ef_search, repaired=repaired)
