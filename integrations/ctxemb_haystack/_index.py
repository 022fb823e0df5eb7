"""One guard for every Haystack document store that ctxemb stores as a driver.

:class:`IndexGuard` writes and reads a ``ChromaDocumentStore``, a ``PgvectorDocumentStore`` (and
the next store's) through :class:`~ctxemb_core.index.GuardedIndex` opened on the store's
:class:`~ctxemb_core.index.StoreDriver`: the stamp, the open-time checks, the all-or-nothing
write and the query checks are core's, the same for every store. What is a store's own lives
in its :class:`~._binding.Binding` (:mod:`._chroma`, :mod:`._pgvector`): how to reach the index
behind the Haystack store (its connection parameters), which metadata the store can keep, and
the hybrid index beside it. Adding a store is adding its binding (and one line in
:func:`._stores.guard_for`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from haystack.document_stores.types.filter_policy import apply_filter_policy

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.documents import check_fingerprint, recall
from ctxemb_core.errors import ExistingIdsError, MissingStampError, worded
from ctxemb_core.guard import check_embedded, check_query_vector
from ctxemb_core.index import GuardedIndex, StoreDriver
from ctxemb_core.validate import check_records
from ctxemb_haystack._binding import Binding
from ctxemb_haystack._search import search
from ctxemb_haystack._writes import (
    DuplicateDocumentsError,
    batch_of,
    content_of,
    contract_of,
)


def setting(retriever: Any, name: str) -> Any:
    """A retriever's ``document_store``, ``top_k``, ``filters`` or ``filter_policy``: a public
    attribute of Haystack's own retrievers and Chroma's and pgvector's, a private one of
    ``QdrantEmbeddingRetriever``'s."""
    return getattr(retriever, name) if hasattr(retriever, name) else getattr(retriever, f"_{name}")


class IndexGuard:
    """The index behind a Haystack document store, under ctxemb's guard whatever the store.

    Args:
        binding: the store's own part (see :class:`~._binding.Binding`).
        sample: stored records re-embedded when the index is opened.
        adopt: stamp an unstamped index whose records prove the contract.
    """

    def __init__(self, binding: Binding, sample: int, adopt: bool = False) -> None:
        self.binding = binding
        self.name = binding.name
        self.sample = sample
        self.adopt = adopt
        self._driver: StoreDriver | None = None
        self._opened: dict[str, GuardedIndex] = {}  # by contract fingerprint

    @contextlib.contextmanager
    def worded(self) -> Iterator[None]:
        """Errors raised inside give their advice in the store adapter's words."""
        with worded(self.binding.terms):
            yield

    def driver(self) -> StoreDriver:
        driver = self.binding.driver()
        if driver is not self._driver:  # a new connection: what was opened is opened again
            self._driver, self._opened = driver, {}
        return driver

    def opened(self, contract: EmbeddingContract, create: bool) -> GuardedIndex:
        """The index opened under ``contract``: verified once; each of its calls then re-reads
        the head and verifies it again if it changed."""
        driver = self.driver()
        index = self._opened.get(contract.fingerprint)
        if index is None:
            index = GuardedIndex.open(
                driver, Embedder(contract), create=create, adopt=self.adopt, sample=self.sample
            )
            self._opened[contract.fingerprint] = index
            self.binding.opened()
        return index

    def stamped(self) -> EmbeddingContract | None:
        """The contract the index's stamp holds (read, not verified), or ``None``."""
        read = self.driver().read_stamp()
        metadata = read.metadata if read is not None else None
        return (
            IndexStamp.from_metadata(metadata).contract if IndexStamp.is_stamped(metadata) else None
        )

    def caller(self, fingerprint: str) -> EmbeddingContract:
        """The query's contract: built in this process, or else it must be the stamp's."""
        contract = recall(fingerprint)
        if contract is not None:
            return contract
        read = self.driver().read_stamp()
        # No stamp, or a damaged one, is raised here as for any caller.
        stamp = IndexStamp.from_metadata(read.metadata if read is not None else None)
        return check_fingerprint(fingerprint, stamp.contract)

    def write(self, documents: list[Document], policy: DuplicatePolicy) -> int:
        with self.worded():
            return self._write(documents, policy)

    def _write(self, documents: list[Document], policy: DuplicatePolicy) -> int:
        documents, fingerprint = batch_of(documents, policy)
        if fingerprint is None:
            return 0
        ids = [d.id for d in documents]
        stamped = self.stamped()
        if stamped is not None:
            check_fingerprint(fingerprint, stamped)
        contract = contract_of(fingerprint, stamped)
        # The whole batch is checked before the index is created (and stamped).
        texts = [content_of(d) for d in documents]
        metas = [self.binding.metadata(d) for d in documents]
        check_records(ids, texts, metas)
        self.binding.check_batch(contract, list(zip(ids, texts, metas, strict=True)))
        check_embedded([d.embedding for d in documents], contract, ids)
        try:
            index = self.opened(contract, create=True)
            index.current()  # an index opened before: as it is now
        except MissingStampError as exc:
            driver = self.driver()
            if driver.head() is None or driver.count():
                raise
            # The usual cause: a call of the Haystack store (count_documents, …) made it first.
            raise MissingStampError(f"{exc} {self.binding.made_empty()}") from None
        rows = list(zip(documents, texts, metas, strict=True))
        if policy is DuplicatePolicy.SKIP:
            present = {r.id for r in index.get(ids, include=())}
            rows = [r for r in rows if r[0].id not in present]
        if not rows:
            return 0
        try:
            index.add_embedded(
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
        self,
        retriever: Any,
        query_embedding: list[float],
        fingerprint: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
    ) -> list[Document]:
        """The documents nearest ``query_embedding``, searched by the guarded index in the
        contract's distance; the retriever's ``top_k``, ``filters`` and ``filter_policy``."""
        with self.worded():
            contract = self.caller(fingerprint)
            vector = check_query_vector(query_embedding, contract.output_dim, contract=contract)
            if contract.fingerprint not in self._opened and self.driver().head() is None:
                return []  # nothing indexed yet: nothing to return, and nothing is created
            index = self.opened(contract, create=False)
            policy, given = setting(retriever, "filter_policy"), setting(retriever, "filters")
            filters = apply_filter_policy(policy, given, filters)
            store = setting(retriever, "document_store")
            k = top_k or setting(retriever, "top_k")
            select = getattr(self.binding, "select", None)
            return search(index, store, vector, fingerprint, k, filters, select)
