"""Checking a table against a contract on open: the stamp row, the canary, the column, and the
rows written or changed since the table last passed."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from psycopg import sql

from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.guard import check_storage, refuse_foreign, sample_ranges
from ctxemb_core.verified import (
    MAX_RECORDED,
    OpenCheck,
    load_verified,
    plan_sample,
    save_verified,
)
from ctxemb_core.verified import record_key as record_key_for
from ctxemb_pgvector._connect import translated
from ctxemb_pgvector._sql import SEQ, layout_for
from ctxemb_pgvector._store import StoredTable, unstamped
from ctxemb_pgvector._vectors import from_column

# At most this many rows stored without a vector are named (all of them are refused).
_MAX_EMPTY = 100


def check_layout(stored: StoredTable, stamp: IndexStamp) -> None:
    """The embedding column must be of the type the stamp's contract stores, as recorded."""
    expected = layout_for(stamp.contract)
    check_storage(
        f"table {stored.name!r}",
        {"column": stored.column},
        {"column": expected.column},
        {"column": (stored.layout or {}).get("column")},
        "Rows written or converted into it are not the contract's vectors: migrate the "
        "documents into a new table (ctxemb migrate), or restore the column's type.",
    )


def read_rows(stored: StoredTable, ids: list[str]) -> tuple[list[str], list[Any], list[Any]]:
    """``(ids, texts, vectors)`` of the rows of ``ids`` (in the store's order)."""
    if not ids:
        return [], [], []
    query = sql.SQL("SELECT id, content, embedding FROM {} WHERE id = ANY(%s) ORDER BY {}")
    rows = stored.conn.execute(query.format(stored.table, stored.order()), (ids,)).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows], from_column([r[2] for r in rows])


def all_ids(stored: StoredTable) -> tuple[list[str], list[str], list[str]]:
    """Every id in the store's order; each row's write (its id and ``ctxemb_seq``, which every
    write takes anew: a row written again is another write, even deleted and written again in
    its old place, as a table emptied and refilled in order is); and the ids of rows stored
    without a vector (inserted around ctxemb, a column dropped and added again). One scan."""
    seq = sql.SQL(SEQ if stored.seq else "NULL")
    query = sql.SQL("SELECT id, {}, embedding IS NULL FROM {} ORDER BY {}").format(
        seq, stored.table, stored.order()
    )
    ids: list[str] = []
    writes: list[str] = []
    empty: list[str] = []
    for row in stored.conn.execute(query):
        ids.append(row[0])
        # A NUL never occurs in PostgreSQL text: the pair cannot be mistaken for another id.
        writes.append(row[0] if row[1] is None else f"{row[0]}\x00{row[1]}")
        if row[2]:
            empty.append(row[0])
    return ids, writes, empty


def sample_rows(stored: StoredTable, size: int) -> tuple[list[str], list[Any], list[Any]]:
    """The newest half (last written or changed) and a random half of ``size`` rows."""
    ids: list[str] = []
    texts: list[Any] = []
    vectors: list[Any] = []
    query = sql.SQL("SELECT id, content, embedding FROM {} ORDER BY {} OFFSET %s LIMIT %s")
    with translated(f"sampling {stored.name!r}"):
        for start, stop in sample_ranges(stored.count(), size):
            rows = stored.conn.execute(
                query.format(stored.table, stored.order()), (start, stop - start)
            ).fetchall()
            ids += [r[0] for r in rows]
            texts += [r[1] for r in rows]
            vectors += from_column([r[2] for r in rows])
    return ids, texts, vectors


def record_key(stored: StoredTable, embedder: Embedder) -> dict[str, str]:
    """What the verification record is kept under: the server (and when it started: a server
    restarted may serve a restored backup or a new cluster, whose oids repeat) and database,
    the table's oid (a table dropped and made again under its name is another), the embedding
    column's number and type, the stamp row's version and content, the caller's contract and
    encoder."""
    info = stored.conn.info
    started = stored.conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()
    stamp = json.dumps(IndexStamp.metadata_items(stored.metadata), default=str)
    return record_key_for(
        f"pgvector:{info.host}:{info.port}/{info.dbname}@{started[0] if started else ''}",
        f"{stored.schema}.{stored.name}#{stored.oid}",
        embedder,
        version=str(stored.version),
        stamp=hashlib.sha256(stamp.encode()).hexdigest(),
        column=f"{stored.attnum}:{stored.column}",
    )


def verify_open(
    stored: StoredTable, embedder: Embedder, sample: int
) -> tuple[IndexStamp, OpenCheck]:
    """Every check of an existing table; returns its stamp and what was checked of its rows.

    The rows re-embedded are those written or changed since the table last passed under this
    contract (every write takes a fresh ``ctxemb_seq``, which the record keeps per row: an
    ``UPDATE`` around ctxemb, or rows deleted and written again in their old order, are
    changed rows), then random others up to ``sample``. Rows stored without a vector are
    refused wherever they are.
    """
    if not stored.stamped:
        raise unstamped(stored)
    stamp = IndexStamp.from_metadata(stored.metadata)
    stamp.verify(embedder)
    check_layout(stored, stamp)
    if not sample:
        return stamp, OpenCheck(None, 0)
    with translated(f"checking the rows of {stored.name!r}"):
        ids, writes, empty = all_ids(stored)
        key = record_key(stored, embedder)
        verified = load_verified(key) if len(ids) <= MAX_RECORDED else None
        # Planned on writes, not ids: a row rewritten where it was is not the row verified.
        planned, changed = plan_sample(writes, verified, sample)
        of_write = dict(zip(writes, ids, strict=True))
        chosen = [of_write[w] for w in planned]
        # Rows without a vector are foreign wherever they are, sampled or not (a query would
        # find them where it finds too few others): checked with the sample, so refused as
        # its foreign records are.
        drawn = set(chosen)
        extra = [i for i in empty if i not in drawn][:_MAX_EMPTY]
        got_ids, texts, vectors = read_rows(stored, chosen + extra)
    refuse_foreign(embedder, got_ids, texts, vectors)
    save_verified(key, writes)
    return stamp, OpenCheck(len(ids), len(chosen), changed)
