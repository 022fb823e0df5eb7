"""A hybrid index over a guarded Chroma collection: its lexical side in SQLite beside it."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._collection import open_collection
from ctxemb_chroma._store import check_name, kept_metadata, translated
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.hybrid import LexicalStore, SQLiteLexical
from ctxemb_core.hybrid.pair import HybridIndex, LexicalPlace, open_paired

#: The folder of an embedded store that holds the lexical sides, one subfolder per collection.
LEXICAL_FOLDER = "ctxemb-lexical"
#: The collection metadata key that records its lexical side's token (not a stamp key: a
#: restamp keeps it, and it does not change the collection's identity).
MARK_KEY = "ctxemb_lexical"


def lexical_folder(client: ClientAPI, name: str, lexical_path: Any = None) -> Path:
    """Where the lexical side of collection ``name`` lives: ``lexical_path``, or for an embedded
    store ``<its path>/ctxemb-lexical/<name>``.

    Raises:
        InvalidInputError: a Chroma server and no ``lexical_path`` (a server's folder is not
            this machine's to write in).
    """
    check_name(name)
    if lexical_path is not None:
        return Path(os.fspath(lexical_path))
    settings = client.get_settings()
    if not settings.is_persistent or not settings.persist_directory:
        raise InvalidInputError(
            "a hybrid index on a Chroma server keeps its lexical side in a folder of this "
            "machine: give lexical_path (--lexical-path)"
        )
    return Path(settings.persist_directory) / LEXICAL_FOLDER / name


def place_for(dense: Any, folder: Path) -> LexicalPlace:
    """The lexical side of an opened collection: SQLite in ``folder``, owned by the collection's
    id, its token recorded in the collection's metadata."""

    def mark() -> str | None:
        value = (dense.stored().metadata or {}).get(MARK_KEY)
        return value if isinstance(value, str) else None

    def set_mark(token: str) -> None:
        raw = dense.stored()
        with translated(f"recording the lexical side of {dense.name!r}"):
            raw.modify(metadata={**kept_metadata(raw), MARK_KEY: token})

    return LexicalPlace(
        LexicalStore(SQLiteLexical(folder, dense.name)),
        owner=f"Chroma collection {dense.name!r} (id {dense.stored().id})",
        remedy=f"Give collection {dense.name!r} a lexical folder of its own (lexical_path, "
        f"--lexical-path); if the collection it belongs to is gone, remove {folder} first.",
        folder=folder,
        mark=mark,
        set_mark=set_mark,
    )


def open_hybrid(
    client: ClientAPI,
    name: str,
    contract: EmbeddingContract | Embedder,
    *,
    lexical_path: str | os.PathLike[str] | None = None,
    **options: Any,
) -> HybridIndex:
    """Open (or create) collection ``name`` under ``contract`` and its lexical side (SQLite in
    :func:`lexical_folder`).

    ``options``: the hybrid ones (``lexical`` and ``fusion``: the caller's recipe, ``None``
    the stamp's, for a new index BM25 k1 1.5, b 0.75, English stemmer and stop words, RRF
    k = 60; ``create``, ``refresh``, ``rebuild``, ``progress``: see
    :func:`ctxemb_core.hybrid.pair.open_hybrid`), the others :func:`open_collection`'s.

    Raises:
        ContractMismatchError, HybridMismatchError, OutOfStepError, EncoderDriftError,
            ForeignLexicalError: see :func:`ctxemb_core.hybrid.pair.open_hybrid`.
    """
    folder = lexical_folder(client, name, lexical_path)
    return open_paired(
        partial(open_collection, client, name, contract),
        lambda dense: place_for(dense, folder),
        **options,
    )
