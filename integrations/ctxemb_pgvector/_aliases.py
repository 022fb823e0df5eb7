"""PostgreSQL's aliases: one row per alias in the schema's ``ctxemb_aliases`` table, switched in
one transaction (an ``UPDATE`` that holds only while the row's generation is the one the change
was decided on; an ``INSERT`` that holds only while there is no row)."""

from __future__ import annotations

from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core.aliases import AliasRecord
from ctxemb_core.index.connecting import serialised
from ctxemb_pgvector._connect import check_connection, translated
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._sql import advisory_lock, check_name, ident, relation_exists
from ctxemb_pgvector._store import drop_table, stored_or_none

__all__ = ["ALIASES", "PgAliasBook", "PgCatalog", "catalog"]

#: The table of a schema's aliases.
ALIASES = "ctxemb_aliases"


@serialised
class PgAliasBook:
    """The aliases of one schema (see the module's docstring)."""

    def __init__(self, conn: Any, schema: str = "public") -> None:
        self.conn = check_connection(conn)
        self.schema = check_name(schema, "schema name")
        self.table = ident(self.schema, ALIASES)

    def _exists(self) -> bool:
        return relation_exists(self.conn, self.schema, ALIASES)

    def _ensure(self) -> None:
        if self._exists():
            return
        with self.conn.transaction():
            advisory_lock(self.conn, f"ctxemb:{self.schema}:aliases")  # two first aliases
            self.conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, generation bigint "
                    "NOT NULL, record jsonb NOT NULL, changed timestamptz NOT NULL DEFAULT now())"
                ).format(self.table)
            )

    def read(self, name: str) -> AliasRecord | None:
        with translated(f"reading alias {name!r}"):
            if not self._exists():
                return None
            row = self.conn.execute(
                sql.SQL("SELECT record::text FROM {} WHERE name = %s").format(self.table), (name,)
            ).fetchone()
        return None if row is None else AliasRecord.from_json(row[0], name)

    def swap(self, record: AliasRecord, *, expected: int | None) -> bool:
        with translated(f"writing alias {record.name!r}"):
            self._ensure()
            if expected is None:
                statement = sql.SQL(
                    "INSERT INTO {} (name, generation, record) VALUES (%s, %s, %s) "
                    "ON CONFLICT (name) DO NOTHING"
                ).format(self.table)
                values: tuple[Any, ...] = (record.name, record.generation, Jsonb(record.to_dict()))
            else:
                statement = sql.SQL(
                    "UPDATE {} SET generation = %s, record = %s, changed = now() "
                    "WHERE name = %s AND generation = %s"
                ).format(self.table)
                values = (record.generation, Jsonb(record.to_dict()), record.name, expected)
            return self.conn.execute(statement, values).rowcount == 1

    def names(self) -> list[str]:
        with translated("listing aliases"):
            if not self._exists():
                return []
            rows = self.conn.execute(
                sql.SQL("SELECT name FROM {} ORDER BY name").format(self.table)
            ).fetchall()
        return [r[0] for r in rows]


class PgCatalog:
    """A schema of a database as an upgrade sees it: its tables by name and its aliases."""

    def __init__(self, conn: Any, schema: str = "public") -> None:
        self.conn = check_connection(conn)
        self.schema = check_name(schema, "schema name")
        self.aliases = PgAliasBook(self.conn, self.schema)

    def driver(self, name: str) -> PgvectorDriver:
        return PgvectorDriver(self.conn, check_name(name), schema=self.schema)

    def exists(self, name: str) -> bool:
        return stored_or_none(self.conn, name, self.schema) is not None

    def drop(self, name: str) -> None:
        """Drop table ``name`` and its stamp row in one transaction (:func:`drop_table`)."""
        drop_table(self.conn, self.schema, check_name(name))

    def describe(self) -> str:
        info = self.conn.info
        return f"postgresql://{info.host}:{info.port}/{info.dbname} schema {self.schema}"

    # A hybrid index (core's HybridCatalog): its lexical side in the schema's tables.
    def open_hybrid(self, name: str, contract: Any, **options: Any) -> Any:
        from ctxemb_pgvector._tools import TOOLS

        return TOOLS.open_hybrid(self.conn, name, contract, schema=self.schema, **options)

    def lexical(self, name: str) -> Any:
        from ctxemb_core.hybrid import LexicalStore
        from ctxemb_pgvector._hybrid_store import PgLexical

        return LexicalStore(PgLexical(self.conn, self.schema, check_name(name)))

    def lexical_mark(self, name: str) -> str | None:
        return None  # the side lives in the schema's own tables: lexical() always finds it


def catalog(conn: Any, *, schema: str = "public") -> PgCatalog:
    """The schema ``conn`` reaches, for aliases and upgrades."""
    return PgCatalog(conn, schema)
