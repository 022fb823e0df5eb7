"""A hybrid index over Qdrant: the dense side a guarded collection, the lexical side core's.

The lexical side is core's transactional lexical store (:class:`~ctxemb_core.hybrid.
LexicalStore` over SQLite), kept beside a local-mode store in ``<folder>/ctxemb-lexical/<name>``
(a server's or an in-memory store's in a folder the caller names: ``lexical_path``), owned by
the collection's identity, its token recorded in the collection's metadata
(:data:`MARK_KEY`), as Chroma's is. Qdrant's own sparse vectors were not chosen: Qdrant would
hold term weights ctxemb computes, but a BM25 query over them is scored by Qdrant (its IDF
modifier, its own formula and statistics per segment), so the lexical recipe core pins and
checks (analyzer, k1, b, the canary of scores) would no longer be what scores the query.
``docs/qdrant-advanced.md`` says more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.hybrid import LexicalStore, SQLiteLexical
from ctxemb_core.hybrid.pair import LexicalPlace

__all__ = ["LEXICAL_FOLDER", "MARK_KEY", "beside", "place_for"]

#: The folder of a local-mode store that holds the lexical sides, one subfolder per collection.
LEXICAL_FOLDER = "ctxemb-lexical"
#: The collection metadata key of its lexical side's token (not a stamp key: a restamp keeps
#: it).
MARK_KEY = "ctxemb_lexical"


def beside(client: QdrantClient, name: str) -> Path:
    """Where a local-mode store keeps the lexical side of collection ``name``; a server's or an
    in-memory store's is refused (its folder is not this machine's, or there is none)."""
    from ctxemb_qdrant._store import local_engine

    local = local_engine(client)
    if local is None or not local.persistent:
        raise InvalidInputError(
            "a hybrid index on a Qdrant server or in memory keeps its lexical side in a folder "
            "of this machine: give lexical_path (--lexical-path)"
        )
    return Path(local.location).resolve() / LEXICAL_FOLDER / name


def _metadata(dense: Any) -> dict[str, Any]:
    info = dense.driver._lookup()
    return dict(info.config.metadata or {}) if info is not None else {}


def place_for(dense: Any, folder: Path) -> LexicalPlace:
    """The lexical side of an opened collection: SQLite in ``folder``, owned by the collection's
    identity, its token recorded in the collection's metadata."""
    from ctxemb_qdrant._store import calling

    def mark() -> str | None:
        value = _metadata(dense).get(MARK_KEY)
        return value if isinstance(value, str) else None

    def set_mark(token: str) -> None:
        with calling(dense.client, f"recording the lexical side of {dense.name!r}"):
            dense.client.update_collection(dense.name, metadata={MARK_KEY: token})

    identity = dense.index.verified_head.identity
    return LexicalPlace(
        LexicalStore(SQLiteLexical(folder, dense.name)),
        owner=f"Qdrant collection {dense.name!r} (identity {identity})",
        remedy=f"Give collection {dense.name!r} a lexical folder of its own (lexical_path, "
        f"--lexical-path); if the collection it belongs to is gone, remove {folder} first.",
        folder=folder,
        mark=mark,
        set_mark=set_mark,
    )
