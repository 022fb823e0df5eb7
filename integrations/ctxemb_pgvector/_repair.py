"""Putting back what the guard records about a table's storage, once the stamp is proven:
the column's layout beside the stamp, and the HNSW index of the contract's operator class."""

from __future__ import annotations

from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core import IndexStamp
from ctxemb_core.guard import check_storage
from ctxemb_pgvector._connect import translated
from ctxemb_pgvector._sql import STAMPS, ident, layout_for
from ctxemb_pgvector._store import StoredTable, lock

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
    """Write back what was changed around ctxemb; returns what was repaired, in words.

    Only after the stamp and canary passed (the caller's job): the column itself must be of the
    contract's type (a column holding other vectors is not repaired: its rows would be
    rounded or cut; migrate instead), then the layout recorded beside the stamp is rewritten if
    it differs, and an HNSW index of the contract's operator class is made if there is none
    (queries order by the contract's operator; an index of another class is never used).

    Raises:
        ctxemb_core.errors.StorageMismatchError: the column is of another type than the
            contract stores.
    """
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
            conn.execute(
                sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding {})").format(
                    sql.Identifier(f"{stored.name}_ctxemb_hnsw_{layout.space}"),
                    stored.table,
                    sql.SQL(layout.opclass),
                )
            )
            done.append(f"HNSW index ({layout.opclass}) created")
    return done
