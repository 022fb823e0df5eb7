"""A ``ChromaDocumentStore`` through the ``ctxemb_chroma`` guard: same stamp, same checks."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_chroma import (
    GuardedCollection,
    check_metadatas,
    connect,
    open_collection,
    stored_or_none,
)
from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.documents import batch_fingerprint, check_fingerprint, recall
from ctxemb_core.errors import ExistingIdsError, MissingStampError
from ctxemb_core.guard import check_embedded, check_query_vector, similarity
from ctxemb_core.validate import check_records
from ctxemb_haystack._writes import DuplicateDocumentsError, content_of, contract_of, unique

logger = logging.getLogger(__name__)

# Metadata values Chroma stores (lists of one of them, non-empty, too); others are left out.
_SCALARS = (str, int, float, bool)


class ChromaGuard:
    """The collection behind a ``ChromaDocumentStore``, opened through ``ctxemb_chroma``."""

    def __init__(self, store: ChromaDocumentStore, sample: int, adopt: bool = False) -> None:
        self.store = store
        self.sample = sample
        self.adopt = adopt  # stamp an unstamped collection whose records prove the contract
        params = store.to_dict()["init_parameters"]
        self.name: str = params["collection_name"]
        self._where = params
        self._client: Any = None
        self._opened: dict[str, GuardedCollection] = {}  # by contract fingerprint

    def client(self) -> Any:
        """The store's own client once it has one; until then a client of its database, opened
        as the store opens its own and shared with it (see :meth:`share`)."""
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

    def share(self) -> None:
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

    def opened(self, contract: EmbeddingContract, create: bool) -> GuardedCollection:
        """The collection opened under ``contract`` (verified once; every later call re-reads
        and re-verifies it if it changed)."""
        guarded = self._opened.get(contract.fingerprint)
        if guarded is None:
            guarded = open_collection(
                self.client(),
                self.name,
                Embedder(contract),
                create=create,
                adopt=self.adopt,
                sample=self.sample,
            )
            self._opened[contract.fingerprint] = guarded
            self.share()
        guarded.current()
        return guarded

    def stamped(self) -> EmbeddingContract | None:
        raw = stored_or_none(self.client(), self.name)
        if raw is None or not IndexStamp.is_stamped(raw.metadata):
            return None
        return IndexStamp.from_metadata(raw.metadata).contract

    def caller(self, fingerprint: str) -> EmbeddingContract:
        """The query's contract: built in this process, or else it must be the stamp's."""
        contract = recall(fingerprint)
        if contract is not None:
            return contract
        raw = stored_or_none(self.client(), self.name)
        # No stamp, or a damaged one, is raised here as for any caller.
        stamp = IndexStamp.from_metadata(raw.metadata if raw is not None else None)
        return check_fingerprint(fingerprint, stamp.contract)

    def write(self, documents: list[Document], policy: DuplicatePolicy) -> int:
        documents = unique(documents, policy)
        ids = [d.id for d in documents]
        fingerprint = batch_fingerprint([d.meta for d in documents], ids)
        if fingerprint is None:
            return 0
        stamped = self.stamped()
        if stamped is not None:
            check_fingerprint(fingerprint, stamped)
        contract = contract_of(fingerprint, stamped)
        # The whole batch is checked before the collection is created (and stamped).
        texts = [content_of(d) for d in documents]
        metas = [_storable_meta(d) for d in documents]
        check_records(ids, texts, metas)
        check_metadatas(ids, metas)
        check_embedded([d.embedding for d in documents], contract, ids)
        try:
            guarded = self.opened(contract, create=True)
        except MissingStampError as exc:
            raw = stored_or_none(self.client(), self.name)
            if raw is None or raw.count():
                raise
            # The usual cause: a ChromaDocumentStore call (count_documents, …) created it first.
            raise MissingStampError(
                f"{exc} The collection is empty: the ChromaDocumentStore created it before the "
                "first ContractDocumentWriter write (any store call does). Delete it with "
                f"chromadb's client.delete_collection({self.name!r}) or use another "
                "collection_name, and let ContractDocumentWriter create it stamped."
            ) from None
        rows = list(zip(documents, texts, metas, strict=True))
        if policy is DuplicatePolicy.SKIP:
            present = set(guarded.get(ids=ids, include=[])["ids"])
            rows = [r for r in rows if r[0].id not in present]
        if not rows:
            return 0
        try:
            guarded.add_embedded(
                [d.id for d, _, _ in rows],
                [d.embedding for d, _, _ in rows],
                [t for _, t, _ in rows],
                [m for _, _, m in rows],
                fingerprint=fingerprint,
                upsert=policy is DuplicatePolicy.OVERWRITE,
            )
        except ExistingIdsError as exc:
            raise DuplicateDocumentsError(exc.ids) from None
        return len(rows)

    def retrieve(
        self, retriever: Any, query_embedding: list[float], fingerprint: str, **kwargs: Any
    ) -> list[Document]:
        contract = self.caller(fingerprint)
        query_embedding = check_query_vector(
            query_embedding, contract.output_dim, contract=contract
        )
        if (
            contract.fingerprint not in self._opened
            and stored_or_none(self.client(), self.name) is None
        ):
            return []  # nothing indexed yet: nothing to return, and nothing is created
        guarded = self.opened(contract, create=False)
        found = retriever.run(query_embedding=query_embedding, **kwargs)["documents"]
        space = (guarded.raw.configuration_json or {}).get("hnsw", {}).get("space", "l2")
        scores = similarity([d.score for d in found], space, contract)
        return [dataclasses.replace(d, score=float(s)) for d, s in zip(found, scores, strict=True)]


def _storable_meta(document: Document) -> dict[str, Any]:
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
                "document %s: metadata %r of type %s cannot be stored in Chroma and is left out",
                document.id,
                key,
                type(value).__name__,
            )
    return kept
