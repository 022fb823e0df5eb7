"""The documents a LangChain caller gets back from a search on a guarded index: the stored text
and metadata without ctxemb's own keys (documents come out as they went in), and what the search
measured: the contract's distance for ``IndexedStore`` (:func:`scored`), the fused and per-side
ranks and scores for ``ContractHybridRetriever`` (:func:`hybrid_documents`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from ctxemb_core.documents import TEXT_KEY
from ctxemb_core.validate import check_count
from ctxemb_langchain._checks import unstamped

if TYPE_CHECKING:
    from ctxemb_core.hybrid.pair import HybridHit, HybridIndex
    from ctxemb_core.index import Match

#: The metadata keys each hybrid result carries (they are set over the stored metadata's keys).
RESULT_KEYS = (
    "id",
    "hybrid_score",
    "dense_rank",
    "dense_score",
    "lexical_rank",
    "lexical_score",
    "hybrid_fingerprint",
)


def document(i: str, text: Any, meta: Any) -> Document:
    """A stored record as a ``Document``, without the text digest ctxemb keeps beside it."""
    clean = {k: v for k, v in (meta or {}).items() if k != TEXT_KEY}
    return Document(page_content=text or "", metadata=clean, id=i)


def scored(found: Sequence[Match]) -> list[tuple[Document, float]]:
    """Each match with the contract's distance (``1 - similarity``: lower is nearer)."""
    return [(document(m.id, m.text, m.metadata), 1.0 - m.score) for m in found]


def hybrid_documents(index: HybridIndex, hits: list[HybridHit]) -> list[Document]:
    """Each hit's stored text and metadata, with :data:`RESULT_KEYS` set over it."""
    if not hits:
        return []
    got = index.dense.get(ids=[h.id for h in hits], include=["metadatas"])
    stored = dict(zip(got["ids"], got["metadatas"], strict=True))
    fingerprint = index.contract.fingerprint
    out = []
    for h in hits:
        found = unstamped(Document(h.document or "", metadata=stored.get(h.id) or {}))
        values = (h.id, h.score, h.dense_rank, h.dense_score, h.lexical_rank, h.lexical_score)
        meta = found.metadata | dict(zip(RESULT_KEYS, (*values, fingerprint), strict=True))
        out.append(Document(page_content=found.page_content, metadata=meta, id=h.id))
    return out


class GuardedReads:
    """The reads every guarded LangChain store answers the same way (one index's, an alias's):
    ``get_by_ids``, ``similarity_search`` and its scores, and the relevance of a distance. A
    store says how it reads (:attr:`index`, :meth:`_reading`: a block its errors are worded in)
    and searches (:meth:`_nearest`)."""

    index: Any

    def _reading(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def _nearest(self, query: str, k: int, where: dict | None) -> Sequence[Match]:
        """The ``k`` nearest records of ``query`` (checked), nearest first."""
        raise NotImplementedError

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        if not list(ids):
            return []
        with self._reading():
            found = self.index.get(list(ids))
        return [document(r.id, r.text, r.metadata) for r in found if r.text is not None]

    def similarity_search(
        self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter=filter)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest records and their distance (lower is nearer)."""
        check_count(k, "k")
        return scored(self._nearest(query, k, filter))

    def _candidates(self, query: str, k: int, where: dict | None) -> tuple[Any, Any, list[Match]]:
        """The index searched, the query's vector and its ``k`` nearest records."""
        raise NotImplementedError

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        check_count(k, "k")
        check_count(fetch_k, "fetch_k")
        with self._reading():
            index, vector, found = self._candidates(query, fetch_k, filter)
            return diverse(index, vector, found, k, lambda_mult)

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        # The distance given is 1 - the contract's similarity (cosine or inner product).
        return lambda distance: 1.0 - distance


def diverse(
    index: Any, vector: Any, found: Sequence[Match], k: int, lambda_mult: float
) -> list[Document]:
    """The ``k`` documents maximal marginal relevance picks among ``found`` (their vectors as
    ``index`` stores them; a record stored without one is left out)."""
    if not found:
        return []
    stored = {r.id: r.vector for r in index.get([m.id for m in found], ("vector",))}
    kept = [m for m in found if stored.get(m.id) is not None]
    if not kept:
        return []
    query = np.asarray(vector, dtype=np.float32)
    vectors: Any = np.stack([np.asarray(stored[m.id], dtype=np.float32) for m in kept])
    picked = maximal_marginal_relevance(query, list(vectors), lambda_mult=lambda_mult, k=k)
    return [document(kept[i].id, kept[i].text, kept[i].metadata) for i in picked]
