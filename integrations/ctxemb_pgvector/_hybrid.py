"""A hybrid index over a guarded pgvector table: its lexical side in a folder of this machine."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.hybrid import Fusion, LexicalContract
from ctxemb_core.hybrid.pair import HybridIndex
from ctxemb_core.hybrid.pair import open_hybrid as open_pair
from ctxemb_pgvector._open import open_table
from ctxemb_pgvector._sql import check_name


def lexical_folder(conn: Any, name: str, lexical_path: Any = None) -> Path:
    """Where the lexical side of table ``name`` lives: ``lexical_path`` (required: the
    database server's disk is not this machine's)."""
    check_name(name)
    if lexical_path is None:
        raise InvalidInputError(
            "a hybrid index on PostgreSQL keeps its lexical side in a folder of this machine: "
            "give lexical_path (--lexical-path)"
        )
    return Path(os.fspath(lexical_path))


def open_hybrid(
    conn: Any,
    name: str,
    contract: EmbeddingContract | Embedder,
    *,
    lexical: LexicalContract | None = None,
    fusion: Fusion | None = None,
    lexical_path: str | os.PathLike[str] | None = None,
    create: bool = True,
    refresh: bool = False,
    progress: Callable[[int], None] | None = None,
    **open_options: Any,
) -> HybridIndex:
    """Open (or create) table ``name`` under ``contract`` (as :func:`open_table`, whose options
    ``open_options`` are) and its lexical side in ``lexical_path``; see
    :func:`ctxemb_core.hybrid.pair.open_hybrid`."""
    folder = lexical_folder(conn, name, lexical_path)
    dense = open_table(conn, name, contract, create=create, **open_options)
    return open_pair(
        dense,
        folder,
        lexical=lexical,
        fusion=fusion,
        create=create,
        refresh=refresh,
        progress=progress,
    )
