"""How core's tools reach a table: :func:`verify`, :func:`detect` and :func:`restamp` are
:class:`ctxemb_core.store_tools.StoreTools`' over a :class:`PgvectorDriver`, their errors worded in
this adapter's terms.

A re-stamp rewrites the stamp row in one transaction under the table's advisory lock, and every
open :class:`GuardedTable` sees its version change on its next call. ``verify`` takes a
:class:`GuardedTable`, or a :class:`StoredTable` (``stored_table(conn, name)``, unguarded: for
a table that would not open); its ``configuration`` says whether the embedding column is of
the type the stamp's contract stores. Detection samples the newest rows by last write.
"""

from __future__ import annotations

from typing import Any

from ctxemb_core import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.store_tools import StoreTools
from ctxemb_pgvector._connect import TERMS, check_connection
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._store import StoredTable, stored_table
from ctxemb_pgvector._table import GuardedTable

__all__ = ["TOOLS", "detect", "restamp", "verify"]


def _held(table: Any) -> PgvectorDriver:
    if isinstance(table, GuardedTable):
        return table.driver
    if isinstance(table, StoredTable):
        return PgvectorDriver(table.conn, table.name, schema=table.schema)
    raise InvalidInputError(
        f"table must be a GuardedTable or a StoredTable, got {type(table).__name__}"
    )


def _existing(
    conn: Any, name: str, *, embedder: Embedder | None = None, schema: str = "public"
) -> PgvectorDriver:
    """The driver of table ``name``, which must exist (``embedder``: a table keeps no
    embedding configuration beside its stamp)."""
    check_connection(conn)
    stored_table(conn, name, schema)  # a missing table named with the schema's tables
    return PgvectorDriver(conn, name, schema=schema)


TOOLS = StoreTools(TERMS, driver=_existing, driver_of=_held)
verify = TOOLS.verify
detect = TOOLS.detect
restamp = TOOLS.restamp
