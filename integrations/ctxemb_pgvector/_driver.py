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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from ctxemb_core.errors import ExistingIdsError
from ctxemb_core.index.armed import sent
from ctxemb_core.index.driver import (
    Capabilities,
    Filter,
    Head,
    Record,
    StampMovedError,
    StampRead,
    Version,
)
from ctxemb_core.stamp import IndexStamp
from ctxemb_pgvector._connect import check_connection, connect, translated
from ctxemb_pgvector._reads import TableReads, version_of
from ctxemb_pgvector._repair import repair
from ctxemb_pgvector._sql import (
    STAMPS,
    Layout,
    check_name,
    check_rows,
    copy_rows,
    ident,
    layout_for,
)
from ctxemb_pgvector._store import (
    _TABLE,
    StoredTable,
    add_seq,
    create_table,
    ensure_stamps,
    lock,
    stored_or_none,
    unstamped,
    write_stamp,
)
from ctxemb_pgvector._vectors import to_column

if TYPE_CHECKING:
    from ctxemb_core.contract import EmbeddingContract

__all__ = ["PgvectorDriver", "driver"]

#: The locks a session writing a table's rows holds on it until it ends.
_WRITING = ("RowExclusiveLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")

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


class PgvectorDriver(TableReads):
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
        self._plain_sql: dict[tuple[Layout, bool], str] = {}
        #: A hybrid index's lexical side (``lock()``, ``written(ids, documents, metas)``,
        #: ``deleted(ids)``), written in the transactions that write this table's rows.
        self.companion: Any = None

    def __repr__(self) -> str:
        return f"PgvectorDriver({self.schema}.{self._name})"

    @property
    def name(self) -> str:
        return self._name

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

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        return {"column": layout_for(stamp.contract).column}

    # -- the table and its stamp --------------------------------------------------------

    def create(self, stamp: IndexStamp) -> bool:
        return create_table(self.conn, self.schema, self._name, stamp, self.hnsw)

    def _stored(self) -> StoredTable | None:
        return stored_or_none(self.conn, self._name, self.schema)

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

    def _head_row(self) -> Sequence[Any] | None:
        """The head's statement (``None``: no such table; ``()``: the schema has no stamps
        table or sequence yet)."""
        query = sql.SQL(_HEAD).format(
            stamps=ident(self.schema, STAMPS),
            table=sql.SQL(_TABLE),
            seq=ident(self.schema, "ctxemb_row_seq"),
        )
        args = (self._name, self.schema, self._name, list(_WRITING))
        try:
            with translated(f"reading the head of {self._name!r}"):
                return self.conn.execute(query, args).fetchone()
        except psycopg.errors.UndefinedTable:
            return ()

    def _head(self, version: str, oid: Any, seq: bool, row: Sequence[Any]) -> Head:
        self._seq = seq
        layout = self._layout[1] if self._layout and self._layout[0] == version else None
        space = layout.space_for_similarity if layout is not None else "cosine"
        # No session writing the table after the sequence was read: every number up to it
        # belongs to a transaction that has ended (else 0: sound, only not cheap).
        mark = None if not seq or not row else (0 if row[6] else int(row[5]))
        return Head(str(oid), version, mark, space)

    def _stored_head(self, stored: StoredTable, row: Sequence[Any] | None = None) -> Head:
        version = version_of(stored.oid, stored.attnum, stored.column, stored.version)
        self._layout_of(version, stored)
        row = self._head_row() if row is None and stored.seq else row
        return self._head(version, stored.oid, stored.seq, row or ())

    def head(self) -> Head | None:
        row = self._head_row()
        if row is None:
            return None
        versions = row[4] if row else None
        if row and not (versions and len(versions) > 1):
            version = version_of(row[2], row[3], row[0], versions[0] if versions else None)
            if not versions or (self._layout is not None and self._layout[0] == version):
                return self._head(version, row[2], bool(row[1]), row)
        stored = self._stored()  # the slow read: a damaged stamp row, a stamp not yet read
        return None if stored is None else self._stored_head(stored, row)

    def read_stamp(self) -> StampRead | None:
        stored = self._stored()
        if stored is None:
            return None
        # The column's type, and the one recorded beside the stamp when they differ (changed
        # around ctxemb: refused as a column of another type is, until repaired).
        column, recorded = stored.column, (stored.layout or {}).get("column")
        if recorded is not None and recorded != column:
            column = f"{column} (recorded as {recorded})"
        return StampRead(self._stored_head(stored), stored.metadata, {"column": column})

    def write_stamp(self, stamp: IndexStamp, *, stamp_version: Version) -> bool:
        try:
            return self._write_stamp(stamp, stamp_version)
        except StampMovedError:  # the table was dropped meanwhile: nothing written
            return False

    def _write_stamp(self, stamp: IndexStamp, stamp_version: Version) -> bool:
        conn = self.conn
        with translated(f"stamping {self._name!r}"), conn.transaction():
            ensure_stamps(conn, self.schema)
            lock(conn, self.schema, self._name)
            self._hold()
            stored = self._stored()
            if stored is None or stamp_version != version_of(
                stored.oid, stored.attnum, stored.column, stored.version
            ):
                return False
            if not stored.seq:  # a table made without ctxemb gains its write mark
                add_seq(conn, self.schema, self._name)
                self._seq = None
            write_stamp(
                conn, self.schema, self._name, stamp.to_metadata(), layout_for(stamp.contract)
            )
            stored = self._stored()
            assert stored is not None
            repair(stored, stamp)  # the recorded layout, and an HNSW index where none is
        return True

    # -- writing ----------------------------------------------------------------------------

    def _hold(self) -> tuple[Any, ...]:
        """In a transaction: the table held against DDL and its stamp row against re-stamps
        until it ends; returns ``(stamp version, column type)`` as they are now."""
        try:
            self.conn.execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(self.table))
        except psycopg.errors.UndefinedTable:
            raise StampMovedError(f"table {self._name!r} no longer exists") from None
        self.conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE table_name = %s FOR SHARE").format(
                ident(self.schema, STAMPS)
            ),
            (self._name,),
        )
        row = self.conn.execute(self._state(), self._state_args()).fetchone()
        assert row is not None
        return version_of(row[1], row[2], row[3], row[0]), row[3]

    def _check(self, stamp_version: Version | None) -> str:
        version, column = self._hold()
        if stamp_version is not None and version != stamp_version:
            raise StampMovedError(f"the stamp of table {self._name!r} changed since it was checked")
        return str(column)

    def write(
        self, records: Sequence[Record], *, replace: bool, stamp_version: Version | None = None
    ) -> None:
        ids = [r.id for r in records]
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
                rows = rows_of(sent(self._key(), records), kind)
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
        filt, params = self._filter(ids, where)
        query = sql.SQL("DELETE FROM {} {} RETURNING id").format(self.table, filt)
        with translated(f"deleting from {self._name!r}"), self.conn.transaction():
            self._check(stamp_version)
            if self.companion is not None:
                self.companion.lock()
            gone = [r[0] for r in self.conn.execute(query, params)]
            if self.companion is not None:
                self.companion.deleted(gone)
            return gone

    #: What PostgreSQL would refuse only while writing (:func:`~ctxemb_pgvector._sql.check_rows`).
    check_batch = staticmethod(check_rows)

    def _key(self) -> tuple[str, str, str]:
        """Which table this is, on which server (the key a raw client arms a failure under)."""
        return (self.describe(), self.schema, self._name)


def rows_of(records: Iterable[Record], kind: str) -> Iterator[tuple[str, str | None, Any, Any]]:
    """Records as ``(id, content, meta, embedding)`` rows for a column of type ``kind``."""
    for record in records:
        value = None if record.vector is None else to_column(record.vector, kind)[0]
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
