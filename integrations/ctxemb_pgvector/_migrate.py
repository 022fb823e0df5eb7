"""Copying an index into a new table: re-embedded under a new contract, or, under the same
contract from another store, its vectors and stamp carried as they are."""

from __future__ import annotations

from typing import Any

from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import migration
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._table import GuardedTable


def migrate(
    source: Any,
    target_contract: EmbeddingContract | Embedder,
    target_name: str,
    *,
    conn: Any = None,
    client: Any = None,
    batch_size: int = 256,
    progress: bool | None = None,
    reembed: bool = False,
    schema: str = "public",
) -> GuardedTable:
    """Copy every document of ``source`` into the table ``target_name``; returns the table.

    ``source`` is a guarded index of any ctxemb adapter: a :class:`GuardedTable`, or a Chroma
    ``GuardedCollection`` (``ctxemb_chroma.open_collection``) with ``conn`` naming the database.
    The copy is :func:`ctxemb_core.index.migrate_index`, resumable: under another contract, or
    under the source's own within one database (a rebuild), every document is re-embedded;
    from another store under the source's own contract (and without ``reembed``) the stored
    vectors and the stamp are carried, bit for bit (a ``vector`` column keeps what it is given).

    ``client`` is another name for ``conn`` (what every store adapter's ``migrate`` takes).

    Raises:
        InvalidInputError: the target is the source, or ``source`` is not a guarded index.
    """
    copy = migration(
        source,
        batch_size,
        reembed,
        progress,
        opened_by="ctxemb_pgvector.open_table, ctxemb_chroma.open_collection",
    )
    conn = conn if conn is not None else client
    conn = conn if conn is not None else getattr(source, "conn", None)
    if conn is None:
        raise InvalidInputError("conn is needed: the source is not a PostgreSQL table")
    if (
        isinstance(source, GuardedTable)
        and conn is source.conn
        and (target_name, schema) == (source.name, source.schema)
    ):
        raise InvalidInputError("the target must be a new table: the source is never modified")
    target = PgvectorDriver(conn, target_name, schema=schema)
    # Across stores, the same contract's vectors are carried; within one database a migration
    # under the same contract is a rebuild (rows written around ctxemb re-embedded).
    rebuild = isinstance(source, GuardedTable) and conn is source.conn
    return GuardedTable(
        copy.into(target, target_contract, rebuild=rebuild), ef_search=target.ef_search
    )
