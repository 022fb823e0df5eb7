"""Two-stage search over a guarded collection: its bi-encoder shortlist, then a reranker."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.rerank import Reranker, ScoreThreshold, Shortlist, TwoStageResult, two_stage
from ctxemb_core.rerank.search import index_shortlist

__all__ = ["search", "shortlist"]


def shortlist(
    collection: GuardedCollection,
    query: str,
    k: int,
    *,
    where: Mapping[str, Any] | None = None,
    where_document: Mapping[str, Any] | None = None,
    embedder: Embedder | None = None,
    require_text: bool = True,
) -> Shortlist:
    """The ``k`` nearest records of ``query``, with their texts and similarities.

    The collection's stamp is checked (:meth:`GuardedCollection.query`) before anything is
    read; the similarity is the index contract's (see :func:`ctxemb_core.guard.similarity`):
    higher is better, whatever distance the collection's space reports. ``where`` and
    ``where_document`` are Chroma's filters. ``require_text=False`` lists records stored
    without their text too (with an empty text), for a caller that shows results rather than
    reranking them.

    Raises:
        InvalidInputError: a candidate stored without its text (nothing to rerank), unless
            ``require_text=False``.
        ContractMismatchError: ``embedder``'s contract is not the collection's.
    """
    return index_shortlist(
        collection,
        query,
        k,
        records=f"records of {collection.name!r}",
        embedder=embedder,
        require_text=require_text,
        where=where,
        where_document=where_document,
    )


def search(
    collection: GuardedCollection,
    query: str,
    reranker: Reranker,
    *,
    k: int = 100,
    n: int = 10,
    score_threshold: float | ScoreThreshold | None = None,
    where: Mapping[str, Any] | None = None,
    where_document: Mapping[str, Any] | None = None,
    embedder: Embedder | None = None,
) -> TwoStageResult:
    """Two-stage search: ``k`` candidates from the collection's bi-encoder (:func:`shortlist`),
    reranked to ``n`` (:func:`ctxemb_core.rerank.two_stage`).

    Example:
        >>> from ctxemb_chroma import open_collection, search
        >>> from ctxemb_core.rerank import reranker_for, rerank_contract_for
        >>> docs = open_collection(client, "docs", contract)  # doctest: +SKIP
        >>> reranker = reranker_for(rerank_contract_for("./my-cross-encoder"))  # doctest: +SKIP
        >>> result = search(docs, "green tea", reranker, k=50, n=5)  # doctest: +SKIP
        >>> [h.id for h in result], result.reranker_fingerprint[:12]  # doctest: +SKIP
    """
    if not isinstance(collection, GuardedCollection):
        raise InvalidInputError(
            "search needs a GuardedCollection (open_collection), got "
            f"{type(collection).__name__}: a raw Chroma collection's stamp is not checked"
        )
    first_stage = partial(
        shortlist, collection, where=where, where_document=where_document, embedder=embedder
    )
    return two_stage(query, first_stage, reranker, k=k, n=n, score_threshold=score_threshold)
