"""A table as the database has it now, unguarded; the SQL that makes, stamps and repairs it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core import IndexStamp
from ctxemb_core.errors import DamagedStampError, InvalidInputError, MissingStampError
from ctxemb_core.guard import check_storage
from ctxemb_core.index.driver_kit import unstamped_refusal
from ctxemb_core.remedy import Said
from ctxemb_pgvector._connect import check_connection, terms_in, translated
from ctxemb_pgvector._sql import (
    STAMPS,
    Layout,
    advisory_lock,
    always,
    check_name,
    create_statements,
    hnsw_statement,
    ident,
    layout_for,
    relation_exists,
    row_seq,
    seq_statements,
    setup_statements,
)


@dataclass(frozen=True)
class StoredTable:
    """What the database holds for one table name, read in one transaction: the ``column``'s
    type, ``seq``, the stamp row's ``version``, ``metadata`` and ``layout`` (``None``: none)."""

    conn: psycopg.Connection[Any]
    schema: str
    name: str
    column: str | None
    seq: bool
    version: int | None
    metadata: dict[str, Any] | None
    layout: dict[str, Any] | None
    oid: int | None = None
    attnum: int | None = None
    #: The table's columns, in order (what :func:`unusable` checks an unstamped table by).
    columns: tuple[str, ...] = ()

    @property
    def table(self) -> sql.Composed:
        return ident(self.schema, self.name)

    @property
    def stamp_version(self) -> str:
        """The driver's stamp version (:func:`version_of`)."""
        return version_of(self.oid, self.attnum, self.column, self.version)

    @property
    def stamped(self) -> bool:
        return IndexStamp.is_stamped(self.metadata)


def version_of(oid: Any, attnum: Any, column: Any, stamp_row: Any) -> str:
    """The driver's stamp version (``docs/pgvector.md``, "How the table keeps the protocol")."""
    return f"{oid}:{attnum}:{column}:{stamp_row}"


_TABLE = """
SELECT format_type(a.atttypid, a.atttypmod),
       EXISTS (SELECT 1 FROM pg_attribute s WHERE s.attrelid = c.oid AND s.attname = 'ctxemb_seq'
               AND NOT s.attisdropped),
       c.oid::bigint, a.attnum
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding' AND NOT a.attisdropped
WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')
"""


#: A table's columns, in order (not in :data:`_TABLE`, which every call's head reads).
_COLUMNS = """
SELECT attname::text FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped
ORDER BY attnum
"""


def _stamp_row(conn: psycopg.Connection[Any], schema: str, name: str) -> Any:
    if not relation_exists(conn, schema, STAMPS):
        return None
    rows = conn.execute(
        sql.SQL("SELECT version, stamp, layout FROM {} WHERE table_name = %s").format(
            ident(schema, STAMPS)
        ),
        (name,),
    ).fetchall()
    if len(rows) > 1:
        raise damaged_stamps(schema, name, len(rows))
    return rows[0] if rows else None


def keyless_stamps(schema: str) -> DamagedStampError:
    """The stamps table lost its primary key: a stamp cannot be written as one row per table."""
    stamps = f"{schema}.{STAMPS}"
    return DamagedStampError(
        f"{stamps} has lost its primary key on table_name (dropped or replaced), so a stamp "
        "written now could be a second row for its table; nothing was created or stamped. "
        f"Restore the key: ALTER TABLE {stamps} ADD PRIMARY KEY (table_name) (it fails while a "
        "table has more than one row: delete the extra ones first, keeping the one your "
        "contract wrote)."
    )


def damaged_stamps(schema: str, name: str, rows: int) -> DamagedStampError:
    """A table with more than one stamp row: which one holds is not for ctxemb to guess."""
    stamps = f"{schema}.{STAMPS}"
    return DamagedStampError(
        f"table {name!r} has {rows} stamp rows in {stamps} (its primary key on table_name was "
        "dropped or disabled, and a row was written again): which one the table was written "
        "under cannot be told, and reading it through both would return every row once per "
        f"stamp, so it is neither read nor written. Keep the one row your contract wrote: "
        f"DELETE FROM {stamps} WHERE table_name = '{name}' AND version <> <the version to "
        f"keep>; then restore the key: ALTER TABLE {stamps} ADD PRIMARY KEY (table_name). The "
        "next open checks the stamp kept, as always."
    )


def stored_or_none(conn: Any, name: str, schema: str = "public") -> StoredTable | None:
    """The table as the database has it now, unguarded, or ``None`` if there is none."""
    check_connection(conn)
    check_name(name)
    check_name(schema, "schema name")
    with translated(f"reading table {name!r}"), conn.transaction():
        found = conn.execute(_TABLE, (schema, name)).fetchone()
        if found is None:
            return None
        row = _stamp_row(conn, schema, name)
        columns = conn.execute(_COLUMNS, (found[2],)).fetchall()
    column, seq, oid, attnum = found
    version, stamp, layout = row if row is not None else (None, None, None)
    metadata = stamp if isinstance(stamp, dict) else ({} if stamp is not None else None)
    layout = layout if isinstance(layout, dict) else None
    names = tuple(c[0] for c in columns)
    return StoredTable(
        conn, schema, name, column, bool(seq), version, metadata, layout, oid, attnum, names
    )


#: The columns every read and write of a table names (Haystack's ``PgvectorDocumentStore``'s).
COLUMNS = ("id", "embedding", "content", "meta")
#: The types pgvector's columns have, as ``format_type`` names them (before the width).
VECTOR_TYPES = ("vector", "halfvec", "bit")


def unusable(stored: StoredTable) -> InvalidInputError | None:
    """The refusal of an unstamped table another tool made (LangChain's
    ``langchain_pg_embedding``, say), which ctxemb could not read or stamp, or ``None``: before
    anything is read or written (``docs/pgvector.md``, "The guarantees")."""
    if stored.stamped or not stored.columns:
        return None
    missing = [c for c in COLUMNS if c not in stored.columns]
    kind = (stored.column or "").split("(")[0]
    if not missing and kind in VECTOR_TYPES:
        return None
    why = (
        f"it lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
        if missing
        else f"its embedding column is {stored.column}, not a pgvector type"
    )
    return Said("open_table(conn, '<new name>', ...)", "--collection <new name>").into(
        InvalidInputError,
        f"table {stored.name!r} in schema {stored.schema!r} is not one ctxemb can read or "
        f"stamp: {why} (it has {', '.join(stored.columns)}), where ctxemb's tables have "
        "Haystack's PgvectorDocumentStore columns (id, embedding a pgvector column, content, "
        "meta jsonb); nothing was read or written. It is another tool's table: index under "
        "another name ({do}), a table ctxemb creates with its stamp",
    )


def missing_table(conn: Any, name: str, schema: str = "public", why: str = "") -> InvalidInputError:
    with translated("listing tables"):
        schemas = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        if schemas.fetchone() is None:
            return Said("schema=", "--schema").into(
                InvalidInputError,
                f"no table {name!r}: the database has no schema {schema!r}{why}; give the "
                "schema the table is in ({do}), or create the schema first (CREATE SCHEMA)",
            )
        names = [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname NOT LIKE 'ctxemb\\_%%' "
                "ORDER BY 1",  # ctxemb's own tables (stamps, aliases, lexical sides) are not shown
                (schema,),
            )
        ]
    return InvalidInputError(
        f"no table {name!r} in schema {schema!r}{why}; the schema has "
        + (", ".join(repr(n) for n in names[:20]) if names else "no tables")
    )


def unstamped(name: str, schema: str = "public") -> MissingStampError:
    error = unstamped_refusal(
        "table",
        name,
        where=f" (no row for it in {schema}.ctxemb_stamps)",
        by="around ctxemb (Haystack's PgvectorDocumentStore, LangChain's PGVectorStore or "
        "plain SQL, say)",
    )
    error.in_terms_of(terms_in(schema))
    return error


# -- making the table and its stamp row -------------------------------------------------------


def lock(conn: Any, schema: str, name: str) -> None:
    """Hold the lock of creating, re-stamping or repairing ``name`` until the transaction ends."""
    advisory_lock(conn, f"ctxemb:{schema}.{name}")


def ensure_stamps(conn: Any, schema: str) -> None:
    """The stamps table and the triggers' functions, made once per schema, under its lock."""
    if relation_exists(conn, schema, STAMPS):
        return
    advisory_lock(conn, f"ctxemb:{schema}")
    for statement in setup_statements(schema):
        conn.execute(statement)


def write_stamp(
    conn: Any,
    schema: str,
    name: str,
    metadata: Mapping[str, Any],
    layout: Layout,
    *,
    keep_layout: bool = False,
) -> None:
    """Insert or replace the stamp row of ``name`` (``keep_layout``: as a user's SQL would)."""
    update = "stamp = EXCLUDED.stamp" + ("" if keep_layout else ", layout = EXCLUDED.layout")
    try:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (table_name, version, stamp, layout) VALUES (%s, 0, %s, %s) "
                "ON CONFLICT (table_name) DO UPDATE SET {}"
            ).format(ident(schema, STAMPS), sql.SQL(update)),
            (name, Jsonb(dict(metadata)), Jsonb(layout.to_dict())),
        )
    except psycopg.errors.InvalidColumnReference:
        # The stamps table's key was dropped (the caller's transaction rolls back).
        raise keyless_stamps(schema) from None


def create_table(conn: Any, schema: str, name: str, stamp: IndexStamp, hnsw: bool) -> bool:
    """Create the table and its stamp row in one transaction; ``False`` when it exists."""
    with translated(f"creating table {name!r}"), conn.transaction():
        ensure_stamps(conn, schema)
        lock(conn, schema, name)
        if stored_or_none(conn, name, schema) is not None:
            return False
        layout = layout_for(stamp.contract)
        for statement in create_statements(schema, name, layout, hnsw):
            conn.execute(statement)
        write_stamp(conn, schema, name, stamp.to_metadata(), layout)
        return True


def drop_table(conn: Any, schema: str, name: str) -> None:
    """Drop table ``name`` and its stamp row in one transaction (its lexical side: by oid)."""
    with translated(f"dropping table {name!r}"), conn.transaction():
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(schema, name)))
        if relation_exists(conn, schema, STAMPS):
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE table_name = %s").format(ident(schema, STAMPS)),
                (name,),
            )


def add_seq(conn: Any, schema: str, name: str) -> None:
    """Give a table made without ctxemb ``ctxemb_seq`` and its trigger (caller's transaction)."""
    table = ident(schema, name)
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN ctxemb_seq bigint").format(table))
    conn.execute(sql.SQL("UPDATE {} SET ctxemb_seq = nextval({})").format(table, row_seq(schema)))
    conn.execute(
        sql.SQL(
            "ALTER TABLE {} ALTER COLUMN ctxemb_seq SET DEFAULT nextval({}), "
            "ALTER COLUMN ctxemb_seq SET NOT NULL"
        ).format(table, row_seq(schema))
    )
    for statement in seq_statements(schema, name):  # as a table ctxemb made has them
        conn.execute(statement)


# -- putting back what the guard records about storage, once the stamp is proven ------------

_INDEXES = """
SELECT opc.opcname FROM pg_index i
JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
JOIN pg_class ix ON ix.oid = i.indexrelid JOIN pg_am am ON am.oid = ix.relam
JOIN pg_opclass opc ON opc.oid = i.indclass[0]
WHERE n.nspname = %s AND t.relname = %s AND am.amname = 'hnsw'
"""


def hnsw_opclasses(stored: StoredTable) -> list[str]:
    """The operator classes of the table's HNSW indexes (none: every query scans the table)."""
    with translated(f"reading the indexes of {stored.name!r}"):
        return [r[0] for r in stored.conn.execute(_INDEXES, (stored.schema, stored.name))]


def repair(stored: StoredTable, stamp: IndexStamp) -> list[str]:
    """Write back the layout record and an HNSW index of the contract's operator class once
    the stamp and canary passed; a column of another type is refused (migrate, never round)."""
    layout = layout_for(stamp.contract)
    check_storage(f"table {stored.name!r}", {"column": stored.column}, {"column": layout.column})
    done: list[str] = []
    conn = stored.conn
    with translated(f"repairing {stored.name!r}"), conn.transaction():
        lock(conn, stored.schema, stored.name)
        if (stored.layout or {}).get("column") != layout.column:
            conn.execute(
                sql.SQL("UPDATE {} SET layout = %s WHERE table_name = %s").format(
                    ident(stored.schema, STAMPS)
                ),
                (Jsonb(layout.to_dict()), stored.name),
            )
            done.append(f"layout record: {stored.layout!r} -> {layout.to_dict()!r}")
        if layout.opclass not in hnsw_opclasses(stored):
            conn.execute(hnsw_statement(stored.schema, stored.name, layout, f"_{layout.space}"))
            done.append(f"HNSW index ({layout.opclass}) created")
        done += _always(conn, stored.schema, stored.name)
    return done


_TRIGGER = "SELECT tgenabled FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s"


def _always(conn: Any, schema: str, name: str) -> list[str]:
    """A table made before: its triggers made to fire always (:func:`always`; docs)."""
    done = []
    for table, trigger in ((name, "ctxemb_row_seq"), (STAMPS, "ctxemb_stamp_version")):
        found = conn.execute(_TRIGGER, (f'"{schema}"."{table}"', trigger)).fetchone()
        if found is None or found[0] != "O":  # O: not when a subscriber applies rows
            continue
        try:
            with conn.transaction():
                conn.execute(always(ident(schema, table), trigger))
            done.append(f"trigger {trigger} fires always")
        except psycopg.errors.InsufficientPrivilege:  # not the table's owner: as it was
            pass
    return done
