"""How core's tools reach a Chroma collection: :func:`verify`, :func:`detect` and
:func:`restamp` are :class:`ctxemb_core.store_tools.StoreTools`' over a :class:`ChromaDriver`.

A re-stamp rewrites the stamp and Chroma's persisted embedding function in one ``modify`` call
(:meth:`ChromaDriver.write_stamp`), so a raw ``get_collection`` in a process that imported
``ctxemb_chroma`` embeds queries under the new query side; it works on any stamped collection,
whichever adapter wrote it (``ctxemb_chroma``, Haystack's ``ChromaDocumentStore``, LangChain's
``Chroma``). ``verify`` takes a :class:`GuardedCollection` or a raw Chroma collection.
"""

from __future__ import annotations

from typing import Any

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._driver import ChromaDriver
from ctxemb_chroma._store import check_client, check_name, stored_collection, translated
from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import Capabilities
from ctxemb_core.stamp_guard import RestampReport
from ctxemb_core.store_tools import StoreTools

__all__ = ["TOOLS", "detect", "restamp", "verify"]


class _Given(ChromaDriver):
    """The driver of one raw collection object, as the caller holds it (its client is the
    collection's own: a raw collection does not hold the ``ClientAPI`` it came from)."""

    def __init__(self, raw: Collection) -> None:
        self.client = raw._client  # type: ignore[assignment]  # the collection's ServerAPI
        self._name, self.embedder, self._raw = raw.name, None, raw
        self._seen = raw
        self._marks = None  # a verify lists every id: no mark is needed
        self.capabilities = Capabilities(filters=True)

    def _stored(self) -> Collection:
        self._seen = self._raw
        return self._raw


def _held(collection: Any) -> ChromaDriver:
    if isinstance(collection, GuardedCollection):
        return ChromaDriver(collection.client, collection.name)
    if isinstance(collection, Collection):
        return _Given(collection)
    raise InvalidInputError(
        f"collection must be a Chroma collection, got {type(collection).__name__}"
    )


def _existing(client: ClientAPI, name: str, *, embedder: Embedder | None = None) -> ChromaDriver:
    check_client(client)
    check_name(name)
    stored_collection(client, name)  # a missing one named with a hint at a near one
    return ChromaDriver(client, name, embedder=embedder)  # whose function Chroma keeps


#: Chroma's words are the default ones: the errors are left for an outer adapter to word.
TOOLS = StoreTools(driver=_existing, driver_of=_held, translated=translated)
verify = TOOLS.verify
detect = TOOLS.detect


def restamp(
    client: ClientAPI,
    collection_name: str,
    contract: EmbeddingContract | Embedder,
    *,
    embedder: Embedder | None = None,
) -> RestampReport:
    """:meth:`StoreTools.restamp <ctxemb_core.store_tools.StoreTools.restamp>` of a collection,
    under the parameter names this function has always had."""
    return TOOLS.restamp(client, collection_name, contract, embedder=embedder)
