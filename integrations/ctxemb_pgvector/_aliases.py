"""PostgreSQL's aliases: one row per alias in the schema's ``ctxemb_aliases`` table (core's
:class:`~ctxemb_core.aliases.RowBook`: each switch one statement, in its own transaction)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core.aliases import AliasRecord, RowBook
from ctxemb_core.index.connecting import exclusive
from ctxemb_core.store_tools import StoreCatalog
from ctxemb_pgvector._connect import check_connection, translated
from ctxemb_pgvector._sql import advisory_lock, check_name, ident, relation_exists
from ctxemb_pgvector._store import drop_table, stored_or_none

__all__ = ["ALIASES", "PgAliasBook", "PgCatalog", "catalog"]

#: The table of a schema's aliases.
ALIASES = "ctxemb_aliases"


class PgAliasBook(RowBook):
    """The aliases of one schema: core's :class:`~ctxemb_core.aliases.RowBook` in PostgreSQL's
    words (a ``jsonb`` record; the table made under the schema's advisory lock)."""

    RECORD = "record::text"

    def __init__(self, conn: Any, schema: str = "public") -> None:
        self.conn = check_connection(conn)
        self.schema = check_name(schema, "schema name")
        self.table = ident(self.schema, ALIASES)

    def _running(self, what: str) -> AbstractContextManager[None]:
        return translated(what, exclusive(self.conn))  # threads sharing conn take turns

    def _run(self, query: str, params: tuple[Any, ...] = ()) -> tuple[list[tuple[Any, ...]], int]:
        statement = sql.SQL(query.replace("?", "%s")).format(table=self.table)
        cur = self.conn.execute(statement, params)
        return (cur.fetchall() if cur.description is not None else []), cur.rowcount

    def _value(self, record: AliasRecord) -> Jsonb:
        return Jsonb(record.to_dict())

    def _exists(self) -> bool:
        return relation_exists(self.conn, self.schema, ALIASES)

    def _create(self) -> None:
        with self.conn.transaction():
            advisory_lock(self.conn, f"ctxemb:{self.schema}:aliases")  # two first aliases
            self.conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, generation bigint "
                    "NOT NULL, record jsonb NOT NULL, changed timestamptz NOT NULL DEFAULT now())"
                ).format(self.table)
            )


class PgCatalog(StoreCatalog):
    """A schema of a database as an upgrade sees it: its tables by name and its aliases."""

    tools = "ctxemb_pgvector._tools:TOOLS"  # its drivers and hybrid indexes (the side in it)

    def __init__(self, conn: Any, schema: str = "public") -> None:
        self.client = self.conn = check_connection(conn)
        self.schema = check_name(schema, "schema name")
        self.scope = {"schema": self.schema}
        self.aliases = PgAliasBook(self.conn, self.schema)

    def exists(self, name: str) -> bool:
        return stored_or_none(self.conn, name, self.schema) is not None

    def drop(self, name: str) -> None:
        drop_table(self.conn, self.schema, check_name(name))

    def describe(self) -> str:
        info = self.conn.info
        return f"postgresql://{info.host}:{info.port}/{info.dbname} schema {self.schema}"

    def lexical(self, name: str) -> Any:
        from ctxemb_core.hybrid import LexicalStore
        from ctxemb_pgvector._hybrid_store import PgLexical

        return LexicalStore(PgLexical(self.conn, self.schema, check_name(name)))

    def lexical_mark(self, name: str) -> str | None:
        return None  # the side lives in the schema's own tables: lexical() always finds it


def catalog(conn: Any, *, schema: str = "public") -> PgCatalog:
    """The schema ``conn`` reaches, for aliases and upgrades."""
    return PgCatalog(conn, schema)
