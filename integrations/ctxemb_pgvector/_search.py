"""Two-stage search over a guarded table: its bi-encoder shortlist, then a reranker."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.rerank import Reranker, ScoreThreshold, Shortlist, TwoStageResult, two_stage
from ctxemb_core.rerank.search import index_shortlist
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
    (higher is better), after the table's stamp is checked (:meth:`GuardedTable.query`);
    ``exact`` scans every row instead of the HNSW index."""
    return index_shortlist(
        table,
        query,
        k,
        records=f"rows of {table.name!r}",
        embedder=embedder,
        require_text=require_text,
        where=where,
        exact=exact,
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
    """Two-stage search: ``k`` candidates from the table's bi-encoder (:func:`shortlist`),
    reranked to ``n`` (:func:`ctxemb_core.rerank.two_stage`)."""
    if not isinstance(table, GuardedTable):
        raise InvalidInputError(
            f"search needs a GuardedTable (open_table), got {type(table).__name__}"
        )
    first_stage = partial(shortlist, table, where=where, embedder=embedder)
    return two_stage(query, first_stage, reranker, k=k, n=n, score_threshold=score_threshold)
