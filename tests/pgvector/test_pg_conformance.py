"""The driver conformance suite against PostgreSQL + pgvector (:mod:`ctxemb_pgvector._driver`),
on the run's server: one database for the module, a table of its own per test, a connection
per driver handle (the concurrency tests' handles write at once). And one stamp format: a table
made through the driver opens with ``open_table`` under the same contract, and the other way
round; another contract is refused both ways."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

import ctxemb_pgvector
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import ContractMismatchError
from ctxemb_core.index import GuardedIndex
from ctxemb_core.index.armed import armed
from ctxemb_core.index.driver import Record
from ctxemb_core.testing.conformance import (
    DOCS,
    DriverConformance,
    tiny_embedder,
    variants,
)
from ctxemb_pgvector import Layout, PgvectorDriver, layout_for
from ctxemb_pgvector._connect import check_connection, translated
from ctxemb_pgvector._driver import rows_of
from ctxemb_pgvector._sql import check_name, ident, table_statement
from ctxemb_pgvector._store import drop_table, ensure_stamps, write_stamp

_names = itertools.count()


@pytest.fixture(scope="module")
def pg_db(pg_dsn: str):
    """One database of the run's server for the whole module (tables are per test)."""
    from pg_server import fresh_database

    return fresh_database(pg_dsn)


@pytest.fixture
def table_name() -> str:
    return f"conf{next(_names)}"


@pytest.fixture
def conns(pg_db: str):
    made: list = []
    yield made
    for conn in made:
        conn.close()


class RawTable:
    """A user's own SQL on one table, around the guard (the conformance suite's ``raw``; each
    store's raw client is its tests' own, ``docs/architecture.md``, "How to add a store");
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


class TestPgvectorDriver(DriverConformance):
    #: A typed vector(n) column refuses a vector of another width itself.
    unstorable: ClassVar[frozenset[str]] = frozenset({"another width"})

    @pytest.fixture
    def new_driver(self, pg_db, table_name, conns):
        def make() -> PgvectorDriver:
            conn = ctxemb_pgvector.connect(pg_db)
            conns.append(conn)
            return PgvectorDriver(conn, table_name)

        return make

    @pytest.fixture
    def raw(self, new_driver, embedder):
        handle = new_driver()
        return RawTable(handle.conn, handle.name, layout_for(embedder.contract))


# -- one stamp format: the driver's tables and open_table's are the same ------------------------


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return tiny_embedder()


def test_a_table_made_through_the_driver_opens_with_open_table(pg, embedder, table_name):
    docs = GuardedIndex.open(PgvectorDriver(pg, table_name), embedder)
    docs.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
    table = ctxemb_pgvector.open_table(pg, table_name, embedder, create=False)
    assert table.query(["how is green tea made"], n_results=1)["ids"] == [["tea"]]
    assert sorted(table.ids()) == sorted(DOCS)
    table.add(["fresh"], ["A fresh text."])  # and a row written there opens through the driver
    assert GuardedIndex.open(PgvectorDriver(pg, table_name), embedder).count() == len(DOCS) + 1
    other = Embedder(variants(embedder.contract)["pooling"])
    with pytest.raises(ContractMismatchError):
        ctxemb_pgvector.open_table(pg, table_name, other)


def test_a_table_made_by_open_table_opens_through_the_driver(pg, embedder, table_name):
    table = ctxemb_pgvector.open_table(pg, table_name, embedder)
    table.add(list(DOCS), list(DOCS.values()))
    docs = GuardedIndex.open(PgvectorDriver(pg, table_name), embedder)
    assert not docs.created and docs.count() == len(DOCS)
    assert docs.query(["how is green tea made"], 1)[0][0].id == "tea"
    docs.add(["fresh"], ["A fresh text."])
    assert ctxemb_pgvector.open_table(pg, table_name, embedder).count() == len(DOCS) + 1
    other = Embedder(variants(embedder.contract)["document_prefix"])
    with pytest.raises(ContractMismatchError):
        GuardedIndex.open(PgvectorDriver(pg, table_name), other)


# -- the write mark: a transaction that took its number earlier and commits later ---------------


def test_the_mark_misses_no_write_that_commits_after_it(pg_db, embedder, table_name, conns):
    def conn():
        made = ctxemb_pgvector.connect(pg_db)
        conns.append(made)
        return made

    driver = PgvectorDriver(conn(), table_name)
    docs = GuardedIndex.open(driver, embedder)
    docs.add(list(DOCS), list(DOCS.values()))
    slow, fast = conn(), conn()
    table = f'"public"."{table_name}"'
    with slow.transaction():  # a client's transaction takes its number first...
        slow.execute(f"UPDATE {table} SET content = 'Tea, rewritten.' WHERE id = 'tea'")
        with fast.transaction():  # ...another's takes a later one and commits first
            fast.execute(f"UPDATE {table} SET content = 'Bike, rewritten.' WHERE id = 'bike'")
        head = driver.head()
        newest = fast.execute(f"SELECT max(ctxemb_seq) FROM {table}").fetchone()[0]
    assert head is not None and head.mark is not None
    tea = fast.execute(f"SELECT ctxemb_seq FROM {table} WHERE id = 'tea'").fetchone()[0]
    assert tea < newest  # the newest number committed when the mark was read is not a mark
    assert "tea" in driver.changes(head.mark)
    quiet = driver.head()  # with no writer left, the mark is the sequence's, and costs O(new)
    assert quiet is not None and quiet.mark is not None and quiet.mark >= newest
    assert driver.changes(quiet.mark) == []


def _shape(conn, name: str) -> tuple:
    """A table's columns, indexes, triggers and stamp-row layout, its name taken out."""
    columns = conn.execute(
        "SELECT column_name, data_type, udt_name, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
        (name,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE tablename = %s ORDER BY 1", (name,)
    ).fetchall()
    triggers = conn.execute(
        "SELECT tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c "
        "ON c.oid = t.tgrelid WHERE c.relname = %s AND NOT t.tgisinternal ORDER BY 1",
        (name,),
    ).fetchall()
    stamp = conn.execute(
        "SELECT stamp, layout FROM ctxemb_stamps WHERE table_name = %s", (name,)
    ).fetchall()
    return tuple(repr(x).replace(name, "T") for x in (columns, indexes, triggers, stamp))


def test_the_driver_makes_the_table_open_table_makes(pg, embedder):
    made = ctxemb_pgvector.driver(pg.ctxemb_dsn, "by_driver")  # a connection of its own
    try:
        GuardedIndex.open(made, embedder)
    finally:
        made.close()
    ctxemb_pgvector.open_table(pg, "by_open_table", embedder)
    shape = _shape(pg, "by_driver")
    assert "ctxemb_seq" in shape[0] and "hnsw" in shape[1] and "ctxemb_row_seq" in shape[2]
    assert "ctxemb:fingerprint" in shape[3]
    assert shape == _shape(pg, "by_open_table")


def test_a_stamp_is_not_written_over_a_table_dropped_meanwhile(pg, embedder, table_name):
    from ctxemb_core.stamp import IndexStamp

    driver = PgvectorDriver(pg, table_name)
    GuardedIndex.open(driver, embedder)
    head = driver.head()
    assert head is not None
    pg.execute(f'DROP TABLE "{table_name}"')
    assert (
        driver.write_stamp(IndexStamp.from_embedder(embedder), stamp_version=head.stamp_version)
        is False
    )
    assert driver.head() is None
