"""What of a ``ChromaDocumentStore`` is Chroma's own: its client, the metadata Chroma keeps, and
the hybrid index beside its collection. The guard is :class:`._index.IndexGuard`'s, on
``ctxemb_chroma``'s :class:`~ctxemb_chroma.ChromaDriver`: same stamp, same checks as
``ctxemb_chroma.open_collection``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from haystack import Document
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_chroma import ChromaDriver, check_metadatas, connect, open_hybrid
from ctxemb_core import EmbeddingContract
from ctxemb_core.remedy import DEFAULT_TERMS
from ctxemb_haystack._binding import made_empty
from ctxemb_haystack._writes import Row

logger = logging.getLogger(__name__)

# Metadata values Chroma stores (lists of one of them, non-empty, too); others are left out.
_SCALARS = (str, int, float, bool)


class ChromaBinding:
    """The collection behind a ``ChromaDocumentStore`` (see :class:`._binding.Binding`)."""

    #: The Chroma adapter's words (the default ones), with this framework's way to adopt.
    terms = DEFAULT_TERMS.adopting_in(
        "in Haystack ContractRetriever(..., adopt=True) or ContractDocumentWriter(..., adopt=True)"
    )

    def __init__(self, store: ChromaDocumentStore) -> None:
        self.store = store
        self._where = store.to_dict()["init_parameters"]
        self.name: str = self._where["collection_name"]
        self._client: Any = None
        self._driver: ChromaDriver | None = None

    def client(self) -> Any:
        """The store's own client once it has one; until then a client of its database, opened
        as the store opens its own and shared with it (see :meth:`opened`)."""
        own = getattr(self.store, "_client", None)
        if own is not None and getattr(self.store, "_collection", None) is not None:
            return own
        if self._client is None:
            p = self._where
            settings = p.get("client_settings") or None
            if p.get("host") and p.get("port") is not None:
                self._client = connect(host=p["host"], port=p["port"], settings=settings)
            elif p.get("persist_path") is None:
                self._client = connect(memory=True, settings=settings)
            else:
                self._client = connect(p["persist_path"], settings=settings)
        return self._client

    def driver(self) -> ChromaDriver:
        if self._driver is None:
            self._driver = ChromaDriver(self.client(), self.name)
        return self._driver

    def opened(self) -> None:
        """Hand this client and the (existing) collection to a store that has none yet.

        A ``ChromaDocumentStore`` makes its client on first use from its ``persist_path`` as
        spelled; if this guard joined a system another client opened on the folder under
        another spelling, the store's would be a second system on one folder, and its queries
        would miss the guard's later writes. The store's own first-use code creates the
        collection unstamped when it is missing, so the hand-over waits until it exists.
        """
        store = self.store
        if getattr(store, "_collection", True) is not None or self._client is None:
            return  # it has its own (or is of a version without these attributes)
        with contextlib.suppress(Exception):  # then the store opens its own, as without ctxemb
            collection = self._client.get_collection(
                self.name, embedding_function=store._embedding_func
            )
            store._client, store._collection = self._client, collection

    def metadata(self, document: Document) -> dict[str, Any]:
        """The metadata Chroma can hold; other values are left out with a warning, as
        ``ChromaDocumentStore`` does."""
        kept: dict[str, Any] = {}
        for key, value in document.meta.items():
            if isinstance(value, _SCALARS) or (
                isinstance(value, list)
                and value
                and type(value[0]) in _SCALARS
                and all(type(v) is type(value[0]) for v in value)
            ):
                kept[key] = value
            else:
                logger.warning(
                    "document %s: metadata %r of type %s cannot be stored in Chroma and is "
                    "left out",
                    document.id,
                    key,
                    type(value).__name__,
                )
        return kept

    def check_batch(self, contract: EmbeddingContract, rows: list[Row]) -> None:
        check_metadatas([i for i, _, _ in rows], [m for _, _, m in rows])

    def made_empty(self) -> str:
        how = f"chromadb's client.delete_collection({self.name!r}) or use another collection_name"
        return made_empty("collection", "ChromaDocumentStore", f"Delete it with {how}")

    def open_hybrid(self, contract: EmbeddingContract, **options: Any) -> Any:
        return open_hybrid(self.client(), self.name, contract, **options)
