"""A stamped PostgreSQL table bound to one contract: every call checked before it runs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.documents import TEXT_KEY, check_fingerprint
from ctxemb_core.errors import ExistingIdsError, InvalidInputError, StampError
from ctxemb_core.guard import (
    OPEN_SAMPLE,
    add_missing,
    check_count,
    check_delete,
    check_embedded,
    check_querier,
    check_querier_canary,
    check_records,
    refuse_vectorless,
    storable,
)
from ctxemb_core.sync import SyncReport, missing_ids, sync_batch, with_text_digest
from ctxemb_core.verified import OpenCheck
from ctxemb_pgvector._connect import translated
from ctxemb_pgvector._sql import MAX_ID, STAMPS, Layout, ident, layout_for
from ctxemb_pgvector._store import StoredTable, stored_or_none
from ctxemb_pgvector._vectors import from_column, stacked, to_column
from ctxemb_pgvector._verify import unstamped, verify_open

#: What ``include`` may name, as in Chroma's ``get`` and ``query``.
INCLUDE = ("documents", "metadatas", "embeddings", "distances")
#: pgvector's highest ``hnsw.ef_search``.
MAX_EF_SEARCH = 1000

_IDENTITY = """
SELECT s.version, format_type(a.atttypid, a.atttypmod), t.oid::bigint, a.attnum
FROM {stamps} s
CROSS JOIN (SELECT to_regclass(%s)::oid AS oid) t
LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attname = 'embedding'
  AND NOT a.attisdropped
WHERE s.table_name = %s
"""


#: The composed text of each table's plain search (composing costs more than the statement's
#: round trip on a warm server).
_PLAIN: dict[tuple[Any, ...], str] = {}


class GuardedTable:
    """A pgvector table bound to one contract; every call is checked before it runs.

    Every call reads the stamp row's version and the embedding column's type (one indexed
    read: the stamp row's version changes with any edit of it, by any client) and compares them
    with what was verified; a change is verified again in full, or the call refused. Writes are
    single transactions: a batch that fails or is interrupted (Ctrl-C, a lost connection, a
    killed process) leaves nothing behind.
    """

    def __init__(
        self,
        stored: StoredTable,
        embedder: Embedder,
        stamp: IndexStamp,
        *,
        sample: int = OPEN_SAMPLE,
        ef_search: int = 200,
        open_check: OpenCheck | None = None,
    ) -> None:
        self.conn = stored.conn
        self.schema = stored.schema
        self.embedder = embedder
        self.stamp = stamp
        self.sample = sample
        self.ef_search = check_count(ef_search, "ef_search")
        #: What the last verification checked of the stored rows (``None`` when the table was
        #: created or adopted by this open).
        self.open_check = open_check
        #: What ``open_table(..., repair=True)`` wrote back, in words (empty: nothing).
        self.repaired: list[str] = []
        self._stored = stored
        self._seen = _state(stored)
        self._queriers: list[Embedder] = [embedder]
        #: A hybrid index's lexical side (``lock()``, ``written(ids, documents, metas)``,
        #: ``deleted(ids)``), written in the transactions that write this table's rows.
        self.companion: Any = None

    # -- what the table is ---------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._stored.name

    @property
    def client(self) -> psycopg.Connection[Any]:
        """The connection (named as the Chroma adapter's ``client`` for shared code)."""
        return self.conn

    @property
    def contract(self) -> EmbeddingContract:
        return self.embedder.contract

    @property
    def layout(self) -> Layout:
        return layout_for(self.stamp.contract)

    @property
    def table(self) -> sql.Composed:
        return ident(self.schema, self.name)

    def stored(self) -> StoredTable:
        """The table as the database has it now, unguarded (for reading or verifying)."""
        found = stored_or_none(self.conn, self.name, self.schema)
        if found is None:
            raise InvalidInputError(f"table {self.name!r} no longer exists")
        return found

    def current(self) -> StoredTable:
        """The table now, proven to carry the stamp this object verified (or re-verified)."""
        query = sql.SQL(_IDENTITY).format(stamps=ident(self.schema, STAMPS))
        with translated(f"reading the stamp of {self.name!r}"):
            where = (f'"{self.schema}"."{self.name}"', self.name)
            rows = self.conn.execute(query, where).fetchall()
        # One stamp row, as verified, over the same table and column (a table or column dropped
        # and made again under its name is another: its rows are not the ones verified).
        if len(rows) == 1 and tuple(rows[0]) == self._seen:
            return self._stored
        stored = self.stored()
        if not stored.stamped:
            raise unstamped(stored)
        # Changed since it was verified (another client, plain SQL): check it whole.
        self.stamp, self.open_check = verify_open(stored, self.embedder, self.sample)
        self._stored, self._seen, self._queriers = stored, _state(stored), [self.embedder]
        return stored

    def count(self) -> int:
        self.current()
        return self._stored.count()

    def ids(self) -> set[str]:
        self.current()
        with translated("reading ids"):
            return {
                r[0] for r in self.conn.execute(sql.SQL("SELECT id FROM {}").format(self.table))
            }

    # -- writing -------------------------------------------------------------------------

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        upsert: bool = False,
    ) -> None:
        """Embed documents under the contract and write them, in one transaction.

        The batch, the stamp and, for ``add``, that no id is stored yet are checked before
        anything is embedded; a write that fails or is interrupted leaves the table as it was.

        Raises:
            InvalidInputError: a bad batch (named); ExistingIdsError for ``add``.
        """
        self._write(ids, documents, metadatas, upsert)

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Like :meth:`add`, replacing the rows of existing ids (text, vector and metadata)."""
        self._write(ids, documents, metadatas, True)

    def add_embedded(
        self,
        ids: Sequence[str],
        vectors: Any,
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        fingerprint: str,
        upsert: bool = False,
    ) -> None:
        """Write rows a ctxemb embedder elsewhere already embedded, under ``fingerprint``.

        For frameworks whose embedder and writer are separate steps (Haystack, LangChain): the
        vectors are refused unless ``fingerprint`` is the stamp's, and each must be finite and
        of the contract's width; otherwise as :meth:`add`.

        Raises:
            ContractMismatchError: the vectors were made under another contract.
        """
        self._write(ids, documents, metadatas, upsert, (vectors, fingerprint))

    def _write(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None,
        upsert: bool,
        embedded: tuple[Any, str] | None = None,
    ) -> None:
        ids, metadatas = check_records(ids, documents, metadatas)
        check_rows(ids, documents, metadatas)
        metas = [
            with_text_digest(m, d, keep=embedded is not None)
            for m, d in zip(metadatas or [None] * len(ids), documents, strict=True)
        ]
        self.current()
        vectors = None
        if embedded is not None:
            check_fingerprint(embedded[1], self.stamp.contract)
            vectors = check_embedded(embedded[0], self.contract, ids)
        if not upsert:
            present = self._present(ids)
            if present:
                raise ExistingIdsError(tuple(i for i in ids if i in present))
        if vectors is None:
            vectors = storable(
                self.embedder.embed_documents(list(documents)), self.contract.precision
            )
        values = to_column(vectors, self.layout)
        for attempt in range(2):
            try:
                with translated(f"writing to {self.name!r}"), self.conn.transaction():
                    if self._stamp_moved():
                        raise _Moved
                    if self.companion is not None:
                        self.companion.lock()  # writers of both sides take turns from here
                    self._copy(ids, values, list(documents), metas, upsert)
                    if self.companion is not None:
                        self.companion.written(ids, list(documents), metas)
                return
            except _Moved:
                if attempt:
                    raise StampError(
                        f"the stamp of {self.name!r} keeps changing while it is written to"
                    ) from None
                self.current()  # verify the new stamp (raises if it is not this contract's)
            except psycopg.errors.UniqueViolation:
                # Another writer added some of these ids between the check and the write.
                raise ExistingIdsError(tuple(i for i in ids if i in self._present(ids))) from None

    def _stamp_moved(self, *, lock: bool = True) -> bool:
        # Inside a write's transaction the stamp row is held (FOR SHARE) until it commits, so no
        # re-stamp can land between this check and the rows; a query's repeatable-read snapshot
        # needs no lock (its search sees the table as of this check).
        query = sql.SQL(
            "SELECT version FROM {} WHERE table_name = %s" + (" FOR SHARE" if lock else "")
        ).format(ident(self.schema, STAMPS))
        rows = self.conn.execute(query, (self.name,)).fetchall()
        return len(rows) != 1 or rows[0][0] != self._seen[0]

    def _copy(
        self,
        ids: list[str],
        values: list[Any],
        documents: list[str],
        metas: list[dict[str, Any]],
        upsert: bool,
    ) -> None:
        rows = zip(ids, documents, metas, values, strict=True)
        copy_rows(self.conn, self.table, self.layout.kind, rows, upsert)

    def add_missing(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        """Add the rows whose ids the table lacks; returns how many this call added.

        A re-run, or another process indexing the same corpus at the same time, adds nothing
        twice and fails on nothing that is already there.
        """
        ids, metadatas = check_records(ids, documents, metadatas)
        return add_missing(self._present, self.add, ids, documents, metadatas)

    def sync(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> SyncReport:
        """Index a batch as a sync: embed and write only the rows that are new or whose text
        changed (see :mod:`ctxemb_core.sync`); ``dry_run`` embeds and writes nothing."""
        ids, metadatas = check_records(ids, documents, metadatas)
        return sync_batch(
            self._read_stored,
            self.upsert,
            ids,
            documents,
            metadatas,
            dry_run=dry_run,
            progress=progress,
        )

    def delete_missing(self, keep: Iterable[str], *, dry_run: bool = False) -> list[str]:
        """Delete the rows whose ids are not in ``keep`` (a corpus's ids); returns them."""
        gone = missing_ids(self._ordered_ids(), keep)
        if not dry_run and gone:
            self.delete(gone)
        return gone

    def _ordered_ids(self) -> list[str]:
        self.current()
        query = sql.SQL("SELECT id FROM {} ORDER BY {}").format(self.table, self._stored.order())
        with translated("reading ids"):
            return [r[0] for r in self.conn.execute(query)]

    def _read_stored(self, ids: list[str]) -> dict[str, tuple[str | None, Any]]:
        self.current()
        query = sql.SQL(
            "SELECT id, CASE WHEN meta ? %s THEN NULL ELSE content END, meta FROM {} "
            "WHERE id = ANY(%s)"
        ).format(self.table)
        with translated("reading the stored rows"):
            rows = self.conn.execute(query, (TEXT_KEY, ids)).fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def _present(self, ids: list[str]) -> set[str]:
        query = sql.SQL("SELECT id FROM {} WHERE id = ANY(%s)").format(self.table)
        with translated("reading ids"):
            return {r[0] for r in self.conn.execute(query, (list(ids),))}

    # -- reading -------------------------------------------------------------------------

    def query(
        self,
        query_texts: Sequence[str] | str,
        n_results: int = 10,
        *,
        embedder: Embedder | None = None,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("documents", "metadatas", "distances"),
        exact: bool = False,
        ef_search: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Embed queries under the contract (query role) and search; checked before it runs.

        Returns Chroma's shape: ``ids``, ``documents``, ``metadatas``, ``distances`` (and
        ``embeddings`` if included), one list per query. The distance is the layout's
        (``cosine``: 1 - cos; ``ip``: 1 - dot), lower is nearer; ``exact`` scans every row
        instead of the HNSW index; ``ef_search`` widens the index's search (at least
        ``n_results``). ``where`` keeps rows whose metadata holds every given key and value.

        Raises:
            ContractMismatchError: ``embedder``'s contract is not the table's.
        """
        check_count(n_results, "n_results")
        shown = _include(include)
        querier = check_querier(embedder) or self.embedder
        if isinstance(query_texts, str):
            query_texts = [query_texts]
        elif not isinstance(query_texts, Sequence):
            raise InvalidInputError(
                f"query_texts must be a list of texts, got {type(query_texts).__name__}"
            )
        self.current()
        check_querier_canary(self.stamp, querier, self._queriers)
        vectors = storable(querier.embed_queries(list(query_texts)), querier.contract.precision)
        return self.query_vectors(
            vectors,
            n_results,
            where=where,
            include=shown,
            exact=exact,
            ef_search=ef_search,
            ids=ids,
        )

    def query_vectors(
        self,
        vectors: Any,
        n_results: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("documents", "metadatas", "distances"),
        exact: bool = False,
        ef_search: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Search with query vectors already in the stored form (checked by the caller);
        ``ids`` searches among those rows only."""
        check_count(n_results, "n_results")
        shown = _include(include)
        ef = min(
            MAX_EF_SEARCH,
            max(
                check_count(self.ef_search if ef_search is None else ef_search, "ef_search"),
                n_results,
            ),
        )
        filt, params = _where(where)
        if ids is not None:
            from ctxemb_core.guard import check_ids

            keep = sql.SQL("id = ANY(%s)")
            filt = (filt + sql.SQL(" AND ") + keep) if where else sql.SQL("WHERE ") + keep
            params = [*params, check_ids(ids)]
        layout = self.layout
        distance = layout.distance(sql.Identifier("embedding"), sql.Placeholder())
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
        values = to_column(np.atleast_2d(np.asarray(vectors)), layout)
        if not (where or ids is not None or exact):
            return self._query_plain(values, n_results, ef, shown, distance)
        settings = [
            sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
            sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)),
        ]
        if where or ids is not None:
            settings.append(sql.SQL("SET LOCAL hnsw.iterative_scan = relaxed_order"))
        if exact:
            settings.append(sql.SQL("SET LOCAL enable_indexscan = off"))
        begin = sql.SQL("; ").join(settings)
        # One snapshot (repeatable read) for the stamp check and the searches, read-only and
        # without a row lock (which would make every query a writing transaction, waiting for
        # its commit record to reach the disk). A stamp that moved is verified outside the
        # transaction, then the search runs again.
        for attempt in range(2):
            with translated(f"querying {self.name!r}"), self.conn.transaction():
                self.conn.execute(begin)
                if not self._stamp_moved(lock=False):
                    rows = [
                        self.conn.execute(query, (v, *params, v, n_results)).fetchall()
                        for v in values
                    ]
                    return self._gather(rows, shown)
            if attempt:
                raise StampError(f"the stamp of {self.name!r} keeps changing while it is queried")
            self.current()
        raise AssertionError("unreachable")

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
            query = (
                sql.SQL(
                    "SELECT s.version, current_setting('hnsw.ef_search', true), r.* "
                    "FROM (SELECT CASE WHEN count(*) = 1 THEN max(version) END AS version "
                    "FROM {stamps} WHERE table_name = %s) s "
                    "LEFT JOIN LATERAL (SELECT id, content, meta, {distance} AS distance, {vec} AS "
                    "vec FROM {table} ORDER BY embedding {op} %s LIMIT %s) r ON true"
                )
                .format(
                    stamps=ident(self.schema, STAMPS),
                    distance=distance,
                    vec=sql.SQL("embedding" if "embeddings" in shown else "NULL"),
                    table=self.table,
                    op=sql.SQL(self.layout.operator),
                )
                .as_string(self.conn)
            )
            _PLAIN[key] = query
        results: list[list[Any]] = []
        for v in values:
            for attempt in range(3):
                with translated(f"querying {self.name!r}"):
                    rows = self.conn.execute(query, (self.name, v, v, n_results)).fetchall()
                if not rows or rows[0][0] != self._seen[0]:
                    if attempt == 2:
                        raise StampError(
                            f"the stamp of {self.name!r} keeps changing while it is queried"
                        )
                    self.current()
                    continue
                if rows[0][1] != str(ef):
                    with translated(f"querying {self.name!r}"):
                        self.conn.execute(
                            sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(ef))
                        )
                    continue
                results.append([r[2:] for r in rows if r[2] is not None])
                break
        return self._gather(results, shown)

    def _gather(self, results: list[list[Any]], shown: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {k: [] for k in ("ids", *shown)}
        for rows in results:
            # A row without a vector (inserted around ctxemb, or a column emptied since this
            # table was opened) has no distance: foreign, refused as an open refuses it.
            refuse_vectorless([r[0] for r in rows if r[3] is None], len(rows))
            out["ids"].append([r[0] for r in rows])
            if "documents" in shown:
                out["documents"].append([r[1] for r in rows])
            if "metadatas" in shown:
                out["metadatas"].append([r[2] for r in rows])
            if "distances" in shown:
                out["distances"].append([float(r[3]) for r in rows])
            if "embeddings" in shown:
                out["embeddings"].append(
                    stacked(from_column([r[4] for r in rows]), self.contract.output_dim)
                )
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
            from ctxemb_core.guard import check_ids

            clauses.append(sql.SQL("id = ANY(%s)"))
            params.append(check_ids(ids))
        filt, more = _where(where)
        if where:
            clauses.append(sql.SQL("meta @> %s"))
            params += more
        for arg, value in (("limit", limit), ("offset", offset)):
            if value is not None:
                check_count(value, arg, minimum=0)
        stored = self.current()
        query = sql.SQL("SELECT id, content, meta, {vec} FROM {} {} ORDER BY {} {} {}").format(
            self.table,
            sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL(""),
            stored.order(),
            sql.SQL("LIMIT {}").format(sql.Literal(limit)) if limit is not None else sql.SQL(""),
            sql.SQL("OFFSET {}").format(sql.Literal(offset)) if offset else sql.SQL(""),
            vec=sql.SQL("embedding" if "embeddings" in shown else "NULL"),
        )
        del filt
        with translated(f"reading {self.name!r}"):
            rows = self.conn.execute(query, params).fetchall()
        out: dict[str, Any] = {"ids": [r[0] for r in rows]}
        if "documents" in shown:
            out["documents"] = [r[1] for r in rows]
        if "metadatas" in shown:
            out["metadatas"] = [r[2] for r in rows]
        if "embeddings" in shown:
            out["embeddings"] = stacked(from_column([r[3] for r in rows]), self.contract.output_dim)
        return out

    def delete(
        self, ids: Sequence[str] | None = None, *, where: Mapping[str, Any] | None = None
    ) -> int:
        """Delete rows by id, by metadata filter, or both (a row must match all that are given);
        returns how many were deleted. An empty filter is refused, never read as "everything"."""
        ids, given = check_delete(ids, {"where": where})
        clauses: list[sql.Composable] = []
        params: list[Any] = []
        if ids is not None:
            clauses.append(sql.SQL("id = ANY(%s)"))
            params.append(ids)
        if given:
            _, more = _where(given["where"])
            clauses.append(sql.SQL("meta @> %s"))
            params += more
        self.current()
        query = sql.SQL("DELETE FROM {} WHERE {}").format(
            self.table, sql.SQL(" AND ").join(clauses)
        )
        with translated(f"deleting from {self.name!r}"), self.conn.transaction():
            if self._stamp_moved():
                self.current()
            if self.companion is None:
                return self.conn.execute(query, params).rowcount
            self.companion.lock()
            gone = [r[0] for r in self.conn.execute(query + sql.SQL(" RETURNING id"), params)]
            self.companion.deleted(gone)
            return len(gone)


def _state(stored: StoredTable) -> tuple[Any, ...]:
    """What a call compares to tell the table verified from one changed since: the stamp row's
    version, the embedding column's type, the table's oid (one dropped and made again under its
    name is another) and the column's number (as :data:`_IDENTITY` reads them)."""
    return (stored.version, stored.column, stored.oid, stored.attnum)


class _Moved(Exception):
    """The stamp row changed between the check before a write and the write's transaction."""


def _include(include: Sequence[str], get: bool = False) -> tuple[str, ...]:
    if isinstance(include, str) or not isinstance(include, Sequence):
        raise InvalidInputError(f"include must be a list of {INCLUDE}, got {include!r}")
    allowed = INCLUDE[:3] if get else INCLUDE
    bad = [i for i in include if i not in allowed]
    if bad:
        raise InvalidInputError(f"include: {bad[0]!r} is not one of {allowed}")
    return tuple(include)


def _where(where: Mapping[str, Any] | None) -> tuple[sql.Composable, list[Any]]:
    """``WHERE meta @> {...}``: rows whose metadata holds every key with its value."""
    if where is None:
        return sql.SQL(""), []
    if not isinstance(where, Mapping) or not where:
        raise InvalidInputError(
            f"where must be a non-empty mapping of metadata values, got {where!r}"
        )
    operators = [k for k in where if str(k).startswith("$")]
    if operators:
        raise InvalidInputError(
            f"where: {operators[0]!r}: the pgvector adapter filters by metadata equality "
            "({'topic': 'tea', 'year': 2024}: every key holds its value); query the table with "
            "SQL for anything else"
        )
    try:
        encoded = json.loads(json.dumps(dict(where), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"where is not JSON: {exc}") from None
    return sql.SQL("WHERE meta @> %s"), [Jsonb(encoded)]


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


def copy_rows(
    conn: psycopg.Connection[Any],
    table: sql.Composable,
    kind: str,
    rows: Iterable[tuple[str, str | None, Any, Any]],
    upsert: bool,
) -> None:
    """Write ``(id, content, meta, embedding)`` rows by binary COPY, in the caller's
    transaction; ``upsert`` replaces the rows of existing ids whole (blobs cleared). ``kind``
    is the embedding column's type (``vector``, ``halfvec``, ``bit``)."""
    columns = sql.SQL("(id, content, meta, embedding)")
    target: sql.Composable = table
    if upsert:
        target = sql.Identifier("ctxemb_upsert")
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE ctxemb_upsert ON COMMIT DROP AS SELECT id, content, meta, "
                "embedding FROM {} WITH NO DATA"
            ).format(table)
        )
    with conn.cursor() as cur:
        with cur.copy(
            sql.SQL("COPY {} {} FROM STDIN (FORMAT BINARY)").format(target, columns)
        ) as copy:
            copy.set_types(["varchar", "text", "jsonb", kind])
            for row in rows:
                copy.write_row((row[0], row[1], Jsonb(row[2]), row[3]))
        if upsert:
            cur.execute(
                sql.SQL(
                    "INSERT INTO {} (id, content, meta, embedding, blob_data, blob_meta, "
                    "blob_mime_type) SELECT id, content, meta, embedding, NULL, NULL, NULL "
                    "FROM ctxemb_upsert ON CONFLICT (id) DO UPDATE SET content = "
                    "EXCLUDED.content, meta = EXCLUDED.meta, embedding = EXCLUDED.embedding, "
                    "blob_data = NULL, blob_meta = NULL, blob_mime_type = NULL"
                ).format(table)
            )
