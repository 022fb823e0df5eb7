"""Two-stage search over a guarded table: its bi-encoder shortlist, then a reranker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import similarity
from ctxemb_core.rerank import Reranker, ScoreThreshold, Shortlist, TwoStageResult
from ctxemb_core.rerank import two_stage as _two_stage
from ctxemb_core.rerank.search import shortlist_of
from ctxemb_pgvector._table import GuardedTable

__all__ = ["search", "shortlist"]


def shortlist(
    table: GuardedTable,
    query: str,
    k: int,
    *,
    where: Mapping[str, Any] | None = None,
    embedder: Embedder | None = None,
    require_text: bool = True,
    exact: bool = False,
) -> Shortlist:
    """The ``k`` nearest rows of ``query``, with their texts and the contract's similarity
    (higher is better), after the table's stamp is checked (:meth:`GuardedTable.query`)."""
    result = table.query([query], k, embedder=embedder, where=where, exact=exact)
    scores = similarity(result["distances"][0], table.layout.space_for_similarity, table.contract)
    return shortlist_of(
        result,
        scores,
        table.stamp.fingerprint,
        where=f"rows of {table.name!r}",
        require_text=require_text,
    )


def search(
    table: GuardedTable,
    query: str,
    reranker: Reranker,
    *,
    k: int = 100,
    n: int = 10,
    score_threshold: float | ScoreThreshold | None = None,
    where: Mapping[str, Any] | None = None,
    embedder: Embedder | None = None,
) -> TwoStageResult:
    """Two-stage search: ``k`` candidates from the table's bi-encoder, reranked to ``n``."""
    if not isinstance(table, GuardedTable):
        raise InvalidInputError(
            f"search needs a GuardedTable (open_table), got {type(table).__name__}"
        )

    def first_stage(text: str, count: int) -> Shortlist:
        return shortlist(table, text, count, where=where, embedder=embedder)

    return _two_stage(query, first_stage, reranker, k=k, n=n, score_threshold=score_threshold)
