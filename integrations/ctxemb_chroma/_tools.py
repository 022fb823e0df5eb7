"""Chroma's own in core's :class:`~ctxemb_core.store_tools.StoreTools`: ``where_document``,
``verify`` of a raw collection, the lexical side beside the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._driver import ChromaDriver
from ctxemb_chroma._embedded import embedded_folder
from ctxemb_chroma._store import check_name, kept_metadata, translated
from ctxemb_core.hybrid.pair import MARK_KEY, LexicalPlace, folder_place, lexical_home
from ctxemb_core.index import Capabilities
from ctxemb_core.store_tools import StoreTools

__all__ = ["TOOLS"]


class _Given(ChromaDriver):
    """The driver of a raw collection as the caller holds it (through its own ``_client``)."""

    def __init__(self, raw: Collection) -> None:
        self.client = raw._client  # type: ignore[assignment]  # the collection's ServerAPI
        self._name, self.embedder, self._raw = raw.name, None, raw
        self._marks = None  # a verify lists every id: no mark is needed
        self.capabilities = Capabilities(filters=True)

    def _lookup(self) -> Collection:
        return self._raw


def beside(client: ClientAPI, name: str) -> Path:
    """Where an embedded store keeps collection ``name``'s lexical side (core's ``lexical_home``;
    a server's: refused)."""
    return lexical_home(embedded_folder(client), name, "a Chroma server")


def place_for(dense: Any, folder: Path) -> LexicalPlace:
    """An opened collection's lexical side in ``folder`` (core's ``folder_place``)."""

    def record(token: str) -> None:
        raw = dense.stored()
        with translated(f"recording the lexical side of {dense.name!r}"):
            raw.modify(metadata={**kept_metadata(raw.metadata), MARK_KEY: token})

    owner = f"Chroma collection {dense.name!r} (id {dense.stored().id})"
    return folder_place(folder, dense.name, owner, lambda: dense.stored().metadata, record)


#: Chroma's words are the default ones: the errors are left for an outer adapter to word.
TOOLS = StoreTools(
    facade=GuardedCollection,
    new_driver=ChromaDriver,  # whose function Chroma keeps
    held=(Collection, _Given),  # a raw collection, verified as it is
    translated=translated,
    query_options=("where_document",),
    check_name=check_name,
    lexical=(beside, place_for),
    catalog="ctxemb_chroma._aliases:catalog",  # by name: that module opens its hybrid sides here
)
