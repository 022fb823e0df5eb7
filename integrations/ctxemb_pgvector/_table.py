"""A stamped PostgreSQL table bound to one contract: core's guarded index in PostgreSQL's words.

Every decision (open, verify, adopt, the checks of each call, all-or-nothing writes, sync) is
:class:`~ctxemb_core.index.GuardedIndex`'s, over :class:`~ctxemb_pgvector.PgvectorDriver`;
what every store's index object shares (writes, sync, ``ids()`` as a set, the open path) is
:class:`~ctxemb_core.index.IndexFacade`'s. :class:`GuardedTable` keeps what is PostgreSQL's
own: Chroma-shaped results read by SQL, ``get`` and ``delete`` by metadata filter, the HNSW
search breadth (``ef_search``), the exact scan, a search read in one statement with the stamp
it is checked against (the rows PostgreSQL would refuse: :meth:`PgvectorDriver.check_batch`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import psycopg
from psycopg import sql

from ctxemb_core import Embedder
from ctxemb_core.errors import InvalidInputError, StampError
from ctxemb_core.guard import check_count, check_flag, check_ids, refuse_vectorless
from ctxemb_core.index import GuardedIndex, IndexFacade
from ctxemb_pgvector._connect import TERMS, translated
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._sql import (
    MAX_EF_SEARCH,
    STAMPS,
    Layout,
    ident,
    layout_for,
    where_clause,
)
from ctxemb_pgvector._store import StoredTable, missing_table, stored_or_none
from ctxemb_pgvector._vectors import from_column, stacked, to_column

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: What ``include`` may name, as in Chroma's ``get`` and ``query``.
INCLUDE = ("documents", "metadatas", "embeddings", "distances")
#: What a search returns unless ``include`` says otherwise.
SHOWN = ("documents", "metadatas", "distances")


class Search(TypedDict, total=False):
    """A search's PostgreSQL options (:meth:`GuardedTable.query`, ``query_vectors``).

    - ``where``: keep rows whose metadata holds every given key and value.
    - ``include``: the parts returned, of :data:`INCLUDE` (default :data:`SHOWN`).
    - ``exact``: scan every row instead of the HNSW index.
    - ``ef_search``: the HNSW index's search breadth (default the table's; at least
      ``n_results``).
    - ``ids``: search among these rows only.
    """

    where: Mapping[str, Any] | None
    include: Sequence[str]
    exact: bool
    ef_search: int | None
    ids: Sequence[str] | None


# The parts of the driver's stamp version (:func:`ctxemb_pgvector._driver.version_of`), read
# in the statement (or snapshot) of a search: the stamp row's version (``NULL`` unless exactly
# one row), the table's oid, the embedding column's number and type.
_STATE = """
SELECT s.version, t.oid::bigint, a.attnum, format_type(a.atttypid, a.atttypmod)
FROM (SELECT CASE WHEN count(*) = 1 THEN max(version) END AS version
      FROM {stamps} WHERE table_name = %s) s
CROSS JOIN (SELECT to_regclass(%s)::oid AS oid) t
LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attname = 'embedding' AND NOT a.attisdropped
"""

#: The composed text of each table's plain search (composing costs more than the statement's
#: round trip on a warm server).
_PLAIN: dict[tuple[Any, ...], str] = {}


def version_of(row: Sequence[Any]) -> str:
    """The driver's stamp version from :data:`_STATE`'s first four columns."""
    return f"{row[1]}:{row[2]}:{row[3]}:{row[0]}"


class GuardedTable(IndexFacade[PgvectorDriver, StoredTable]):
    """A pgvector table bound to one contract; every call is checked before it runs.

    The guard is :attr:`index` (a :class:`~ctxemb_core.index.GuardedIndex` over the table's
    :class:`~ctxemb_pgvector.PgvectorDriver`, :attr:`driver`): every call compares the stamp
    row's version, the table's oid and the embedding column with what was verified, and a
    change is verified again in full, or the call refused. Writes are single transactions: a
    batch that fails or is interrupted (Ctrl-C, a lost connection, a killed process) leaves
    nothing behind. What every store's index object does (writes, ``sync``, ``count``, ...) is
    :class:`~ctxemb_core.index.IndexFacade`'s; this class adds PostgreSQL's own.

    Args:
        index: a guarded index over a :class:`~ctxemb_pgvector.PgvectorDriver`.
        ef_search: the HNSW search breadth of queries (default: the driver's).
        repaired: what the open repaired, in words.
    """

    _driver_type = PgvectorDriver
    _terms = TERMS

    @staticmethod
    def _translated(what: str) -> AbstractContextManager[None]:
        return translated(what)  # the connection's errors, as the facade's calls raise them

    def __init__(
        self,
        index: GuardedIndex,
        *,
        ef_search: int | None = None,
        repaired: list[str] | None = None,
    ) -> None:
        super().__init__(index)
        given = self.driver.ef_search if ef_search is None else ef_search
        self.ef_search = check_count(given, "ef_search")
        #: What ``open_table(..., repair=True)`` wrote back, in words (empty: nothing).
        self.repaired: list[str] = list(repaired or [])

    # -- what the table is ---------------------------------------------------------------

    @property
    def conn(self) -> psycopg.Connection[Any]:
        return self.driver.conn

    @property
    def client(self) -> psycopg.Connection[Any]:
        """The connection (named as the Chroma adapter's ``client`` for shared code)."""
        return self.conn

    @property
    def schema(self) -> str:
        return str(self.driver.schema)

    @property
    def layout(self) -> Layout:
        return layout_for(self.stamp.contract)

    @property
    def table(self) -> sql.Composed:
        return self.driver.table

    @property
    def companion(self) -> Any:
        """A hybrid index's lexical side (``lock()``, ``written(ids, documents, metas)``,
        ``deleted(ids)``), written in the transactions that write this table's rows."""
        return self.driver.companion

    @companion.setter
    def companion(self, value: Any) -> None:
        self.driver.companion = value

    @classmethod
    def _stored_in(cls, driver: PgvectorDriver) -> StoredTable | None:
        return stored_or_none(driver.conn, driver.name, driver.schema)

    @classmethod
    def _missing(cls, driver: PgvectorDriver, why: str) -> Exception:
        return missing_table(driver.conn, driver.name, driver.schema, why)

    def delete(
        self, ids: Sequence[str] | None = None, *, where: Mapping[str, Any] | None = None
    ) -> int:
        """Delete rows by id, by metadata filter, or both (a row must match all that are given);
        returns how many were deleted. An empty filter is refused, never read as "everything"."""
        if where is not None:
            where_clause(where)
        return len(self.index.delete(ids, where=where))

    # -- reading -------------------------------------------------------------------------

    def query(
        self,
        query_texts: Sequence[str] | str,
        n_results: int = 10,
        *,
        embedder: Embedder | None = None,
        **search: Unpack[Search],
    ) -> dict[str, Any]:
        """Embed queries under the contract (query role) and search; checked before it runs.

        Returns Chroma's shape: ``ids``, ``documents``, ``metadatas``, ``distances`` (and
        ``embeddings`` if included), one list per query. The distance is the layout's
        (``cosine``: 1 - cos; ``ip``: 1 - dot), lower is nearer. ``search``: PostgreSQL's
        options (:class:`Search`: ``where``, ``include``, ``exact``, ``ef_search``, ``ids``).

        Raises:
            ContractMismatchError: ``embedder``'s contract is not the table's.
        """
        check_count(n_results, "n_results")
        self._check_options(search, Search)
        _include(search.get("include", SHOWN))
        # The search reads the stamp's version in its own snapshot (one round trip).
        vectors = self.index.query_vectors(query_texts, embedder=embedder, read_head=False)
        return self.query_vectors(vectors, n_results, **search)

    def query_vectors(
        self, vectors: Any, n_results: int = 10, **search: Unpack[Search]
    ) -> dict[str, Any]:
        """Search with query vectors already in the stored form (checked by the caller), with
        :meth:`query`'s options."""
        check_count(n_results, "n_results")
        self._check_options(search, Search)
        where, ids = search.get("where"), search.get("ids")
        exact = check_flag(search.get("exact", False), "exact")
        shown = _include(search.get("include", SHOWN))
        given = search.get("ef_search")
        given = self.ef_search if given is None else given
        ef = min(MAX_EF_SEARCH, max(check_count(given, "ef_search"), n_results))
        filt, params = where_clause(where)
        if ids is not None:
            keep = sql.SQL("id = ANY(%s)")
            filt = (filt + sql.SQL(" AND ") + keep) if where else sql.SQL("WHERE ") + keep
            params = [*params, check_ids(ids)]
        layout = self.layout
        distance = layout.distance(sql.Identifier("embedding"), sql.Placeholder())
        values = to_column(np.atleast_2d(np.asarray(vectors)), layout)
        if not (where or ids is not None or exact):
            return self._query_plain(values, n_results, ef, shown, distance)
        query = sql.SQL(
            "SELECT id, content, meta, {distance}, {vec} FROM {table} {filt} "
            "ORDER BY embedding {op} %s LIMIT %s"
        ).format(
            distance=distance,
            vec=sql.SQL("embedding" if "embeddings" in shown else "NULL"),
            table=self.table,
            filt=filt,
            op=sql.SQL(layout.operator),
        )
        settings = [
            sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
            sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)),
        ]
        if where or ids is not None:
            settings.append(sql.SQL("SET LOCAL hnsw.iterative_scan = relaxed_order"))
        if exact:
            settings.append(sql.SQL("SET LOCAL enable_indexscan = off"))
        state = sql.SQL(_STATE).format(stamps=ident(self.schema, STAMPS))
        # One snapshot (repeatable read) for the stamp check and the searches, read-only and
        # without a row lock (which would make every query a writing transaction, waiting for
        # its commit record to reach the disk). A stamp that moved is verified outside the
        # transaction, then the search runs again.
        for attempt in range(2):
            with translated(f"querying {self.name!r}"), self.conn.transaction():
                self.conn.execute(sql.SQL("; ").join(settings))
                row = self.conn.execute(state, self._where_state()).fetchone()
                if row is not None and self._verified(row):
                    rows = [
                        self.conn.execute(query, (v, *params, v, n_results)).fetchall()
                        for v in values
                    ]
                    return self._gather(rows, shown)
            if attempt:
                raise StampError(f"the stamp of {self.name!r} keeps changing while it is queried")
            self.index.current()
        raise AssertionError("unreachable")

    def _where_state(self) -> tuple[str, str]:
        return (self.name, f'"{self.schema}"."{self.name}"')

    def _verified(self, row: Sequence[Any]) -> bool:
        return version_of(row) == self.index.verified_head.stamp_version

    def _query_plain(
        self,
        values: list[Any],
        n_results: int,
        ef: int,
        shown: tuple[str, ...],
        distance: sql.Composable,
    ) -> dict[str, Any]:
        """A search without filters: one statement per query vector, which reads the stamp's
        version and the search breadth in the snapshot of the search itself (one round trip,
        no transaction). The breadth is the connection's ``hnsw.ef_search``, set here when it
        is not ``ef`` (and seen to be, in the same statement)."""
        key = (self.schema, self.name, self.layout, "embeddings" in shown)
        query = _PLAIN.get(key)
        if query is None:
            search = sql.SQL(
                ", current_setting('hnsw.ef_search', true), r.* FROM ({state}) v "
                "LEFT JOIN LATERAL (SELECT id, content, meta, {distance} AS distance, {vec} AS "
                "vec FROM {table} ORDER BY embedding {op} %s LIMIT %s) r ON true"
            )
            query = (
                sql.SQL("SELECT v.*")
                + search.format(
                    state=sql.SQL(_STATE).format(stamps=ident(self.schema, STAMPS)),
                    distance=distance,
                    vec=sql.SQL("embedding" if "embeddings" in shown else "NULL"),
                    table=self.table,
                    op=sql.SQL(self.layout.operator),
                )
            ).as_string(self.conn)
            _PLAIN[key] = query
        results: list[list[Any]] = []
        for v in values:
            for attempt in range(3):
                with translated(f"querying {self.name!r}"):
                    args = (*self._where_state(), v, v, n_results)
                    try:
                        rows = self.conn.execute(query, args).fetchall()
                    except psycopg.Error:
                        # A statement that no longer fits the table (dropped, its column
                        # dropped or altered) is a change the head reads and names; any
                        # other error stands.
                        before = self.index.verified_head
                        if self.index.current() == before:
                            raise
                        continue
                if not rows or not self._verified(rows[0]):
                    if attempt == 2:
                        raise StampError(
                            f"the stamp of {self.name!r} keeps changing while it is queried"
                        )
                    self.index.current()
                    continue
                if rows[0][4] != str(ef):
                    self.driver.set_breadth(ef)
                    continue
                results.append([r[5:] for r in rows if r[5] is not None])
                break
        return self._gather(results, shown)

    def _gather(self, results: list[list[Any]], shown: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {k: [] for k in ("ids", *shown)}
        for rows in results:
            # A row without a vector (inserted around ctxemb, or a column emptied since this
            # table was opened) has no distance: foreign, refused as an open refuses it.
            refuse_vectorless([r[0] for r in rows if r[3] is None], len(rows))
            for part, values in self._columns(rows, shown).items():
                out[part].append(values)
        return out

    def _columns(self, rows: list[Any], shown: tuple[str, ...]) -> dict[str, Any]:
        """Rows of (id, content, meta, distance, vector) as Chroma's columns."""
        out: dict[str, Any] = {"ids": [r[0] for r in rows]}
        if "documents" in shown:
            out["documents"] = [r[1] for r in rows]
        if "metadatas" in shown:
            out["metadatas"] = [r[2] for r in rows]
        if "distances" in shown:
            out["distances"] = [float(r[3]) for r in rows]
        if "embeddings" in shown:
            out["embeddings"] = stacked(from_column([r[4] for r in rows]), self.contract.output_dim)
        return out

    def get(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int | None = None,
        include: Sequence[str] = ("documents", "metadatas"),
    ) -> dict[str, Any]:
        """Rows by id and/or metadata filter, oldest write first, after the stamp is checked."""
        shown = _include(include, get=True)
        clauses: list[sql.Composable] = []
        params: list[Any] = []
        if ids is not None:
            clauses.append(sql.SQL("id = ANY(%s)"))
            params.append(check_ids(ids))
        _, more = where_clause(where)
        if where:
            clauses.append(sql.SQL("meta @> %s"))
            params += more
        for arg, value in (("limit", limit), ("offset", offset)):
            if value is not None:
                check_count(value, arg, minimum=0)
        self.index.current()
        query = sql.SQL(
            "SELECT id, content, meta, NULL, {vec} FROM {} {} ORDER BY {} {} {}"
        ).format(
            self.table,
            sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL(""),
            self.driver.order(),
            sql.SQL("LIMIT {}").format(sql.Literal(limit)) if limit is not None else sql.SQL(""),
            sql.SQL("OFFSET {}").format(sql.Literal(offset)) if offset else sql.SQL(""),
            vec=sql.SQL("embedding" if "embeddings" in shown else "NULL"),
        )
        with translated(f"reading {self.name!r}"):
            rows = self.conn.execute(query, params).fetchall()
        return self._columns(rows, shown)


def _include(include: Sequence[str], get: bool = False) -> tuple[str, ...]:
    if isinstance(include, str) or not isinstance(include, Sequence):
        raise InvalidInputError(f"include must be a list of {INCLUDE}, got {include!r}")
    allowed = INCLUDE[:3] if get else INCLUDE
    bad = [i for i in include if i not in allowed]
    if bad:
        raise InvalidInputError(f"include: {bad[0]!r} is not one of {allowed}")
    return tuple(include)
