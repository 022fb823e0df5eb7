"""A user's own SQL on one table, around the guard: what the driver conformance suite
(:class:`ctxemb_core.testing.conformance.RawAccess`) tampers through."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core.index.armed import armed
from ctxemb_core.index.driver import Record
from ctxemb_pgvector._connect import check_connection, translated
from ctxemb_pgvector._driver import PgvectorDriver, rows_of
from ctxemb_pgvector._sql import Layout, check_name, ident, table_statement
from ctxemb_pgvector._store import drop_table, ensure_stamps, write_stamp

__all__ = ["RawTable"]


class RawTable:
    """A user's own SQL on one table, around the guard (the conformance suite's ``raw``);
    ``layout``: the column as its user made it (:func:`ctxemb_pgvector.layout_for`)."""

    def __init__(self, conn: Any, name: str, layout: Layout, *, schema: str = "public") -> None:
        self.conn = check_connection(conn)
        self.name = check_name(name)
        self.schema = check_name(schema, "schema name")
        self.layout = layout

    @property
    def table(self) -> sql.Composed:
        return ident(self.schema, self.name)

    def create(self, metadata: Mapping[str, Any] | None = None) -> None:
        """A table of Haystack's layout, made without ctxemb (a stamp row if ``metadata``)."""
        with translated(f"creating {self.name!r}"), self.conn.transaction():
            made = table_statement(self.schema, self.name, self.layout.column, seq=False)
            self.conn.execute(made)
            if metadata:
                ensure_stamps(self.conn, self.schema)
                write_stamp(self.conn, self.schema, self.name, metadata, self.layout)

    def drop(self) -> None:
        """Drop the table and its stamp row."""
        drop_table(self.conn, self.schema, self.name)

    def write(self, records: Sequence[Record]) -> None:
        """Upsert rows as given, with no check of any kind."""
        query = sql.SQL(
            "INSERT INTO {} (id, embedding, content, meta) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding, "
            "content = EXCLUDED.content, meta = EXCLUDED.meta"
        ).format(self.table)
        with translated(f"writing to {self.name!r}"), self.conn.transaction():
            for i, text, meta, value in rows_of(records, self.layout.kind):
                self.conn.execute(query, (i, value, text, None if meta is None else Jsonb(meta)))

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Replace the stamp row's stamp whole (its version moves by its trigger)."""
        with translated(f"stamping {self.name!r}"):
            write_stamp(self.conn, self.schema, self.name, metadata, self.layout, keep_layout=True)

    def failing_writes(
        self, after: int, error: BaseException | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """The next write fails (``error``) once ``after`` rows are sent, in its transaction."""
        key = PgvectorDriver(self.conn, self.name, schema=self.schema)._key()
        return armed(key, after, error, store="PostgreSQL")
