"""What of a ``QdrantDocumentStore`` is Qdrant's own: its client (local mode's folder or memory, a
server's URL), the collection's name and width, what a payload can hold, and which records a
filter beyond metadata equality selects.

The guard is :class:`._index.IndexGuard`'s, on ``ctxemb_qdrant``'s
:class:`~ctxemb_qdrant.QdrantDriver`: same stamp, same checks as
``ctxemb_qdrant.open_collection``. The collection a ctxemb pipeline writes is created stamped
by the driver, with the client then handed to the store: the store's own first use would
otherwise create the collection unstamped (its ``_set_up_collection``), and in local mode a
second client on one folder is refused by Qdrant's folder lock.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from haystack import Document
from haystack.utils.filters import document_matches_filter
from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

import ctxemb_qdrant
from ctxemb_core import EmbeddingContract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import GuardedIndex
from ctxemb_core.remedy import StoreTerms
from ctxemb_core.validate import check_json_metadata
from ctxemb_haystack._binding import made_empty
from ctxemb_haystack._writes import Row

logger = logging.getLogger(__name__)

#: ``ctxemb_qdrant``'s words for an error's advice, with this framework's way to adopt.
_ADOPT = "in Haystack ContractRetriever(..., adopt=True) or ContractDocumentWriter(..., adopt=True)"
TERMS = StoreTerms.of(
    "qdrant", "--qdrant-path or --qdrant-url", records="points", frameworks=_ADOPT
)

# Records read at once when a filter beyond metadata equality is tested here.
_PAGE = 1000


class QdrantBinding:
    """The collection behind a ``QdrantDocumentStore`` (see :class:`._binding.Binding`)."""

    terms = TERMS

    def __init__(self, store: QdrantDocumentStore) -> None:
        self.store = store
        self.name: str = store.index
        self._client: Any = None
        self._driver: Any = None

    def client(self) -> Any:
        """The store's own client once it has one; until then one made as the store makes its
        own (a folder through ``ctxemb_qdrant.connect``, which joins the client this process
        holds on it), handed to the store once the collection exists (:meth:`opened`)."""
        own = getattr(self.store, "_client", None)
        if own is not None:
            return own
        if self._client is None:
            store = self.store
            if store.path is not None:
                self._client = ctxemb_qdrant.connect(path=store.path)
            else:
                self._client = ctxemb_qdrant.connect(**_server(store))
        return self._client

    def driver(self) -> Any:
        client = self.client()
        if self._driver is None or self._driver.client is not client:
            self._driver = ctxemb_qdrant.QdrantDriver(client, self.name)
        return self._driver

    def opened(self) -> None:
        """Hand this client to a store that has none yet: its first use then neither makes a
        second client (refused on a local folder) nor sets the collection up itself."""
        if getattr(self.store, "_client", True) is None and self._client is not None:
            self.store._client = self._client

    def metadata(self, document: Document) -> dict[str, Any]:
        if document.blob is not None:
            logger.warning("document %s: its blob is not stored by ctxemb", document.id)
        if document.sparse_embedding is not None:
            logger.warning("document %s: its sparse embedding is not stored by ctxemb", document.id)
        return dict(document.meta)

    def check_batch(self, contract: EmbeddingContract, rows: list[Row]) -> None:
        """What the collection could not hold, refused before it is created."""
        store = self.store
        if store.use_sparse_embeddings:
            raise InvalidInputError(
                "QdrantDocumentStore(use_sparse_embeddings=True): ctxemb keeps one dense vector "
                "per record under its contract; for keyword search beside it use "
                "ContractDocumentWriter(hybrid=True) and ContractLexicalRetriever"
            )
        if store.embedding_dim != contract.output_dim:
            raise InvalidInputError(
                f"QdrantDocumentStore(embedding_dim={store.embedding_dim}) but the contract's "
                f"vectors are {contract.output_dim} wide ({contract.describe()}): build the "
                f"store with embedding_dim={contract.output_dim}"
            )
        ids, metas = [i for i, _, _ in rows], [m for _, _, m in rows]
        check_json_metadata(ids, metas, "in a Qdrant payload", what="document")
        check = getattr(self.driver(), "check_batch", None)
        if check is not None:
            check([i for i, _, _ in rows], [t for _, t, _ in rows], [m for _, _, m in rows])

    def select(self, index: GuardedIndex, filters: dict[str, Any]) -> list[str]:
        """The ids of the records a Haystack filter beyond metadata equality selects, tested
        here on each record's content and meta (the store's own ``filter_documents`` reads
        its own payload layout, not the one ctxemb writes)."""
        ids: list[str] = []
        offset = 0
        while True:
            page = index.page(offset, _PAGE, include=("text", "metadata"))
            for r in page:
                document = Document(id=r.id, content=r.text, meta=dict(r.metadata or {}))
                if document_matches_filter(filters, document):
                    ids.append(r.id)
            if len(page) < _PAGE:
                return ids
            offset += _PAGE

    def made_empty(self) -> str:
        how = f"qdrant-client's client.delete_collection({self.name!r}) or use another index name"
        return made_empty("collection", "QdrantDocumentStore", f"Delete it with {how}")

    def open_hybrid(self, contract: EmbeddingContract, **options: Any) -> Any:
        return ctxemb_qdrant.open_hybrid(self.client(), self.name, contract, **options)

    def close(self) -> None:
        if self._client is not None and getattr(self.store, "_client", None) is not self._client:
            with contextlib.suppress(Exception):
                self._client.close()
        self._client = self._driver = None


def _server(store: QdrantDocumentStore) -> dict[str, Any]:
    """How the store reaches Qdrant when it is not a folder: ``location`` (``":memory:"`` or a
    URL), ``url`` or ``host``/``port`` (default: a server on localhost)."""
    if store.location == ":memory:":
        return {"memory": True}
    url = store.url or store.location
    if url is None:
        scheme = "https" if store.https else "http"
        url = f"{scheme}://{store.host or 'localhost'}:{store.port}"
    api_key = store.api_key.resolve_value() if store.api_key else None
    return {"url": url, "api_key": api_key} if api_key else {"url": url}
