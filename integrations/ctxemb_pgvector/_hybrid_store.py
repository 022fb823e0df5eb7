"""The lexical side of a pgvector table in the schema's ``ctxemb_lexical_*`` tables, for core's
:class:`~ctxemb_core.hybrid.LexicalStore`, written in the dense rows' own transaction (core's
:class:`~ctxemb_core.hybrid.store.ServerLexical`, in PostgreSQL's words)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

from ctxemb_core.hybrid.store import MARKS, SQL_TABLES, TABLES, ServerLexical
from ctxemb_core.index.connecting import exclusive, serialised
from ctxemb_pgvector._connect import translated
from ctxemb_pgvector._sql import advisory_lock, relation_exists


@serialised
class PgLexical(ServerLexical):
    """The lexical side of table ``name`` in ``schema`` (see the module docstring)."""

    # Core's tables, and its marks: which tables were given a side, by oid.
    tables = SQL_TABLES + (
        "CREATE TABLE IF NOT EXISTS {marks} (table_oid oid PRIMARY KEY, token text NOT NULL);"
    )
    _translated = staticmethod(translated)

    def __init__(self, conn: psycopg.Connection[Any], schema: str, name: str) -> None:
        self.schema = schema
        tables = {**TABLES, "marks": MARKS}
        names = {key: sql.Identifier(schema, t).as_string(conn) for key, t in tables.items()}
        # PostgreSQL's planner finds the (side, id) and (side, num) indexes by itself.
        names["docs_by_id"], names["postings_by_num"] = names["docs"], names["postings"]
        names["marked"] = "table_oid"
        where = f'PostgreSQL tables "{schema}".ctxemb_lexical_* (table {name!r})'
        super().__init__(conn, name, where, names)

    def _exists(self, table: str) -> bool:
        with translated(f"reading the lexical side of {self.name!r}"):
            return relation_exists(self.conn, self.schema, table)

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def _lock_tables(self) -> None:
        advisory_lock(self.conn, f"ctxemb_lexical:{self.schema}")

    @contextlib.contextmanager
    def _transaction(self, what: str) -> Iterator[None]:
        # Held for the whole transaction, which spans calls of the dense side's driver.
        with exclusive(self.conn), translated(what), self.conn.transaction():
            yield

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """One snapshot for a read's statements (a caller's transaction: its own)."""
        with exclusive(self.conn):
            if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                yield
                return
            with translated(f"reading the lexical side of {self.name!r}"), self.conn.transaction():
                self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                yield
