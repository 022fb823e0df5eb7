"""Checking a table against a contract on demand: every finding reported, none raised."""

from __future__ import annotations

import dataclasses
from typing import Any

from psycopg import sql

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.errors import InvalidInputError, StampError, StorageMismatchError
from ctxemb_core.guard import (
    RecordCheck,
    VerifyReport,
    as_embedder,
    check_flag,
    check_sample_size,
    check_stored,
    records_progress,
    verify_index,
)
from ctxemb_pgvector._connect import translated
from ctxemb_pgvector._store import StoredTable
from ctxemb_pgvector._table import GuardedTable
from ctxemb_pgvector._vectors import from_column
from ctxemb_pgvector._verify import check_layout, sample_rows

PAGE = 256  # rows per read when every row is checked


def check_every_row(stored: StoredTable, embedder: Embedder, progress: bool | None) -> RecordCheck:
    """Re-embed every stored row, one page at a time (keyset paging), with a progress bar."""
    total = stored.count()
    result = RecordCheck()
    query = sql.SQL("SELECT id, content, embedding FROM {} WHERE id > %s ORDER BY id LIMIT %s")
    last = ""
    with records_progress(total, progress, embedder) as bar:
        while True:
            rows = stored.conn.execute(query.format(stored.table), (last, PAGE)).fetchall()
            if not rows:
                break
            last = rows[-1][0]
            ids, texts = [r[0] for r in rows], [r[1] for r in rows]
            vectors = from_column([r[2] for r in rows])
            result = result.merge(check_stored(embedder, ids, texts, vectors))
            bar.update(len(rows))
    return result


def verify(
    table: Any,
    contract: EmbeddingContract | Embedder,
    sample: int = 32,
    *,
    all: bool = False,
    progress: bool | None = None,
) -> VerifyReport:
    """Check a table against a contract and report every finding (never raises for them).

    Args:
        table: a :class:`GuardedTable`, or a :class:`StoredTable` (``stored_table(conn, name)``,
            unguarded: for a table that would not open).
        contract: the caller's contract (or embedder).
        sample: how many stored rows to re-embed (the newest half by last write, whoever wrote
            it, and a random half).
        all: re-embed every stored row instead, page by page, with a progress bar.
        progress: show the progress bar (``None``: as the embedder's ``show_progress`` says).

    The report's ``configuration`` says whether the embedding column is of the type the
    stamp's contract stores (``match``, or what differs); ``checked()`` / ``not_checked()``
    say what was proven.
    """
    stored = table.stored() if isinstance(table, GuardedTable) else table
    if not isinstance(stored, StoredTable):
        raise InvalidInputError(
            f"table must be a GuardedTable or a StoredTable, got {type(stored).__name__}"
        )
    embedder = as_embedder(contract)
    size = check_sample_size(sample)
    check_flag(all, "all")
    if progress is not None:
        check_flag(progress, "progress")
    with translated(f"verifying {stored.name!r}"):
        records = stored.count()
        if all:
            found: Any = check_every_row(stored, embedder, progress)
        else:
            found = sample_rows(stored, size) if size else None
        report = verify_index(
            stored.metadata,
            embedder,
            found,
            records=records,
            mode="all" if all else ("sample" if size else "none"),
        )
    column = None
    try:
        check_layout(stored, IndexStamp.from_metadata(stored.metadata))
        column = "match"
    except StorageMismatchError as exc:
        column = "; ".join(
            f"{k}: store={exc.stored.get(k)!r}, stamp={exc.expected[k]!r}" for k in exc.fields
        )
    except StampError:
        column = None
    return dataclasses.replace(report, configuration=column)
