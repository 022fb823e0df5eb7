"""Reading a guarded table: its rows in the store's order, by id or filter, and its searches.

:class:`TableReads` is the reading half of :class:`~ctxemb_pgvector.PgvectorDriver` (the stamp,
the head and the writes are the driver's own module). A search without filters is one
statement that reads the stamp's version and the HNSW search breadth in its own snapshot; a
filtered or exact one runs in one read-only snapshot (:meth:`TableReads.search_many`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.driver import INCLUDE, Filter, Head, Hit, Record, StampMovedError, Version
from ctxemb_pgvector._connect import translated
from ctxemb_pgvector._sql import MAX_EF_SEARCH, SEQ, STAMPS, Layout, ident, where_clause
from ctxemb_pgvector._store import StoredTable
from ctxemb_pgvector._vectors import from_column, to_column

__all__ = ["TableReads", "version_of"]

# The parts of the stamp version (:func:`version_of`), read in the statement (or snapshot) of a
# search: the stamp row's version (``NULL`` unless exactly one row), the table's oid, the
# embedding column's number and type.
_STATE = """
SELECT s.version, t.oid::bigint, a.attnum, format_type(a.atttypid, a.atttypmod)
FROM (SELECT CASE WHEN count(*) = 1 THEN max(version) END AS version
      FROM {stamps} WHERE table_name = %s) s
CROSS JOIN (SELECT to_regclass(%s)::oid AS oid) t
LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attname = 'embedding' AND NOT a.attisdropped
"""

_NO_VECTOR = frozenset({"text", "metadata"})


def version_of(oid: Any, attnum: Any, column: Any, stamp_row: Any) -> str:
    """The driver's stamp version: the table's oid, the embedding column's number and type, the
    stamp row's version."""
    return f"{oid}:{attnum}:{column}:{stamp_row}"


class TableReads:
    """The reads and searches of one table (the base of :class:`~ctxemb_pgvector.PgvectorDriver`,
    which sets these attributes)."""

    conn: psycopg.Connection[Any]
    schema: str
    _name: str
    ef_search: int
    #: The stamped contract's layout and the stamp version it was read at.
    _layout: tuple[Version, Layout] | None
    #: Whether the table has ``ctxemb_seq`` (``None``: not read yet).
    _seq: bool | None
    #: Each plain search's statement, composed, by layout and whether it reads vectors.
    _plain_sql: dict[tuple[Layout, bool], str]

    @property
    def table(self) -> sql.Composed:
        return ident(self.schema, self._name)

    def _stored(self) -> StoredTable | None:
        raise NotImplementedError

    def head(self) -> Head | None:
        raise NotImplementedError

    def read_stamp(self) -> Any:
        raise NotImplementedError

    def set_breadth(self, ef: int) -> None:
        """Set the connection's ``hnsw.ef_search`` (a search without a filter runs at it)."""
        with translated(f"searching {self._name!r}"):
            self.conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(ef)))

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

    def _select(
        self, include: frozenset[str], distance: sql.Composable | None = None
    ) -> sql.Composed:
        """``SELECT id, embedding, content, meta`` (each part not in ``include`` as ``NULL``)
        and, for a search, the ``distance``."""
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
            params += where_clause(where)[1]
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

    def read(self, ids: Sequence[str], include: frozenset[str] = INCLUDE) -> list[Record]:
        found = {r.id: r for r in self.select(ids, include=include)}
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
        """:meth:`search` for each row of ``vectors``, with PostgreSQL's options: among ``ids``
        only, ``exact`` (a scan of every row, not the HNSW index), the HNSW breadth
        ``ef_search`` (default the driver's; at least ``k``), ``with_vectors=False`` to read
        no vector. With ``stamp_version``, the stamp's version is read in the search's own
        snapshot, and a version that moved raises :class:`StampMovedError` (nothing returned).
        """
        if self._layout is None:
            self.read_stamp()  # the guard read the head before: this is a bare driver's call
        if self._layout is None:
            raise InvalidInputError(f"table {self._name!r} carries no readable stamp")
        layout = self._layout[1]
        values = to_column(vectors, layout.kind)
        ef = min(MAX_EF_SEARCH, max(self.ef_search if ef_search is None else ef_search, k))
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
            # One snapshot for the stamp's version and the searches, read-only and without a
            # row lock (which would make every query a writing transaction, waiting for its
            # commit record to reach the disk).
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
        """A search without filters in one statement (no transaction), which reads the stamp's
        version and the search breadth in its own snapshot: the breadth is the connection's
        ``hnsw.ef_search``, set here when it is not ``ef`` (and seen to be, in the same
        statement)."""
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
                    # A statement that no longer fits the table (dropped, its column dropped
                    # or altered) is a change the head names; any other error stands.
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
