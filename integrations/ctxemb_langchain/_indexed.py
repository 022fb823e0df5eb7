"""A LangChain ``VectorStore`` on ctxemb's guarded index, whatever the store beneath.

:class:`IndexedStore` is every LangChain method of a vector store over one
:class:`~ctxemb_core.index.GuardedIndex`, opened on a store's
:class:`~ctxemb_core.index.StoreDriver`: the stamp, the open-time checks, the all-or-nothing
write, the query checks and the contract's distance are core's, the same for every store. A store
brings only what is its own: how to build its driver from the arguments its users give (a DSN
and a table for :class:`~ctxemb_langchain.ContractPGVector`), the words of its adapter for an
error's advice, and its hybrid index (:meth:`IndexedStore._open_hybrid`).

The write path (``add_texts``, ``add_documents``) is :mod:`._writer`'s, which ``ContractChroma``
shares; ``from_texts`` builds a store's class through its ``_for_texts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import check_count, check_query_vector
from ctxemb_core.index import GuardedIndex, Match, StoreDriver
from ctxemb_core.remedy import StoreTerms
from ctxemb_langchain._embeddings import ContractEmbeddings, contract_embeddings
from ctxemb_langchain._results import GuardedReads, diverse, scored
from ctxemb_langchain._writer import BuiltFromTexts, IndexWriter


class IndexedStore(GuardedReads, BuiltFromTexts, IndexWriter):
    """A LangChain vector store on one guarded index (see the module); a store's class opens
    it with :meth:`_open` on its driver.

    ``similarity_search_with_score`` gives the contract's distance (``1 - similarity``: the
    cosine distance for a normalised contract; lower is nearer), as
    ``langchain_postgres.PGVectorStore`` does.
    """

    _embeddings: ContractEmbeddings

    def _open(self, driver: StoreDriver, embedding: Any, terms: StoreTerms, **options: Any) -> None:
        """Open (or create) the index on ``driver`` under ``embedding``'s contract;
        ``options``: :meth:`GuardedIndex.open`'s (``create``, ``adopt``, ``sample``)."""
        self._embeddings = contract_embeddings(embedding)
        self._terms = terms
        self._index = self._opened(driver, **options)

    @property
    def index(self) -> GuardedIndex:
        return self._index

    @property
    def embeddings(self) -> Embeddings:
        return self._embeddings

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete the records of these ids (ids not stored are no error)."""
        if ids is None:
            raise InvalidInputError(
                f"delete needs ids; {type(self).__name__} never deletes everything"
            )
        if list(ids):
            with self._worded():
                self.index.delete(list(ids))
        return True

    # -- reading -----------------------------------------------------------------------------

    def _reading(self) -> AbstractContextManager[None]:
        return self._worded()

    def _nearest(self, query: str, k: int, where: dict | None) -> Sequence[Match]:
        with self._worded():
            return self.index.query([query], k, embedder=self._embeddings.embedder, where=where)[0]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[Document]:
        check_count(k, "k")
        with self._worded():
            found = self._by_vector(embedding, k, filter)
        return [d for d, _ in scored(found)]

    def _candidates(self, query: str, k: int, where: dict | None) -> tuple[Any, Any, list[Match]]:
        vector = self._embeddings.embed_query(query)
        return self.index, vector, self._by_vector(vector, k, where)

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        check_count(k, "k")
        check_count(fetch_k, "fetch_k")
        with self._worded():
            found = self._by_vector(embedding, fetch_k, filter)
            return diverse(self.index, embedding, found, k, lambda_mult)

    def _by_vector(self, embedding: Any, k: int, filter: dict | None) -> list[Match]:
        contract = self.index.contract
        vector = check_query_vector(embedding, contract.output_dim, contract=contract)
        return self.index.query_vector(
            vector, k, fingerprint=self._embeddings.fingerprint, where=filter
        )
