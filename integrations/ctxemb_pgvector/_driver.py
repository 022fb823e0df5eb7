"""A PostgreSQL table as a :class:`~ctxemb_core.index.driver.StoreDriver` under core's guard
(how each promise is kept: ``docs/pgvector.md``, "How the table keeps the protocol")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.armed import sent
from ctxemb_core.index.connecting import serialised
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
from ctxemb_core.index.driver_kit import (
    TransactionalDriver,
    check_json_batch,
    json_filter,
    restamped,
)
from ctxemb_core.stamp import IndexStamp
from ctxemb_core.validate import check_count, check_flag, check_ids
from ctxemb_pgvector._connect import TERMS, check_connection, connect, terms_in, translated
from ctxemb_pgvector._sql import (
    MAX_EF_SEARCH,
    MAX_ID,
    SEQ,
    STAMPS,
    Layout,
    check_name,
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
    missing_table,
    repair,
    stored_or_none,
    unstamped,
    unusable,
    version_of,
    write_stamp,
)
from ctxemb_pgvector._vectors import from_column, to_column

if TYPE_CHECKING:
    from ctxemb_core.contract import EmbeddingContract
    from ctxemb_core.embedder import Embedder

__all__ = ["PgvectorDriver", "driver"]

#: The locks a session writing a table's rows holds on it until it ends.
_WRITING = ("RowExclusiveLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")

# The head in one statement: ``_TABLE``, the stamp row's version(s), the mark (docs/pgvector.md),
# the isolation of the transaction it was read in, and whether the row trigger still numbers
# the writes of every ordinary session (there, enabled, its function taking a number).
_HEAD = """
SELECT t.col, t.seq, t.oid, t.attnum,
       (SELECT array_agg(version) FROM {stamps} WHERE table_name = %s), m.v, m.busy,
       current_setting('transaction_isolation'),
       EXISTS (SELECT 1 FROM pg_trigger g JOIN pg_proc p ON p.oid = g.tgfoid
               WHERE g.tgrelid = t.oid AND g.tgname = 'ctxemb_row_seq' AND g.tgenabled IN ('A', 'O')
                 AND p.prosrc LIKE '%%NEW.ctxemb_seq := nextval(%%')
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


# The parts of :func:`version_of`, read in a search's own statement or snapshot.
_STATE = """
SELECT s.version, t.oid::bigint, a.attnum, format_type(a.atttypid, a.atttypmod)
FROM (SELECT CASE WHEN count(*) = 1 THEN max(version) END AS version
      FROM {stamps} WHERE table_name = %s) s
CROSS JOIN (SELECT to_regclass(%s)::oid AS oid) t
LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attname = 'embedding' AND NOT a.attisdropped
"""

_NO_VECTOR = frozenset({"text", "metadata"})

#: Which database of which cluster this is (:meth:`PgvectorDriver.describe`).
_IDENTITY = """
SELECT current_database(), (SELECT system_identifier FROM pg_control_system())::text,
       (SELECT oid FROM pg_database WHERE datname = current_database())::text
"""


@serialised
class PgvectorDriver(TransactionalDriver[str]):
    """The :class:`~ctxemb_core.index.driver.StoreDriver` of one table (see the module).

    Args:
        conn: a psycopg 3 connection in autocommit mode (:func:`ctxemb_pgvector.connect`).
        name: the table's name (1-48 characters of ``A-Za-z0-9_-``); ``schema``: its schema
            (and its stamp row's).
        embedder: taken, as every driver takes it, and unused (a table keeps no embedder).
        hnsw: give a table this driver creates an HNSW index of the contract's operator class.
        ef_search: the HNSW search breadth of queries (at least a search's ``k``).

    Example:
        >>> from ctxemb_core.index import GuardedIndex
        >>> docs = GuardedIndex.open(driver(dsn, "docs"), embedder)  # doctest: +SKIP
    """

    capabilities = Capabilities(transactions=True, marks=True, filters=True, seeks=True)
    terms = TERMS  # its errors' words, whichever path reached it
    _duplicate = (psycopg.errors.UniqueViolation,)

    def __init__(
        self,
        conn: Any,
        name: str,
        *,
        embedder: Embedder | None = None,
        schema: str = "public",
        hnsw: bool = True,
        ef_search: int = 200,
    ) -> None:
        self.conn = check_connection(conn)
        self._name = check_name(name)
        self.schema = check_name(schema, "schema name")
        self.terms = terms_in(self.schema)
        self.hnsw = check_flag(hnsw, "hnsw")
        self.ef_search = check_count(ef_search, "ef_search")
        self._described: str | None = None
        #: The stamped contract's layout and the stamp version it was read at.
        self._layout: tuple[Version, Layout] | None = None
        #: Whether the table has ``ctxemb_seq`` (``None``: not read yet).
        self._seq: bool | None = None
        #: Each plain search's statement, composed, by layout and whether it reads vectors.
        self._plain_sql: dict[tuple[Layout, bool], str] = {}

    def __repr__(self) -> str:
        return f"PgvectorDriver({self.schema}.{self._name})"

    def close(self) -> None:
        """Close the connection (the driver's own, made by :func:`driver` from a DSN)."""
        self.conn.close()

    def describe(self) -> str:
        """The server, its cluster and the database (``docs/pgvector.md``, "Which server")."""
        if self._described is None:
            with translated("reading the server's identity"):
                try:
                    row = self.conn.execute(_IDENTITY).fetchone()
                    assert row is not None
                    which = f"cluster {row[1]}, database oid {row[2]}"
                except psycopg.errors.InsufficientPrivilege:
                    row = self.conn.execute(
                        "SELECT current_database(), pg_postmaster_start_time()::text"
                    ).fetchone()
                    assert row is not None
                    which = f"started {row[1]}"
            info = self.conn.info
            self._described = f"postgresql://{info.host}:{info.port}/{row[0]} ({which})"
        return self._described

    def unstamped_error(self) -> Exception:
        """The refusal of the table unstamped, in PostgreSQL's terms."""
        return unstamped(self._name, self.schema)

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        return {"column": layout_for(stamp.contract).column}

    # -- the table and its stamp --------------------------------------------------------

    def create(self, stamp: IndexStamp) -> bool:
        return create_table(self.conn, self.schema, self._name, stamp, self.hnsw)

    def stored(self) -> StoredTable | None:
        """The table as the database has it now, unguarded (``None``: none)."""
        return stored_or_none(self.conn, self._name, self.schema)

    def missing_error(self, why: str = "") -> Exception:
        return missing_table(self.conn, self._name, self.schema, why)

    def _layout_of(self, version: Version, stored: StoredTable) -> Layout | None:
        """The stamped contract's layout, kept per stamp version (``None``: no readable stamp)."""
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
        """The head's row (``None``: no such table; ``()``: no stamps table or sequence yet)."""
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
        # 0 where the mark is not sound now (docs/pgvector.md, "The write mark").
        mark = (
            None
            if not seq or not row
            else (0 if row[6] or self._snapshot_held(row) or not row[8] else int(row[5]))
        )
        return Head(str(oid), version, mark, space)

    def _snapshot_held(self, row: Sequence[Any]) -> bool:
        """Whether the head's row was read in a caller's transaction that keeps its snapshot."""
        return (
            row[7] not in ("read committed", "read uncommitted")
            and self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        )

    def _stored_head(self, stored: StoredTable, row: Sequence[Any] | None = None) -> Head:
        version = stored.stamp_version
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
        stored = self.stored()  # the slow read: a damaged stamp row, a stamp not yet read
        return None if stored is None else self._stored_head(stored, row)

    def read_stamp(self) -> StampRead | None:
        stored = self.stored()
        if stored is None:
            return None
        refused = unusable(stored)
        if refused is not None:  # another tool's table: not an index to adopt or detect
            raise refused
        # The column's type, with the recorded one when they differ (refused until repaired).
        column, recorded = stored.column, (stored.layout or {}).get("column")
        if recorded is not None and recorded != column:
            column = f"{column} (recorded as {recorded})"
        return StampRead(self._stored_head(stored), stored.metadata, {"column": column})

    def write_stamp(self, stamp: IndexStamp, *, stamp_version: Version) -> bool:
        conn, layout = self.conn, layout_for(stamp.contract)
        try:
            with translated(f"stamping {self._name!r}"), conn.transaction():
                ensure_stamps(conn, self.schema)
                lock(conn, self.schema, self._name)
                self._hold()
                stored = self.stored()
                if stored is None or stamp_version != stored.stamp_version:
                    return False
                if not stored.seq:  # a table made without ctxemb gains its write mark
                    add_seq(conn, self.schema, self._name)
                    self._seq = None
                metadata = restamped(stored.metadata, stamp)  # the table's own keys stay
                write_stamp(conn, self.schema, self._name, metadata, layout)
                stored = self.stored()
                assert stored is not None
                repair(stored, stamp)  # the recorded layout, and an HNSW index where none is
        except StampMovedError:  # the table was dropped meanwhile: nothing written
            return False
        return True

    # -- writing ----------------------------------------------------------------------------

    def _hold(self, stamp_version: Version | None = None) -> str:
        """In a transaction: hold the table and its stamp row until it ends (``StampMovedError``
        if the version is no longer ``stamp_version``); returns the column's type."""
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
        if stamp_version is not None:
            self._check_state(row, stamp_version)
        return str(row[3])

    @contextlib.contextmanager
    def _transaction(self, what: str) -> Iterator[None]:
        with translated(what), self.conn.transaction():
            yield

    def _put(self, column: str, records: Sequence[Record], replace: bool) -> None:
        kind = column.split("(")[0]
        rows = rows_of(sent(self._key(), records), kind)
        copy_rows(self.conn, self.table, kind, rows, replace)

    def _present(self, ids: list[str]) -> set[str]:
        query = sql.SQL("SELECT id FROM {} WHERE id = ANY(%s)").format(self.table)
        return {r[0] for r in self.conn.execute(query, (ids,))}

    def _remove(self, ids: Sequence[str] | None, where: Filter | None) -> list[str]:
        filt, params = self._filter(ids, where)
        query = sql.SQL("DELETE FROM {} {} RETURNING id").format(self.table, filt)
        return [r[0] for r in self.conn.execute(query, params)]

    def check_batch(
        self, ids: list[str], documents: Sequence[str | None], metadatas: list[Any] | None
    ) -> None:
        """What PostgreSQL refuses only while writing: a long id, a NUL, metadata not JSON."""
        check_json_batch(ids, documents, metadatas, "PostgreSQL", max_id=MAX_ID, nul=False)

    def _key(self) -> tuple[str, str, str]:
        """Which table this is, on which server (the key a raw client arms a failure under)."""
        return (self.describe(), self.schema, self._name)

    @property
    def table(self) -> sql.Composed:
        return ident(self.schema, self._name)

    # -- reading ----------------------------------------------------------------------------

    def set_breadth(self, ef: int) -> None:
        """Set the connection's ``hnsw.ef_search`` (a search without a filter runs at it)."""
        with translated(f"searching {self._name!r}"):
            self.conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(ef)))

    def count(self) -> int:
        with translated(f"counting {self._name!r}"):
            row = self.conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self.table))
            return int(row.fetchone()[0])  # type: ignore[index]

    def order(self) -> sql.Composable:
        """Oldest write first (by id for a table without ``ctxemb_seq``, as the head last saw)."""
        if self._seq is None:
            stored = self.stored()
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

    def _select(
        self, include: frozenset[str], distance: sql.Composable | None = None
    ) -> sql.Composed:
        """``SELECT id, embedding, content, meta`` (``NULL`` where not included), ``distance``."""
        parts = [
            sql.SQL("embedding" if "vector" in include else "NULL"),
            sql.SQL("content" if "text" in include else "NULL"),
            sql.SQL("meta" if "metadata" in include else "NULL"),
            *([] if distance is None else [distance]),
        ]
        return sql.SQL("SELECT id, {} FROM {} ").format(sql.SQL(", ").join(parts), self.table)

    def _filter(
        self, ids: Sequence[str] | None, where: Filter | None
    ) -> tuple[sql.Composable, list[Any]]:
        """``WHERE`` the rows of ``ids`` whose metadata holds ``where`` (each if given)."""
        clauses: list[sql.Composable] = []
        params: list[Any] = []
        if ids is not None:
            clauses.append(sql.SQL("id = ANY(%s)"))
            params.append(list(ids))
        if where is not None:
            params.append(Jsonb(json_filter(where, "the pgvector adapter")))
            clauses.append(sql.SQL("meta @> %s"))
        if not clauses:
            return sql.SQL(""), []
        return sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses), params

    def select(
        self,
        ids: Sequence[str] | None = None,
        where: Filter | None = None,
        limit: int | None = None,
        offset: int = 0,
        include: frozenset[str] = INCLUDE,
    ) -> list[Record]:
        """Rows by id and/or metadata filter, oldest write first (a page of them)."""
        filt, params = self._filter(ids, where)
        query = (
            self._select(include)
            + filt
            + sql.SQL(" ORDER BY {} LIMIT %s OFFSET %s").format(self.order())
        )
        with translated(f"reading {self._name!r}"):
            return _records(self.conn.execute(query, (*params, limit, offset)).fetchall())

    def page(self, offset: int, limit: int, include: frozenset[str] = INCLUDE) -> list[Record]:
        return self.select(None, None, limit, offset, include)

    def page_near(
        self, fraction: float, limit: int, include: frozenset[str] = INCLUDE
    ) -> list[Record]:
        """A page from about ``fraction`` of the way through the write order, by two seeks
        (``docs/pgvector.md``, "page_near")."""
        order = self.order()
        if not self._seq:  # a table without the write order (not yet adopted): by offset
            return self.page(int(fraction * self.count()), limit, include)
        query = self._select(include) + sql.SQL(
            "WHERE ctxemb_seq >= (SELECT lo + floor(%s * (hi - lo + 1))::bigint "
            "FROM (SELECT min(ctxemb_seq) AS lo, max(ctxemb_seq) AS hi FROM {}) b) "
            "ORDER BY {} LIMIT %s"
        ).format(self.table, order)
        with translated(f"reading {self._name!r}"):
            return _records(self.conn.execute(query, (fraction, limit)).fetchall())

    def read(self, ids: Sequence[str], include: frozenset[str] = INCLUDE) -> list[Record]:
        found = {r.id: r for r in self.select(ids, include=include)}
        return [found[i] for i in ids if i in found]

    def changes(self, since: int) -> list[str]:
        # And the rows without a vector, by two index reads (docs/pgvector.md, "changes(since)").
        query = sql.SQL(
            "SELECT id FROM (SELECT id, ctxemb_seq FROM {t} WHERE ctxemb_seq > %s "
            "UNION SELECT id, ctxemb_seq FROM {t} WHERE embedding IS NULL) c ORDER BY ctxemb_seq"
        ).format(t=self.table)
        own = self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        alone = self.conn.transaction() if own else contextlib.nullcontext()
        with translated(f"reading what was written to {self._name!r}"), alone:
            if own:
                self.conn.execute("SET LOCAL enable_seqscan = off")
            return [r[0] for r in self.conn.execute(query, (since,))]

    def search(self, vector: np.ndarray, k: int, *, where: Filter | None = None) -> list[Hit]:
        return self.search_many(np.atleast_2d(vector), k, where=where)[0]

    def search_many(
        self,
        vectors: np.ndarray,
        k: int,
        *,
        where: Filter | None = None,
        ids: Sequence[str] | None = None,
        exact: bool = False,
        ef_search: int | None = None,
        stamp_version: Version | None = None,
        with_vectors: bool = True,
    ) -> list[list[Hit]]:
        """:meth:`search` per row of ``vectors`` with PostgreSQL's options (``ids``, ``exact``,
        ``ef_search``, ``with_vectors``; ``GuardedTable``'s ``Search``); a ``stamp_version`` that
        moved in the search's own snapshot raises :class:`StampMovedError`."""
        ids = None if ids is None else check_ids(ids)
        exact = check_flag(exact, "exact")
        ef_search = check_count(self.ef_search if ef_search is None else ef_search, "ef_search")
        if self._layout is None:
            self.read_stamp()  # the guard read the head before: this is a bare driver's call
        if self._layout is None:
            raise InvalidInputError(f"table {self._name!r} carries no readable stamp")
        layout = self._layout[1]
        values = to_column(vectors, layout.kind)
        ef = min(MAX_EF_SEARCH, max(ef_search, k))
        if where is None and ids is None and not exact:
            key = (layout, with_vectors)
            found = [self._plain(key, v, k, ef, stamp_version) for v in values]
        else:
            select, order = self._searching(layout, with_vectors)
            filt, params = self._filter(ids, where)
            settings = [
                sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
                sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)),
            ]
            if where is not None or ids is not None:  # the scan goes on until k rows pass
                settings.append(sql.SQL("SET LOCAL hnsw.iterative_scan = relaxed_order"))
            if exact:
                settings.append(sql.SQL("SET LOCAL enable_indexscan = off"))
            query = select + filt + sql.SQL(" ") + order
            # One read-only snapshot, no row lock (docs/pgvector.md, "How the table keeps ...").
            with translated(f"searching {self._name!r}"), self.conn.transaction():
                self.conn.execute(sql.SQL("; ").join(settings))
                if stamp_version is not None:
                    state = self.conn.execute(self._state(), self._state_args()).fetchone()
                    self._check_state(state, stamp_version)
                found = [self.conn.execute(query, (v, *params, v, k)).fetchall() for v in values]
        # relaxed_order may return a few out of order; no vector sorts last, as in SQL.
        return [
            sorted(_hits(rows), key=lambda h: (h.distance is None, h.distance or 0.0))
            for rows in found
        ]

    def _state(self) -> sql.Composed:
        return sql.SQL(_STATE).format(stamps=ident(self.schema, STAMPS))

    def _state_args(self) -> tuple[str, str]:
        return (self._name, f'"{self.schema}"."{self._name}"')

    def _check_state(self, row: Sequence[Any] | None, stamp_version: Version) -> None:
        if row is None or version_of(row[1], row[2], row[3], row[0]) != stamp_version:
            raise StampMovedError(f"the stamp of table {self._name!r} changed")

    def _searching(self, layout: Layout, with_vectors: bool) -> tuple[sql.Composed, sql.Composed]:
        """A search's ``SELECT`` (with the layout's distance) and its ``ORDER BY``."""
        distance = layout.distance(sql.Identifier("embedding"), sql.Placeholder())
        select = self._select(INCLUDE if with_vectors else _NO_VECTOR, distance)
        return select, sql.SQL("ORDER BY embedding {} %s LIMIT %s").format(sql.SQL(layout.operator))

    def _plain(
        self, key: tuple[Layout, bool], value: Any, k: int, ef: int, stamp_version: Version | None
    ) -> list[Any]:
        """A search without filters in one statement (``docs/pgvector.md``, "Reads")."""
        query = self._plain_sql.get(key)
        if query is None:  # composing costs more than the statement's round trip
            select, order = self._searching(*key)
            query = (
                sql.SQL(
                    "SELECT v.*, current_setting('hnsw.ef_search', true), r.* FROM ({}) v "
                    "LEFT JOIN LATERAL ({}) r ON true"
                )
                .format(self._state(), select + order)
                .as_string(self.conn)
            )
            self._plain_sql[key] = query
        for attempt in range(2):
            with translated(f"searching {self._name!r}"):
                args = (*self._state_args(), value, value, k)
                try:
                    rows = self.conn.execute(query, args).fetchall()
                except psycopg.Error:
                    # A statement that no longer fits the table: a change the head names.
                    head = None if stamp_version is None else self.head()
                    if stamp_version is None or (head and head.stamp_version == stamp_version):
                        raise
                    raise StampMovedError(f"table {self._name!r} changed") from None
            if stamp_version is not None:
                self._check_state(rows[0] if rows else None, stamp_version)
            if attempt or rows[0][4] == str(ef):
                return [r[5:] for r in rows if r[5] is not None]
            self.set_breadth(ef)
        raise AssertionError("unreachable")


def _hits(rows: Sequence[Sequence[Any]]) -> list[Hit]:
    """Rows of (id, embedding, content, meta, distance) as hits."""
    return [
        Hit(rec, None if r[4] is None else float(r[4]))
        for rec, r in zip(_records(rows), rows, strict=True)
    ]


def _records(rows: Sequence[Sequence[Any]]) -> list[Record]:
    vectors = from_column([r[1] for r in rows])
    return [
        Record(r[0], v, r[2], r[3] if isinstance(r[3], dict) else None)
        for r, v in zip(rows, vectors, strict=True)
    ]


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
    embedder: Embedder | None = None,
    schema: str = "public",
    hnsw: bool = True,
) -> PgvectorDriver:
    """The driver of ``table``: through a connection, or a new one to ``dsn`` (see
    :func:`ctxemb_pgvector.connect`; :meth:`PgvectorDriver.close` closes it). ``embedder`` is
    taken as every store's driver takes it; a table keeps no embedding settings."""
    conn = connect(dsn_or_conn) if isinstance(dsn_or_conn, str) else dsn_or_conn
    return PgvectorDriver(conn, table, embedder=embedder, schema=schema, hnsw=hnsw)
