"""The document stores a guarded pipeline writes to and reads from, each checked its own way.

``InMemoryDocumentStore`` keeps no collection metadata: each document carries its contract's
fingerprint (``meta["ctxemb_fingerprint"]``) and every result is checked on its way out.
Every other store is a driver under core's guarded index (:class:`._index.IndexGuard`), reached
through its binding (:data:`BINDINGS`): ``ChromaDocumentStore`` keeps the collection stamp
``ctxemb_chroma`` writes, ``PgvectorDocumentStore`` the stamp row ``ctxemb_pgvector`` writes beside
its table, ``QdrantDocumentStore`` the collection metadata ``ctxemb_qdrant`` writes, so an index
written through any adapter is read by the others under the same contract.
What is checked and how comes from ``ctxemb_core``; this module translates Haystack's documents
and calls.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import TYPE_CHECKING, Any

from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy

from ctxemb_core.documents import FINGERPRINT_KEY, check_documents, recall, store_sample
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import check_embedded, check_query_vector
from ctxemb_haystack._writes import DuplicateDocumentsError, batch_of, contract_of, unique

if TYPE_CHECKING:
    from ctxemb_haystack._index import IndexGuard

logger = logging.getLogger(__name__)


def _check(documents: list[Document], contract: Any) -> None:
    """``check_documents`` over Haystack documents, its advice in Haystack's calls."""
    check_documents(
        [d.meta for d in documents], contract, ids=[d.id for d in documents], rewrite=_REWRITE
    )


#: How a Haystack user writes again the documents written around ctxemb (a refusal's advice).
_REWRITE = (
    "\n    store.delete_documents([d.id for d in store.filter_documents() if "
    f"{FINGERPRINT_KEY!r} not in d.meta])\nthen ContractDocumentEmbedder -> ContractDocumentWriter"
)

__all__ = ["DuplicateDocumentsError", "MemoryGuard", "contract_of", "guard_for", "unique"]


#: The stores ctxemb keeps as drivers: ``(integration, store class, module, binding class)``;
#: the binding reads the store's own parameters (:class:`._binding.Binding`). The next store is
#: one row here and its binding's module.
BINDINGS = (
    ("chroma", "ChromaDocumentStore", "ctxemb_haystack._chroma", "ChromaBinding"),
    ("pgvector", "PgvectorDocumentStore", "ctxemb_haystack._pgvector", "PgvectorBinding"),
    ("qdrant", "QdrantDocumentStore", "ctxemb_haystack._qdrant", "QdrantBinding"),
)


def guard_for(store: Any, sample: int, adopt: bool = False) -> MemoryGuard | IndexGuard:
    """The guard of a store; a store ctxemb cannot check is refused by name."""
    if isinstance(store, InMemoryDocumentStore):
        if adopt:
            raise InvalidInputError(
                "adopt=True stamps an unstamped Chroma or Qdrant collection or pgvector table; an "
                "InMemoryDocumentStore "
                "has no collection stamp (each document carries its fingerprint): write its "
                "documents again through ContractDocumentEmbedder and ContractDocumentWriter"
            )
        return MemoryGuard(store)
    for integration, name, module, binding in BINDINGS:
        if _instance_of(store, integration, name):
            from ctxemb_haystack._index import IndexGuard

            return IndexGuard(
                getattr(importlib.import_module(module), binding)(store), sample, adopt
            )
    raise TypeError(
        "ctxemb guards InMemoryDocumentStore and ChromaDocumentStore (chroma-haystack), and "
        "PgvectorDocumentStore (pgvector-haystack) and QdrantDocumentStore (qdrant-haystack); "
        f"got {type(store).__name__}"
    )


def _instance_of(store: Any, integration: str, name: str) -> bool:
    """Whether ``store`` is a ``name`` of the ``<integration>-haystack`` package.

    The class is looked up only where it is imported already: a store of it was made after its
    module was imported, and importing chroma-haystack (chromadb, ~0.7 s) to find that a
    ``PgvectorDocumentStore`` is no ``ChromaDocumentStore`` slows every pgvector pipeline's start.
    """
    module = sys.modules.get(f"haystack_integrations.document_stores.{integration}")
    cls = getattr(module, name, None)
    return isinstance(cls, type) and isinstance(store, cls)


class MemoryGuard:
    """Documents of one contract in an ``InMemoryDocumentStore``, by their fingerprints."""

    def __init__(self, store: InMemoryDocumentStore) -> None:
        self.store = store

    def write(self, documents: list[Document], policy: DuplicatePolicy) -> int:
        documents, fingerprint = batch_of(documents, policy)
        if fingerprint is None:
            return 0
        ids = [d.id for d in documents]
        # The batch must be this process's contract's (its vectors are checked against it) ...
        contract = contract_of(fingerprint, None)
        check_embedded([d.embedding for d in documents], contract, ids)
        # ... and the store's: any few stored documents stand for it.
        sample = self.sample()
        _check(sample, contract)
        stored = self.store.storage
        if policy in (DuplicatePolicy.NONE, DuplicatePolicy.FAIL):
            present = tuple(i for i in ids if i in stored)
            if present:
                raise DuplicateDocumentsError(present)
        return self.store.write_documents(documents, policy)

    def sample(self) -> list[Document]:
        """Any few stored documents: they stand for the store, as every write is checked."""
        return store_sample(self.store.storage.values())

    def retrieve(
        self, retriever: Any, query_embedding: list[float], fingerprint: str, **kwargs: Any
    ) -> list[Document]:
        # The store first (the search itself may fail on another width), then every result.
        sample = self.sample()
        _check(sample, fingerprint)
        # Its width is known when this process built the contract (a ContractTextEmbedder did).
        contract = recall(fingerprint)
        width = contract.output_dim if contract is not None else None
        query_embedding = check_query_vector(query_embedding, width, contract=contract)
        # The score as the store computes it (dot product or cosine), never rescaled.
        try:
            found = retriever.run(query_embedding=query_embedding, scale_score=False, **kwargs)
        except Exception:
            # Another width outside the sample fails the search: name the contract, not numpy.
            every = list(self.store.storage.values())
            _check(every, fingerprint)
            raise
        documents: list[Document] = found["documents"]
        _check(documents, fingerprint)
        return documents
