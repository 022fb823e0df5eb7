"""A hybrid index over Qdrant: the dense side a guarded collection, the lexical side core's.

The lexical side is core's transactional lexical store (:class:`~ctxemb_core.hybrid.
LexicalStore` over SQLite), kept beside a local-mode store in ``<folder>/ctxemb-lexical/<name>``
(a server's or an in-memory store's in a folder the caller names: ``lexical_path``), owned by
the collection's identity, its token recorded in the collection's metadata
(:data:`MARK_KEY`), as Chroma's is: core's layout (:mod:`ctxemb_core.hybrid.pair`). Qdrant's
own sparse vectors were not chosen: Qdrant would hold term weights ctxemb computes, but a BM25
query over them is scored by Qdrant (its IDF modifier, its own formula and statistics per
segment), so the lexical recipe core pins and checks (analyzer, k1, b, the canary of scores)
would no longer be what scores the query.
``docs/qdrant-advanced.md`` says more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient

from ctxemb_core.hybrid.pair import (
    LEXICAL_FOLDER,
    MARK_KEY,
    LexicalPlace,
    folder_place,
    lexical_home,
)

__all__ = ["LEXICAL_FOLDER", "MARK_KEY", "beside", "place_for"]


def beside(client: QdrantClient, name: str) -> Path:
    """Where a local-mode store keeps the lexical side of collection ``name`` (core's
    :func:`~ctxemb_core.hybrid.pair.lexical_home`); a server's or an in-memory store's is
    refused (its folder is not this machine's, or there is none)."""
    from ctxemb_qdrant._store import local_engine

    local = local_engine(client)
    folder = Path(local.location).resolve() if local is not None and local.persistent else None
    return lexical_home(folder, name, "a Qdrant server or in memory")


def place_for(dense: Any, folder: Path) -> LexicalPlace:
    """The lexical side of an opened collection: SQLite in ``folder``, owned by the collection's
    identity, its token recorded in the collection's metadata (core's
    :func:`~ctxemb_core.hybrid.pair.folder_place`)."""
    from ctxemb_qdrant._store import calling

    def metadata() -> dict[str, Any] | None:
        info = dense.driver._lookup()
        return info.config.metadata if info is not None else None

    def record(token: str) -> None:
        with calling(dense.client, f"recording the lexical side of {dense.name!r}"):
            dense.client.update_collection(dense.name, metadata={MARK_KEY: token})

    owner = f"Qdrant collection {dense.name!r} (identity {dense.index.verified_head.identity})"
    return folder_place(folder, dense.name, owner, metadata, record)
