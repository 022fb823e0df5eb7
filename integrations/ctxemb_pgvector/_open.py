"""Opening a table through the guard: created stamped in one transaction, or verified whole."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.guard import (
    OPEN_SAMPLE,
    adopt_stamp,
    as_embedder,
    check_count,
    check_flag,
    check_sample_size,
)
from ctxemb_pgvector._connect import check_connection, translated
from ctxemb_pgvector._repair import repair as repair_table
from ctxemb_pgvector._sql import (
    STAMPS,
    check_name,
    create_statements,
    ident,
    layout_for,
    lock_key,
    setup_statements,
)
from ctxemb_pgvector._store import StoredTable, keyless_stamps, missing_table, stored_or_none
from ctxemb_pgvector._table import GuardedTable
from ctxemb_pgvector._verify import check_layout, sample_rows, verify_open


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
    check_connection(conn)
    check_name(name)
    check_name(schema, "schema name")
    embedder = as_embedder(contract)
    check_sample_size(sample)
    check_count(ef_search, "ef_search")
    for flag, value in (("create", create), ("adopt", adopt), ("repair", repair), ("hnsw", hnsw)):
        check_flag(value, flag)
    stored = stored_or_none(conn, name, schema)
    if stored is None:
        if not create:
            raise missing_table(conn, name, schema, " (create=False)")
        if stamp is None:
            stamp = IndexStamp.from_embedder(embedder)
        else:
            stamp.check_contract(embedder.contract)
            stamp.verify(embedder)
        stored = _create(conn, schema, name, stamp, hnsw)
        if stored.version is not None and stored.metadata == stamp.to_metadata():
            return GuardedTable(stored, embedder, stamp, sample=sample, ef_search=ef_search)
        # Another process created it meanwhile: open what it made, with every check.
    if adopt and not stored.stamped:
        stamp = adopt_table(stored, embedder, sample)
        stored = stored_or_none(conn, name, schema) or stored
        return GuardedTable(stored, embedder, stamp, sample=sample, ef_search=ef_search)
    repaired: list[str] = []
    if repair and stored.stamped:
        IndexStamp.from_metadata(stored.metadata).verify(embedder)
        repaired = repair_table(stored, IndexStamp.from_metadata(stored.metadata))
        stored = stored_or_none(conn, name, schema) or stored
    stamp, check = verify_open(stored, embedder, sample)
    table = GuardedTable(
        stored, embedder, stamp, sample=sample, ef_search=ef_search, open_check=check
    )
    table.repaired = repaired
    return table


def _lock(conn: Any, schema: str, name: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock_key(schema, name),))


def ensure_stamps(conn: Any, schema: str) -> None:
    """The stamps table and the triggers' functions, made once per schema (under a lock: two
    processes making them at once would collide in PostgreSQL's catalog)."""
    exists = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".{STAMPS}',)).fetchone()
    if exists is not None and exists[0] is not None:
        return
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"ctxemb:{schema}",))
    for statement in setup_statements(schema):
        conn.execute(statement)


def write_stamp(conn: Any, schema: str, name: str, stamp: IndexStamp) -> None:
    """Insert or replace the stamp row of ``name`` (its version is set by the trigger)."""
    layout = layout_for(stamp.contract)
    try:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (table_name, version, stamp, layout) VALUES (%s, 0, %s, %s) "
                "ON CONFLICT (table_name) DO UPDATE SET stamp = EXCLUDED.stamp, "
                "layout = EXCLUDED.layout"
            ).format(ident(schema, STAMPS)),
            (name, Jsonb(stamp.to_metadata()), Jsonb(layout.to_dict())),
        )
    except psycopg.errors.InvalidColumnReference:
        # No unique key for ON CONFLICT: the stamps table's key was dropped (in the caller's
        # transaction, which rolls back whatever it made).
        raise keyless_stamps(schema) from None


def create_table(conn: Any, schema: str, name: str, stamp: IndexStamp, hnsw: bool) -> bool:
    """Create the table, its trigger, (``hnsw``) its HNSW index and its stamp row in one
    transaction, under the table's advisory lock; ``False`` (nothing made) when it exists."""
    with translated(f"creating table {name!r}"), conn.transaction():
        ensure_stamps(conn, schema)
        _lock(conn, schema, name)
        if stored_or_none(conn, name, schema) is not None:
            return False
        for statement in create_statements(schema, name, layout_for(stamp.contract), hnsw):
            conn.execute(statement)
        write_stamp(conn, schema, name, stamp)
        return True


def _create(conn: Any, schema: str, name: str, stamp: IndexStamp, hnsw: bool) -> StoredTable:
    create_table(conn, schema, name, stamp, hnsw)
    found = stored_or_none(conn, name, schema)
    assert found is not None
    return found


def adopt_table(stored: StoredTable, embedder: Embedder, sample: int) -> IndexStamp:
    """Stamp an unstamped table once a sample of its rows proves it is this contract's.

    The table keeps its rows; it gains ctxemb's ``ctxemb_seq`` column and trigger (so rows
    written later by any client are found first on open) and a stamp row.
    """
    stamp = adopt_stamp(embedder, sample_rows(stored, max(sample, 1)), stored.count(), stored.name)
    probe = StoredTable(
        stored.conn,
        stored.schema,
        stored.name,
        stored.column,
        stored.seq,
        0,
        None,
        layout_for(stamp.contract).to_dict(),
    )
    check_layout(probe, stamp)  # a halfvec column is not a float32 contract's
    conn, schema, name = stored.conn, stored.schema, stored.name
    with translated(f"stamping {name!r}"), conn.transaction():
        ensure_stamps(conn, schema)
        _lock(conn, schema, name)
        if not stored.seq:
            add_seq(conn, schema, name)
        write_stamp(conn, schema, name, stamp)
    return stamp


def add_seq(conn: Any, schema: str, name: str) -> None:
    """Give a table made without ctxemb the ``ctxemb_seq`` column and trigger (in the caller's
    transaction, under the table's lock): its rows numbered now, later writes by any client
    numbered afresh."""
    table = ident(schema, name)
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN ctxemb_seq bigint").format(table))
    conn.execute(
        sql.SQL("UPDATE {} SET ctxemb_seq = nextval({})").format(
            table, sql.Literal(f'"{schema}".ctxemb_row_seq')
        )
    )
    conn.execute(
        sql.SQL(
            "ALTER TABLE {} ALTER COLUMN ctxemb_seq SET DEFAULT nextval({}), "
            "ALTER COLUMN ctxemb_seq SET NOT NULL"
        ).format(table, sql.Literal(f'"{schema}".ctxemb_row_seq'))
    )
    conn.execute(
        sql.SQL(
            "CREATE TRIGGER ctxemb_row_seq BEFORE INSERT OR UPDATE ON {} FOR EACH ROW "
            "EXECUTE FUNCTION {}()"
        ).format(table, ident(schema, "ctxemb_bump_seq"))
    )
