"""A hybrid index over a guarded pgvector table: its lexical side in tables of the same database,
written in the same transactions as the table's rows."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.hybrid import LexicalStore
from ctxemb_core.hybrid.pair import HybridIndex, LexicalPlace, open_paired
from ctxemb_pgvector._hybrid_store import PgLexical
from ctxemb_pgvector._open import open_table
from ctxemb_pgvector._sql import check_name


def lexical_folder(conn: Any, name: str, lexical_path: Any = None) -> Path | None:
    """A table's lexical side lives in its database, not in a folder: ``lexical_path`` only
    names an old (ctxemb 0.1) lexical folder to convert, once."""
    check_name(name)
    return None if lexical_path is None else Path(os.fspath(lexical_path))


def place_for(dense: Any, lexical_path: Any = None) -> LexicalPlace:
    """The lexical side of an opened table: its schema's ``ctxemb_lexical_*`` tables, owned by
    the table's oid (a table dropped and created again is another table)."""
    oid = int(dense.index.verified_head.identity)  # the driver's identity: the table's oid
    db = PgLexical(dense.conn, dense.schema, dense.name)
    return LexicalPlace(
        LexicalStore(db),
        owner=f'table "{dense.schema}"."{dense.name}" (oid {oid})',
        remedy=f"Table {dense.name!r} was dropped and created again around ctxemb since its "
        "lexical side was built: rebuild the side from its rows (ctxemb index --hybrid "
        "--rebuild-lexical; open_hybrid(..., rebuild=True)).",
        folder=lexical_folder(dense.conn, dense.name, lexical_path),
        joint=True,
        mark=lambda: db.mark(oid),
        set_mark=lambda token: db.set_mark(oid, token),
    )


def open_hybrid(
    conn: Any,
    name: str,
    contract: EmbeddingContract | Embedder,
    *,
    lexical_path: str | os.PathLike[str] | None = None,
    **options: Any,
) -> HybridIndex:
    """Open (or create) table ``name`` under ``contract`` and its lexical side in the same
    database; the table then writes the lexical rows in the transactions that write its own.

    ``options``: the hybrid ones (``lexical``, ``fusion``, ``create``, ``refresh``,
    ``rebuild``, ``progress``: see :func:`ctxemb_core.hybrid.pair.open_hybrid`), the others
    :func:`open_table`'s. ``lexical_path``: an old lexical folder to convert (ctxemb 0.1 kept
    the side in one).
    """
    return open_paired(
        partial(open_table, conn, name, contract),
        lambda dense: place_for(dense, lexical_path),
        **options,
    )
