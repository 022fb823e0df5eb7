"""The lexical side of a pgvector table in the schema's ``ctxemb_lexical_*`` tables, for core's
:class:`~ctxemb_core.hybrid.LexicalStore`, written in the dense rows' own transaction."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

from ctxemb_core.hybrid.store import SIDES, SQL_TABLES, TABLES
from ctxemb_core.index.connecting import exclusive, serialised
from ctxemb_pgvector._connect import translated
from ctxemb_pgvector._sql import advisory_lock, relation_exists

# Core's tables, and PostgreSQL's own: which tables were given a side (by oid).
_TABLES = SQL_TABLES + (
    "CREATE TABLE IF NOT EXISTS {marks} (table_oid oid PRIMARY KEY, token text NOT NULL);"
)
#: Which tables were given a lexical side (by oid, with its token): a side deleted is lost.
MARKS = "ctxemb_hybrid_marks"


@serialised
class PgLexical:
    """The lexical side of table ``name`` in ``schema`` (see the module docstring)."""

    lock = " FOR UPDATE"
    single = False

    def __init__(self, conn: psycopg.Connection[Any], schema: str, name: str) -> None:
        self.conn = conn
        self.schema = schema
        self.name = name
        self.where = f'PostgreSQL tables "{schema}".ctxemb_lexical_* (table {name!r})'
        tables = {**TABLES, "marks": MARKS}
        self._names = {key: sql.Identifier(schema, t).as_string(conn) for key, t in tables.items()}
        # PostgreSQL's planner finds the (side, id) and (side, num) indexes by itself.
        self._names["docs_by_id"] = self._names["docs"]
        self._names["postings_by_num"] = self._names["postings"]

    def sql(self, query: str) -> str:
        return query.format(**self._names).replace("?", "%s")

    def _exists(self, table: str) -> bool:
        with translated(f"reading the lexical side of {self.name!r}"):
            return relation_exists(self.conn, self.schema, table)

    def present(self) -> bool:
        return self._exists(SIDES)

    def mark(self, oid: int) -> str | None:
        """The token recorded for the table of ``oid``, or ``None``."""
        if not self._exists(MARKS):
            return None
        rows = self.execute("SELECT token FROM {marks} WHERE table_oid = ?", (oid,))
        return str(rows[0][0]) if rows else None

    def set_mark(self, oid: int, token: str) -> None:
        self.create_tables()
        self.execute(
            "INSERT INTO {marks} (table_oid, token) VALUES (?, ?) "
            "ON CONFLICT (table_oid) DO UPDATE SET token = EXCLUDED.token",
            (oid, token),
        )

    def execute(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with translated(f"the lexical side of {self.name!r}"):
            cur = self.conn.execute(self.sql(query), tuple(params))
            return list(cur.fetchall()) if cur.description is not None else []

    def executemany(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        with translated(f"writing the lexical side of {self.name!r}"), self.conn.cursor() as cur:
            cur.executemany(self.sql(query), rows)

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def _lock_schema(self) -> None:
        # Two processes creating tables or sides at once: one waits for the other.
        advisory_lock(self.conn, f"ctxemb_lexical:{self.schema}")

    def create_tables(self) -> None:
        with translated("creating the lexical tables"), self.conn.transaction():
            self._lock_schema()
            for statement in self.sql(_TABLES).split(";"):
                if statement.strip():
                    self.conn.execute(statement)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        # Held for the whole transaction, which spans calls of the dense side's driver.
        what = f"the lexical side of {self.name!r}"
        with exclusive(self.conn), translated(what), self.conn.transaction():
            yield

    def writing(self) -> contextlib.AbstractContextManager[None]:
        return self._transaction()

    @contextlib.contextmanager
    def creating(self) -> Iterator[None]:
        with self._transaction():
            self._lock_schema()
            yield

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        # One snapshot for the statistics and the postings they score.
        with exclusive(self.conn), self._snapshot():
            yield

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            yield
            return
        with translated(f"reading the lexical side of {self.name!r}"), self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield
