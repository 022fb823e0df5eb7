"""A PostgreSQL table as a :class:`~ctxemb_core.index.driver.StoreDriver`: the guard in core
(:class:`~ctxemb_core.index.GuardedIndex`) over this adapter's SQL, table and stamp row.

The table is the one :func:`ctxemb_pgvector.open_table` makes (same columns, trigger, HNSW index
and stamp row in ``ctxemb_stamps``, made by the same code): a table created through either opens
through the other under the same contract. How each promise of the protocol is kept:

- **identity**: the table's oid (a table dropped and made again under its name is another).
- **stamp version**: the stamp row's version (raised by its trigger on any edit, by any client)
  with the table's oid, the embedding column's number and its type: a column altered or made
  again around ctxemb moves it too. The store's own setting (``storage``) is the column's type.
- **create**: the table, its trigger, its HNSW index and its stamp row in one transaction,
  under the table's advisory lock (:func:`create_table`).
- **write / delete**: one transaction that first holds the table (``ROW EXCLUSIVE``) and the
  stamp row (``FOR SHARE``, so no re-stamp lands until it commits) and compares the version.
- **the write mark**: ``ctxemb_seq``, which the row trigger takes afresh from a sequence on
  every insert and update by any client (indexed). A sequence number is taken before its
  transaction commits, so ``max(ctxemb_seq)`` is not a mark: a transaction that took a lower
  number may still commit after it. The mark is the sequence's last value *read first*, then
  checked against the table's lock holders: a transaction that took a number for this table
  holds the table's ``ROW EXCLUSIVE`` lock from before it took it until it ends, so if no other
  session holds a writing lock on the table after the value was read, every number up to it
  belongs to a transaction that has ended (committed, and visible to what the guard reads
  next, or rolled back). While some other session is writing the table the mark is ``0``:
  sound (``changes(0)`` is every row, and the guard treats a mark lower than its record as no
  record: a full sample), only not cheap; the next quiet open records a real one.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core.errors import ExistingIdsError, InvalidInputError, StoreUnavailableError
from ctxemb_core.index.driver import (
    INCLUDE,
    Capabilities,
    Filter,
    Head,
    Hit,
    Record,
    StampMovedError,
    StampRead,
    Version,
)
from ctxemb_core.stamp import IndexStamp
from ctxemb_pgvector._connect import check_connection, connect, translated
from ctxemb_pgvector._repair import repair
from ctxemb_pgvector._sql import (
    MAX_EF_SEARCH,
    MAX_ID,
    SEQ,
    STAMPS,
    Layout,
    check_name,
    copy_rows,
    create_statements,
    ident,
    layout_for,
    lock_key,
    setup_statements,
    where_clause,
)
from ctxemb_pgvector._store import _TABLE, StoredTable, keyless_stamps, stored_or_none, unstamped
from ctxemb_pgvector._vectors import from_column, to_column

if TYPE_CHECKING:
    from ctxemb_core.contract import EmbeddingContract

__all__ = ["PgvectorDriver", "RawTable", "driver"]

#: The locks a session writing a table's rows holds on it until it ends.
_WRITING = ("RowExclusiveLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")

_BUSY = """
SELECT EXISTS (
  SELECT 1 FROM pg_locks
  WHERE locktype = 'relation' AND relation = %s AND mode = ANY(%s)
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND pid IS DISTINCT FROM pg_backend_pid())
"""

# The head in one statement, on the same catalog read as ``stored_or_none`` (its ``_TABLE``):
# the table, the stamp row's version(s) and the mark; the lock holders are read in a subquery
# of the sequence's row, so after it.
_HEAD = """
SELECT t.col, t.seq, t.oid, t.attnum,
       (SELECT array_agg(version) FROM {stamps} WHERE table_name = %s), m.v, m.busy
FROM ({table}) t(col, seq, oid, attnum)
LEFT JOIN LATERAL (
  SELECT s.v, EXISTS (
    SELECT 1 FROM pg_locks
    WHERE s.v IS NOT NULL AND locktype = 'relation' AND relation::bigint = t.oid
      AND mode = ANY(%s)
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND pid IS DISTINCT FROM pg_backend_pid()) AS busy
  FROM (SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS v FROM {seq}) s
) m ON t.seq
"""

_IN_TXN = """
SELECT s.version, format_type(a.atttypid, a.atttypmod), a.attnum, %s::regclass::oid::bigint
FROM (SELECT 1) one
LEFT JOIN {stamps} s ON s.table_name = %s
LEFT JOIN pg_attribute a ON a.attrelid = %s::regclass AND a.attname = 'embedding'
  AND NOT a.attisdropped
"""


def _version(oid: Any, attnum: Any, column: Any, version: Any) -> str:
    return f"{oid}:{attnum}:{column}:{version}"


class PgvectorDriver:
    """The :class:`~ctxemb_core.index.driver.StoreDriver` of one table (see the module).

    Args:
        conn: a psycopg 3 connection in autocommit mode (:func:`ctxemb_pgvector.connect`).
        name: the table's name; ``schema``: its schema (and its stamp row's).
        hnsw: give a table this driver creates an HNSW index (as ``open_table`` does).
        ef_search: the HNSW search breadth (at least a search's ``k``).

    Example:
        >>> from ctxemb_core.index import GuardedIndex
        >>> docs = GuardedIndex.open(driver(dsn, "docs"), embedder)  # doctest: +SKIP
    """

    capabilities = Capabilities(transactions=True, marks=True, filters=True)

    def __init__(
        self,
        conn: Any,
        name: str,
        *,
        schema: str = "public",
        hnsw: bool = True,
        ef_search: int = 200,
    ) -> None:
        self.conn = check_connection(conn)
        self._name = check_name(name)
        self.schema = check_name(schema, "schema name")
        self.hnsw = hnsw
        self.ef_search = ef_search
        self._described: str | None = None
        self._layout: tuple[Version, Layout] | None = None
        self._seq: bool | None = None
        self._ef: int | None = None  # the hnsw.ef_search this driver set on the connection
        #: A hybrid index's lexical side (``lock()``, ``written(ids, documents, metas)``,
        #: ``deleted(ids)``), written in the transactions that write this table's rows.
        self.companion: Any = None

    def __repr__(self) -> str:
        return f"PgvectorDriver({self.schema}.{self._name})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def table(self) -> sql.Composed:
        return ident(self.schema, self._name)

    def close(self) -> None:
        """Close the connection (the driver's own, made by :func:`driver` from a DSN)."""
        self.conn.close()

    def describe(self) -> str:
        if self._described is None:
            with translated("reading the server's identity"):
                row = self.conn.execute(
                    "SELECT current_database(), pg_postmaster_start_time()::text"
                ).fetchone()
            assert row is not None
            info = self.conn.info
            self._described = f"postgresql://{info.host}:{info.port}/{row[0]} (started {row[1]})"
        return self._described

    def unstamped_error(self) -> Exception:
        """The refusal of the table unstamped, in PostgreSQL's terms (what writes around
        ctxemb here, how to adopt it)."""
        return unstamped(self._name, self.schema)

    def set_breadth(self, ef: int) -> None:
        """Set the connection's ``hnsw.ef_search`` (a search without a filter runs at it)."""
        with translated(f"searching {self._name!r}"):
            self.conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(ef)))
        self._ef = ef

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        return {"column": layout_for(stamp.contract).column}

    # -- the table and its stamp --------------------------------------------------------

    def create(self, stamp: IndexStamp) -> bool:
        return create_table(self.conn, self.schema, self._name, stamp, self.hnsw)

    def _stored(self) -> StoredTable | None:
        return stored_or_none(self.conn, self._name, self.schema)

    def _head(self, stored: StoredTable) -> Head:
        version = _version(stored.oid, stored.attnum, stored.column, stored.version)
        self._seq = stored.seq
        layout = self._layout_of(version, stored)
        mark = self._mark(stored) if stored.seq else None
        space = layout.space_for_similarity if layout is not None else "cosine"
        return Head(str(stored.oid), version, mark, space)

    def _layout_of(self, version: Version, stored: StoredTable) -> Layout | None:
        """The stamped contract's layout (how vectors are written and searched), kept per
        stamp version (``None``: no readable stamp)."""
        if self._layout is not None and self._layout[0] == version:
            return self._layout[1]
        if not stored.stamped:
            return None
        try:
            contract: EmbeddingContract = IndexStamp.from_metadata(stored.metadata).contract
        except Exception:  # a damaged stamp: the guard refuses it from the metadata
            return None
        self._layout = (version, layout_for(contract))
        return self._layout[1]

    def _mark(self, stored: StoredTable) -> int:
        seq = ident(self.schema, "ctxemb_row_seq")
        with translated(f"reading the write mark of {self._name!r}"):
            row = self.conn.execute(
                sql.SQL("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {}").format(seq)
            ).fetchone()
            # Read after the sequence: a session that took a number up to it and has not
            # ended holds its writing lock on the table now.
            busy = self.conn.execute(_BUSY, (stored.oid, list(_WRITING))).fetchone()
        assert row is not None and busy is not None
        return 0 if busy[0] else int(row[0])

    def head(self) -> Head | None:
        query = sql.SQL(_HEAD).format(
            stamps=ident(self.schema, STAMPS),
            table=sql.SQL(_TABLE),
            seq=ident(self.schema, "ctxemb_row_seq"),
        )
        try:
            with translated(f"reading the head of {self._name!r}"):
                row = self.conn.execute(
                    query, (self._name, self.schema, self._name, list(_WRITING))
                ).fetchone()
        except psycopg.errors.UndefinedTable:  # no stamps table or sequence in the schema yet
            row = ()
        if row is None:
            return None
        versions = row[4] if row else None
        version = _version(row[2], row[3], row[0], versions[0] if versions else None) if row else ""
        if not row or (versions and len(versions) > 1) or self._layout_missing(version, row):
            stored = self._stored()  # the slow read: a damaged stamp row, a stamp not yet read
            return None if stored is None else self._head(stored)
        self._seq = bool(row[1])
        layout = self._layout[1] if self._layout is not None else None
        space = layout.space_for_similarity if layout is not None else "cosine"
        mark = None if not row[1] else (0 if row[6] else int(row[5]))
        return Head(str(row[2]), version, mark, space)

    def _layout_missing(self, version: str, row: Sequence[Any]) -> bool:
        """Whether the stamp's layout must be read (a stamp row this handle has not read)."""
        return row[4] is not None and (self._layout is None or self._layout[0] != version)

    def read_stamp(self) -> StampRead | None:
        stored = self._stored()
        if stored is None:
            return None
        # The column's type, and the one recorded beside the stamp when they differ (changed
        # around ctxemb: refused as a column of another type is, until repaired).
        column, recorded = stored.column, (stored.layout or {}).get("column")
        if recorded is not None and recorded != column:
            column = f"{column} (recorded as {recorded})"
        return StampRead(self._head(stored), stored.metadata, {"column": column})

    def write_stamp(self, stamp: IndexStamp, *, stamp_version: Version) -> bool:
        try:
            return self._write_stamp(stamp, stamp_version)
        except StampMovedError:  # the table was dropped meanwhile: nothing written
            return False

    def _write_stamp(self, stamp: IndexStamp, stamp_version: Version) -> bool:
        conn = self.conn
        with translated(f"stamping {self._name!r}"), conn.transaction():
            ensure_stamps(conn, self.schema)
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (lock_key(self.schema, self._name),)
            )
            self._hold()
            stored = self._stored()
            if stored is None or stamp_version != _version(
                stored.oid, stored.attnum, stored.column, stored.version
            ):
                return False
            if not stored.seq:  # a table made without ctxemb gains its write mark
                add_seq(conn, self.schema, self._name)
                self._seq = None
            write_stamp(conn, self.schema, self._name, stamp)
            stored = self._stored()
            assert stored is not None
            repair(stored, stamp)  # the recorded layout, and an HNSW index where none is
        return True

    # -- reading ----------------------------------------------------------------------------

    def count(self) -> int:
        with translated(f"counting {self._name!r}"):
            row = self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self.table))
            return int(row.fetchone()[0])  # type: ignore[index]

    def order(self) -> sql.Composable:
        """Oldest write first (by id for a table without ``ctxemb_seq``, as the head last saw
        it: the guard reads the head before every call)."""
        if self._seq is None:
            stored = self._stored()
            if stored is None:
                raise InvalidInputError(f"table {self._name!r} does not exist")
            self._seq = stored.seq
        return sql.SQL(f"{SEQ}, id" if self._seq else "id")

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        query = sql.SQL("SELECT id FROM {} ORDER BY {} LIMIT %s OFFSET %s").format(
            self.table, self.order()
        )
        with translated(f"reading the ids of {self._name!r}"):
            return [r[0] for r in self.conn.execute(query, (limit, offset))]

    def _select(self, include: frozenset[str]) -> sql.Composed:
        parts = [
            sql.SQL("embedding" if "vector" in include else "NULL"),
            sql.SQL("content" if "text" in include else "NULL"),
            sql.SQL("meta" if "metadata" in include else "NULL"),
        ]
        return sql.SQL("SELECT id, {} FROM {} ").format(sql.SQL(", ").join(parts), self.table)

    def page(self, offset: int, limit: int, include: frozenset[str] = INCLUDE) -> list[Record]:
        query = self._select(include) + sql.SQL("ORDER BY {} LIMIT %s OFFSET %s").format(
            self.order()
        )
        with translated(f"reading {self._name!r}"):
            rows = self.conn.execute(query, (limit, offset)).fetchall()
        return _records(rows)

    def read(self, ids: Sequence[str], include: frozenset[str] = INCLUDE) -> list[Record]:
        query = self._select(include) + sql.SQL("WHERE id = ANY(%s)")
        with translated(f"reading {self._name!r}"):
            rows = self.conn.execute(query, (list(ids),)).fetchall()
        found = {r.id: r for r in _records(rows)}
        return [found[i] for i in ids if i in found]

    def changes(self, since: int) -> list[str]:
        # With them, the rows without a vector, wherever they are (emptied in place with the
        # row trigger off, a column dropped and added again): foreign, never skipped.
        # Two index reads, not one scan: an OR of the two would read every row.
        query = sql.SQL(
            "SELECT id FROM (SELECT id, ctxemb_seq FROM {t} WHERE ctxemb_seq > %s "
            "UNION SELECT id, ctxemb_seq FROM {t} WHERE embedding IS NULL) c ORDER BY ctxemb_seq"
        ).format(t=self.table)
        with translated(f"reading what was written to {self._name!r}"):
            return [r[0] for r in self.conn.execute(query, (since,))]

    # -- writing ----------------------------------------------------------------------------

    def _hold(self) -> tuple[Any, ...]:
        """In a transaction: the table held against DDL and its stamp row against re-stamps
        until it ends; returns ``(stamp version, column type)`` as they are now."""
        try:
            self.conn.execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(self.table))
        except psycopg.errors.UndefinedTable:
            raise StampMovedError(f"table {self._name!r} no longer exists") from None
        query = sql.SQL(_IN_TXN).format(stamps=ident(self.schema, STAMPS))
        where = f'"{self.schema}"."{self._name}"'
        self.conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE table_name = %s FOR SHARE").format(
                ident(self.schema, STAMPS)
            ),
            (self._name,),
        )
        row = self.conn.execute(query, (where, self._name, where)).fetchone()
        assert row is not None
        return _version(row[3], row[2], row[1], row[0]), row[1]

    def _check(self, stamp_version: Version | None) -> str:
        version, column = self._hold()
        if stamp_version is not None and version != stamp_version:
            raise StampMovedError(f"the stamp of table {self._name!r} changed since it was checked")
        return str(column)

    def write(
        self, records: Sequence[Record], *, replace: bool, stamp_version: Version | None = None
    ) -> None:
        ids = [r.id for r in records]
        failing = _FAILING.get(self._key())
        try:
            with translated(f"writing to {self._name!r}"), self.conn.transaction():
                column = self._check(stamp_version)
                kind = column.split("(")[0]
                if not replace:
                    present = self._present(ids)
                    if present:
                        raise ExistingIdsError(tuple(i for i in ids if i in present))
                if self.companion is not None:
                    self.companion.lock()  # writers of both sides take turns from here
                rows = _rows(records, kind, failing)
                copy_rows(self.conn, self.table, kind, rows, replace)
                if self.companion is not None:
                    texts = [r.text or "" for r in records]
                    metas = [dict(r.metadata or {}) for r in records]
                    self.companion.written(ids, texts, metas)
        except psycopg.errors.UniqueViolation:
            # Another writer added some of these ids between the check and the write.
            raise ExistingIdsError(tuple(i for i in ids if i in self._present(ids))) from None

    def _present(self, ids: list[str]) -> set[str]:
        query = sql.SQL("SELECT id FROM {} WHERE id = ANY(%s)").format(self.table)
        return {r[0] for r in self.conn.execute(query, (ids,))}

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Filter | None = None,
        stamp_version: Version | None = None,
    ) -> list[str]:
        clauses: list[sql.Composable] = []
        params: list[Any] = []
        if ids is not None:
            clauses.append(sql.SQL("id = ANY(%s)"))
            params.append(list(ids))
        if where is not None:
            _, more = where_clause(where)
            clauses.append(sql.SQL("meta @> %s"))
            params += more
        query = sql.SQL("DELETE FROM {} {} RETURNING id").format(
            self.table,
            sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL(""),
        )
        with translated(f"deleting from {self._name!r}"), self.conn.transaction():
            self._check(stamp_version)
            if self.companion is not None:
                self.companion.lock()
            gone = [r[0] for r in self.conn.execute(query, params)]
            if self.companion is not None:
                self.companion.deleted(gone)
            return gone

    def check_batch(
        self, ids: list[str], documents: Sequence[str], metadatas: list[Any] | None
    ) -> None:
        """What PostgreSQL would refuse only while writing, refused before anything is
        embedded (:func:`check_rows`); the guard calls it for every write."""
        check_rows(ids, documents, metadatas)

    def search(self, vector: np.ndarray, k: int, *, where: Filter | None = None) -> list[Hit]:
        if self._layout is None:
            self.read_stamp()  # the guard read the head before: this is a bare driver's call
        if self._layout is None:
            raise InvalidInputError(f"table {self._name!r} carries no readable stamp")
        layout = self._layout[1]
        filt, params = where_clause(where)
        distance = layout.distance(sql.Identifier("embedding"), sql.Placeholder())
        query = sql.SQL(
            "SELECT id, embedding, content, meta, {} FROM {} {} ORDER BY embedding {} %s LIMIT %s"
        ).format(distance, self.table, filt, sql.SQL(layout.operator))
        value = to_column(np.atleast_2d(np.asarray(vector, dtype=np.float32)), layout)[0]
        ef = min(MAX_EF_SEARCH, max(self.ef_search, k))
        with translated(f"searching {self._name!r}"):
            if where is None:  # one statement, at the connection's breadth (set when not ef)
                if self._ef != ef:
                    self.set_breadth(ef)
                rows = self.conn.execute(query, (value, value, k)).fetchall()
            else:  # a filter: the index's scan goes on until k rows pass it
                with self.conn.transaction():
                    self.conn.execute(
                        sql.SQL(
                            "SET LOCAL hnsw.ef_search = {}; "
                            "SET LOCAL hnsw.iterative_scan = relaxed_order"
                        ).format(sql.Literal(ef))
                    )
                    rows = self.conn.execute(query, (value, *params, value, k)).fetchall()
        hits = [
            Hit(rec, None if r[4] is None else float(r[4]))
            for rec, r in zip(_records([r[:4] for r in rows]), rows, strict=True)
        ]
        # relaxed_order may return a few out of order; no vector sorts last, as in SQL.
        return sorted(hits, key=lambda h: (h.distance is None, h.distance or 0.0))

    def _key(self) -> tuple[str, str, str]:
        return (self.describe(), self.schema, self._name)


def _records(rows: Sequence[Sequence[Any]]) -> list[Record]:
    vectors = from_column([r[1] for r in rows])
    return [
        Record(r[0], v, r[2], r[3] if isinstance(r[3], dict) else None)
        for r, v in zip(rows, vectors, strict=True)
    ]


def _rows(
    records: Sequence[Record], kind: str, failing: _Failing | None
) -> Iterator[tuple[str, str | None, Any, Any]]:
    layout = Layout("", "", "", "", kind, 0)  # to_column reads the column's kind only
    for record in records:
        if failing is not None:
            failing.tick()
        value = None
        if record.vector is not None:
            value = to_column(np.asarray(record.vector, dtype=np.float32)[None, :], layout)[0]
        meta = None if record.metadata is None else dict(record.metadata)
        yield record.id, record.text, meta, value


def driver(
    dsn_or_conn: str | psycopg.Connection[Any],
    table: str,
    *,
    schema: str = "public",
    hnsw: bool = True,
) -> PgvectorDriver:
    """The driver of ``table``: through a connection, or a new one to ``dsn`` (see
    :func:`ctxemb_pgvector.connect`; :meth:`PgvectorDriver.close` closes it)."""
    conn = connect(dsn_or_conn) if isinstance(dsn_or_conn, str) else dsn_or_conn
    return PgvectorDriver(conn, table, schema=schema, hnsw=hnsw)


# -- the table and its stamp row in SQL -------------------------------------------------------


def lock(conn: Any, schema: str, name: str) -> None:
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
        lock(conn, schema, name)
        if stored_or_none(conn, name, schema) is not None:
            return False
        for statement in create_statements(schema, name, layout_for(stamp.contract), hnsw):
            conn.execute(statement)
        write_stamp(conn, schema, name, stamp)
        return True


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


# -- around the guard ---------------------------------------------------------------------------


class _Failing:
    """An armed failure: the next write to a table fails after ``after`` more rows."""

    def __init__(self, key: tuple[str, str, str], after: int, error: BaseException) -> None:
        self.key, self.left, self.error = key, after, error

    def tick(self) -> None:
        if self.left <= 0:
            _FAILING.pop(self.key, None)
            raise self.error
        self.left -= 1


#: Failures armed by :meth:`RawTable.failing_writes`, by (server, schema, table).
_FAILING: dict[tuple[str, str, str], _Failing] = {}


class RawTable:
    """A user's own SQL on one table, around the guard (the conformance suite's ``raw``).

    ``layout`` is the table's column as its user made it (:func:`ctxemb_pgvector.layout_for`
    of their model's contract). Rows written here take ``ctxemb_seq`` from the trigger, as any
    client's do.
    """

    def __init__(self, conn: Any, name: str, layout: Layout, *, schema: str = "public") -> None:
        self.conn = check_connection(conn)
        self.name = check_name(name)
        self.schema = check_name(schema, "schema name")
        self.layout = layout

    @property
    def table(self) -> sql.Composed:
        return ident(self.schema, self.name)

    def _stamp_row(self, metadata: Mapping[str, Any]) -> None:
        self.conn.execute(
            sql.SQL(
                "INSERT INTO {} (table_name, version, stamp, layout) VALUES (%s, 0, %s, %s) "
                "ON CONFLICT (table_name) DO UPDATE SET stamp = EXCLUDED.stamp"
            ).format(ident(self.schema, STAMPS)),
            (self.name, Jsonb(dict(metadata)), Jsonb(self.layout.to_dict())),
        )

    def create(self, metadata: Mapping[str, Any] | None = None) -> None:
        """A table of Haystack's layout, made without ctxemb (a stamp row only if
        ``metadata`` holds one: a stamp copied from another table)."""
        with translated(f"creating {self.name!r}"), self.conn.transaction():
            self.conn.execute(
                sql.SQL(
                    "CREATE TABLE {} (id VARCHAR(128) PRIMARY KEY, embedding {}, content TEXT, "
                    "blob_data BYTEA, blob_meta JSONB, blob_mime_type VARCHAR(255), meta JSONB)"
                ).format(self.table, sql.SQL(self.layout.column))
            )
            if metadata:
                ensure_stamps(self.conn, self.schema)
                self._stamp_row(metadata)

    def drop(self) -> None:
        """Drop the table and its stamp row."""
        with translated(f"dropping {self.name!r}"), self.conn.transaction():
            self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self.table))
            stamps = f'"{self.schema}".{STAMPS}'
            found = self.conn.execute("SELECT to_regclass(%s)", (stamps,)).fetchone()
            if found is not None and found[0] is not None:
                self.conn.execute(
                    sql.SQL("DELETE FROM {} WHERE table_name = %s").format(
                        ident(self.schema, STAMPS)
                    ),
                    (self.name,),
                )

    def write(self, records: Sequence[Record]) -> None:
        """Upsert rows as given, with no check of any kind."""
        query = sql.SQL(
            "INSERT INTO {} (id, embedding, content, meta) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding, "
            "content = EXCLUDED.content, meta = EXCLUDED.meta"
        ).format(self.table)
        with translated(f"writing to {self.name!r}"), self.conn.transaction():
            for r in records:
                value = None
                if r.vector is not None:
                    value = to_column(np.asarray(r.vector, dtype=np.float32)[None, :], self.layout)
                    value = value[0]
                meta = None if r.metadata is None else Jsonb(dict(r.metadata))
                self.conn.execute(query, (r.id, value, r.text, meta))

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Replace the stamp row's stamp whole (its version moves by its trigger)."""
        with translated(f"stamping {self.name!r}"):
            self._stamp_row(metadata)

    @contextlib.contextmanager
    def failing_writes(self, after: int, error: BaseException | None = None) -> Iterator[None]:
        """The next write to the table fails (``error``, default ``StoreUnavailableError``)
        when its row after the first ``after`` is sent, inside its transaction."""
        key = PgvectorDriver(self.conn, self.name, schema=self.schema)._key()
        error = error or StoreUnavailableError("PostgreSQL: the write failed (armed by a test)")
        _FAILING[key] = _Failing(key, after, error)
        try:
            yield
        finally:
            _FAILING.pop(key, None)


def check_rows(ids: list[str], documents: Sequence[str], metadatas: list[Any] | None) -> None:
    """What PostgreSQL would refuse only while writing, refused before anything is embedded:
    ids longer than the ``id`` column, NUL characters (text cannot hold them), metadata that is
    not JSON (a non-finite float, a key that is not a string, a value JSON has no form for)."""
    for k, i in enumerate(ids):
        if len(i) > MAX_ID:
            raise InvalidInputError(
                f"ids[{k}] is {len(i)} characters; the id column holds {MAX_ID}"
            )
        if "\x00" in i:
            raise InvalidInputError(
                f"ids[{k}] holds a NUL character, which PostgreSQL cannot store"
            )
    for k, d in enumerate(documents):
        if "\x00" in d:
            raise InvalidInputError(
                f"documents[{k}] (id {ids[k]!r}) holds a NUL character, which PostgreSQL text "
                "cannot store; remove it"
            )
    for k, m in enumerate(metadatas or []):
        if m is None:
            continue
        where = f"metadatas[{k}] (id {ids[k]!r})"
        try:
            text = json.dumps(m, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"{where} cannot be stored as JSON: {exc}") from None
        if "\\u0000" in text:
            raise InvalidInputError(f"{where} holds a NUL character, which jsonb cannot store")
        bad = [key for key in m if not isinstance(key, str)]
        if bad:
            raise InvalidInputError(f"{where}: key {bad[0]!r} is not a string")
        for key, value in m.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise InvalidInputError(f"{where}: {key!r} is {value}, which JSON cannot hold")
