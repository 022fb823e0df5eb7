"""Retrieval metrics with the exact definitions of trec_eval, as used by BEIR and MTEB.

BEIR and MTEB score retrieval with ``pytrec_eval`` (a binding of ``trec_eval``). Its conventions
are easy to get subtly wrong, and a wrong convention shifts nDCG@10 by a point or more, so this
module reproduces them one by one, in plain Python and numpy:

* **Ranking.** A query's run is sorted by score descending, and equal scores by document id
  *descending* (byte-wise string comparison). That is ``trec_eval``'s order: it ignores the
  order in which a run lists its documents, so ties are resolved by id, not by position.
* **Relevance.** A judged document is relevant when its grade is ``>= 1``; grades ``<= 0`` and
  unjudged documents are not relevant.
* **nDCG@k** (``ndcg_cut_k``): gain = the grade itself (linear, not ``2**grade - 1``), discount
  ``log2(rank + 1)`` for 1-based ranks, ideal DCG from the query's judged grades sorted
  descending and cut at ``k``.
* **Recall@k** (``recall_k``): relevant documents in the top ``k`` / all relevant judged.
* **Precision@k** (``P_k``): relevant documents in the top ``k`` / ``k``, even when the run
  returned fewer than ``k`` documents.
* **MRR@k**: ``1 / rank`` of the first relevant document within the top ``k``, else 0.
* **MAP@k** (``map_cut_k``): the precision at the rank of each relevant document retrieved
  within the top ``k``, summed and divided by *all* the query's relevant judgements (not cut at
  ``k``). On a run ``k`` deep, ``map@k`` is trec_eval's ``map``.

Averaging: every metric is the mean over the queries that have at least one judgement in
``qrels``; a query missing from ``run`` (or with an empty run) scores 0 (``trec_eval -c``).
Queries in ``run`` but not in ``qrels`` are ignored. BEIR averages over the queries present in
both, which is the same number whenever every judged query was searched, as in BEIR and MTEB
pipelines. BEIR's own MRR sorts ties by insertion order rather than by id; the difference only
shows on exactly tied scores.

Scores are returned unrounded (BEIR rounds to 5 decimals when reporting).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import SupportsFloat

import numpy as np

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.validate import check_positive_int

__all__ = [
    "build_run",
    "evaluate",
    "map_at_k",
    "mrr_at_k",
    "ndcg_at_k",
    "precision_at_k",
    "recall_at_k",
    "search_topk",
]

# Scores may be numpy scalars (np.float32 from a search), hence SupportsFloat.
Run = Mapping[str, Mapping[str, SupportsFloat]]
Qrels = Mapping[str, Mapping[str, int]]


# --------------------------------------------------------------------------------------------
# Ranking helpers
# --------------------------------------------------------------------------------------------


# Counts that come from arrays are numpy integers: accepted as the ints they hold.
_INTEGERS = (int, np.integer)


def _check_k(k: int) -> int:
    # bool is an int subclass; ndcg@True is certainly a bug on the caller's side.
    return int(check_positive_int(k, "k", kinds=_INTEGERS))


def _ranked_ids(doc_scores: Mapping[str, SupportsFloat] | None, k: int) -> list[str]:
    """Top ``k`` document ids in trec_eval order: score descending, then doc id descending."""
    if not doc_scores:
        return []
    # Sorting by the tuple (score, id) in reverse gives both keys descending, exactly trec_eval's
    # comparator. Scores go through float() because trec_eval compares doubles: a numpy float32
    # and its float64 value must not rank differently.
    items = sorted(((float(s), d) for d, s in doc_scores.items()), reverse=True)
    return [d for _, d in items[:k]]


def _judged_queries(qrels: Qrels) -> list[str]:
    # trec_eval only knows a query through its judgement lines, so a query with an empty
    # judgement dict does not exist for it and must not dilute the mean.
    queries = [q for q, judged in qrels.items() if judged]
    if not queries:
        raise InvalidInputError("qrels has no judged query; nothing to evaluate")
    return queries


def _query_ndcg(ranked: list[str], judged: Mapping[str, int], k: int) -> float:
    dcg = 0.0
    for i, doc_id in enumerate(ranked):
        gain = judged.get(doc_id, 0)
        if gain > 0:
            # i is 0-based, so rank + 1 = i + 2.
            dcg += gain / math.log2(i + 2)
    ideal_gains = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal_gains))
    # A query with no relevant judgement has idcg 0; trec_eval scores it 0, not NaN.
    return dcg / idcg if idcg > 0 else 0.0


def _query_hits(ranked: list[str], judged: Mapping[str, int]) -> int:
    return sum(1 for d in ranked if judged.get(d, 0) >= 1)


def _query_recall(ranked: list[str], judged: Mapping[str, int], k: int) -> float:
    num_rel = sum(1 for g in judged.values() if g >= 1)
    return _query_hits(ranked, judged) / num_rel if num_rel else 0.0


def _query_precision(ranked: list[str], judged: Mapping[str, int], k: int) -> float:
    return _query_hits(ranked, judged) / k


def _query_rr(ranked: list[str], judged: Mapping[str, int], k: int) -> float:
    for i, doc_id in enumerate(ranked):
        if judged.get(doc_id, 0) >= 1:
            return 1.0 / (i + 1)
    return 0.0


def _query_ap(ranked: list[str], judged: Mapping[str, int], k: int) -> float:
    num_rel = sum(1 for g in judged.values() if g >= 1)
    if not num_rel:
        return 0.0
    hits = 0
    total = 0.0
    for i, doc_id in enumerate(ranked):
        if judged.get(doc_id, 0) >= 1:
            hits += 1
            total += hits / (i + 1)
    # Divided by every relevant judgement, retrieved or not: trec_eval's map and map_cut_k.
    return total / num_rel


_PER_QUERY = {
    "ndcg": _query_ndcg,
    "recall": _query_recall,
    "precision": _query_precision,
    "mrr": _query_rr,
    "map": _query_ap,
}


def _mean_metric(name: str, run: Run, qrels: Qrels, k: int) -> float:
    k = _check_k(k)
    fn = _PER_QUERY[name]
    queries = _judged_queries(qrels)
    total = 0.0
    for q in queries:
        total += fn(_ranked_ids(run.get(q), k), qrels[q], k)
    return total / len(queries)


# --------------------------------------------------------------------------------------------
# Public metrics
# --------------------------------------------------------------------------------------------


def ndcg_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean nDCG@k, as ``trec_eval``'s ``ndcg_cut_k`` (the BEIR/MTEB main score at k=10).

    Args:
        run: ``{query_id: {doc_id: score}}``; higher scores rank first, ties by doc id descending.
        qrels: ``{query_id: {doc_id: grade}}``; grades are used as linear gains.
        k: rank cut-off, a positive integer.

    Returns:
        The mean over judged queries, in ``[0, 1]``.

    Raises:
        InvalidInputError: ``k`` is not a positive integer or ``qrels`` judges no query.
    """
    return _mean_metric("ndcg", run, qrels, k)


def recall_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean Recall@k, as ``trec_eval``'s ``recall_k``.

    A query without any relevant judgement (only grades ``<= 0``) scores 0.

    Args:
        run: ``{query_id: {doc_id: score}}``.
        qrels: ``{query_id: {doc_id: grade}}``; grade ``>= 1`` is relevant.
        k: rank cut-off, a positive integer.

    Returns:
        The mean over judged queries, in ``[0, 1]``.

    Raises:
        InvalidInputError: ``k`` is not a positive integer or ``qrels`` judges no query.
    """
    return _mean_metric("recall", run, qrels, k)


def precision_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean Precision@k, as ``trec_eval``'s ``P_k`` (always divided by ``k``).

    Args:
        run: ``{query_id: {doc_id: score}}``.
        qrels: ``{query_id: {doc_id: grade}}``; grade ``>= 1`` is relevant.
        k: rank cut-off, a positive integer.

    Returns:
        The mean over judged queries, in ``[0, 1]``.

    Raises:
        InvalidInputError: ``k`` is not a positive integer or ``qrels`` judges no query.
    """
    return _mean_metric("precision", run, qrels, k)


def mrr_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean reciprocal rank of the first relevant document within the top ``k``.

    Args:
        run: ``{query_id: {doc_id: score}}``.
        qrels: ``{query_id: {doc_id: grade}}``; grade ``>= 1`` is relevant.
        k: rank cut-off, a positive integer.

    Returns:
        The mean over judged queries, in ``[0, 1]``.

    Raises:
        InvalidInputError: ``k`` is not a positive integer or ``qrels`` judges no query.
    """
    return _mean_metric("mrr", run, qrels, k)


def map_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean average precision within the top ``k``, as ``trec_eval``'s ``map_cut_k``.

    Each relevant document retrieved at rank ``r <= k`` adds the precision at ``r``; the sum
    is divided by all the query's relevant judgements. With a run ``k`` deep (BEIR and MTEB
    retrieve 100 or 1,000) this is ``trec_eval``'s ``map``.

    Args:
        run: ``{query_id: {doc_id: score}}``.
        qrels: ``{query_id: {doc_id: grade}}``; grade ``>= 1`` is relevant.
        k: rank cut-off, a positive integer.

    Returns:
        The mean over judged queries, in ``[0, 1]``.

    Raises:
        InvalidInputError: ``k`` is not a positive integer or ``qrels`` judges no query.
    """
    return _mean_metric("map", run, qrels, k)


def evaluate(run: Run, qrels: Qrels, ks: Iterable[int] = (1, 10, 100)) -> dict[str, float]:
    """All five metrics at every cut-off in ``ks``.

    Args:
        run: ``{query_id: {doc_id: score}}``.
        qrels: ``{query_id: {doc_id: grade}}``.
        ks: rank cut-offs.

    Returns:
        A dict with keys ``"ndcg@k"``, ``"recall@k"``, ``"precision@k"``, ``"mrr@k"`` and
        ``"map@k"`` for each ``k`` in ``ks`` (in that metric order, ``ks`` ascending), e.g.
        ``result["ndcg@10"]``.

    Raises:
        InvalidInputError: ``ks`` is empty or holds a non-positive value, or ``qrels`` judges
            no query.
    """
    cutoffs = sorted({_check_k(k) for k in ks})
    if not cutoffs:
        raise InvalidInputError("ks is empty; give at least one cut-off")
    queries = _judged_queries(qrels)
    # Rank each query once at the largest cut-off; the prefix is the ranking at smaller ones.
    ranked = {q: _ranked_ids(run.get(q), cutoffs[-1]) for q in queries}
    result: dict[str, float] = {}
    for name, fn in _PER_QUERY.items():
        for k in cutoffs:
            total = sum(fn(ranked[q][:k], qrels[q], k) for q in queries)
            result[f"{name}@{k}"] = total / len(queries)
    return result


# --------------------------------------------------------------------------------------------
# Exact top-k search
# --------------------------------------------------------------------------------------------


def _as_matrix(x: object, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise InvalidInputError(f"{name} must be a 2-D array (n, dim), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise InvalidInputError(f"{name} must hold floats, got dtype {arr.dtype}")
    if not np.isfinite(arr).all():
        # A NaN compares false with everything, which would silently scramble the ranking.
        raise InvalidInputError(f"{name} contains NaN or infinite values")
    return arr


def _select_topk(
    cand_idx: np.ndarray, cand_scores: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, keep the ``k`` best candidates by (score descending, index ascending), sorted.

    ``argpartition`` alone picks an arbitrary subset among scores tied at the k-th place, which
    would make the selection depend on its internal order. Rows with such a boundary tie (rare:
    duplicate documents) are redone with a full lexicographic sort, so the selection is
    deterministic.
    """
    n = cand_scores.shape[1]
    if n > k:
        part = np.argpartition(-cand_scores, k - 1, axis=1)[:, :k]
        top_scores = np.take_along_axis(cand_scores, part, axis=1)
        kth = top_scores.min(axis=1)
        tied_rows = np.flatnonzero((cand_scores >= kth[:, None]).sum(axis=1) > k)
        for r in tied_rows:
            part[r] = np.lexsort((cand_idx[r], -cand_scores[r]))[:k]
        top_idx = np.take_along_axis(cand_idx, part, axis=1)
        top_scores = np.take_along_axis(cand_scores, part, axis=1)
    else:
        top_idx, top_scores = cand_idx, cand_scores
    # Final order: score descending, then index ascending (lexsort's last key is the primary).
    order = np.lexsort((top_idx, -top_scores), axis=1)
    return np.take_along_axis(top_idx, order, axis=1), np.take_along_axis(top_scores, order, axis=1)


def search_topk(
    query_vectors: np.ndarray,
    doc_vectors: np.ndarray,
    k: int,
    *,
    query_block: int = 256,
    doc_block: int = 65536,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact maximum-inner-product search, in blocks so memory stays bounded.

    The score is the plain inner product; pass unit vectors to get cosine similarity. Scores
    are computed for a ``query_block x doc_block`` tile at a time, so peak extra memory is
    about ``query_block * (doc_block + k)`` scores whatever the corpus size.

    Args:
        query_vectors: ``(n_queries, dim)`` float array.
        doc_vectors: ``(n_docs, dim)`` float array.
        k: results per query; clipped to ``n_docs``.
        query_block: queries per tile.
        doc_block: documents per tile.

    Returns:
        ``(indices, scores)``, both ``(n_queries, min(k, n_docs))``: document row indices
        (``int64``) and their scores, sorted by score descending. Exactly equal scores are
        ordered (and, at the k-th place, selected) by lower document index first. Note that
        BLAS rounds a product differently depending on the tile shape, so changing the block
        sizes can move a score by one ulp and reorder near-duplicates; fixed block sizes give
        reproducible results.

    Raises:
        InvalidInputError: arrays are not 2-D floats, contain NaN/inf, have different widths,
            ``doc_vectors`` is empty, or ``k``/block sizes are not positive integers.
    """
    q = _as_matrix(query_vectors, "query_vectors")
    d = _as_matrix(doc_vectors, "doc_vectors")
    k = _check_k(k)
    check_positive_int(query_block, "query_block", kinds=_INTEGERS)
    check_positive_int(doc_block, "doc_block", kinds=_INTEGERS)
    if q.shape[1] != d.shape[1]:
        raise InvalidInputError(
            f"query_vectors have dimension {q.shape[1]} but doc_vectors have {d.shape[1]}"
        )
    n_docs = d.shape[0]
    if n_docs == 0:
        raise InvalidInputError("doc_vectors is empty; there is nothing to search")
    k = min(k, n_docs)
    dtype = np.result_type(q.dtype, d.dtype)
    n_q = q.shape[0]
    out_idx = np.empty((n_q, k), dtype=np.int64)
    out_scores = np.empty((n_q, k), dtype=dtype)

    for qs in range(0, n_q, query_block):
        qb = q[qs : qs + query_block].astype(dtype, copy=False)
        best_idx = np.empty((qb.shape[0], 0), dtype=np.int64)
        best_scores = np.empty((qb.shape[0], 0), dtype=dtype)
        for ds in range(0, n_docs, doc_block):
            db = d[ds : ds + doc_block].astype(dtype, copy=False)
            tile = qb @ db.T
            tile_idx = np.broadcast_to(np.arange(ds, ds + db.shape[0], dtype=np.int64), tile.shape)
            # Merge the running best with this tile's documents and keep the top k again.
            best_idx, best_scores = _select_topk(
                np.concatenate([best_idx, tile_idx], axis=1),
                np.concatenate([best_scores, tile], axis=1),
                k,
            )
        out_idx[qs : qs + qb.shape[0]] = best_idx
        out_scores[qs : qs + qb.shape[0]] = best_scores
    return out_idx, out_scores


def build_run(
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    indices: np.ndarray,
    scores: np.ndarray,
) -> dict[str, dict[str, float]]:
    """Turn :func:`search_topk` output into a run ``{query_id: {doc_id: score}}``.

    Args:
        query_ids: one id per row of ``indices``.
        doc_ids: the id of each row of the searched ``doc_vectors``.
        indices: ``(n_queries, k)`` document row indices.
        scores: ``(n_queries, k)`` scores.

    Returns:
        The run, with scores as Python floats.

    Raises:
        InvalidInputError: shapes do not match the id lists.
    """
    indices = np.asarray(indices)
    scores = np.asarray(scores)
    if indices.shape != scores.shape or indices.ndim != 2:
        raise InvalidInputError(
            f"indices and scores must be 2-D of the same shape, got {indices.shape} "
            f"and {scores.shape}"
        )
    if len(query_ids) != indices.shape[0]:
        raise InvalidInputError(
            f"{len(query_ids)} query ids for {indices.shape[0]} rows of search results"
        )
    if indices.size and (indices.min() < 0 or indices.max() >= len(doc_ids)):
        raise InvalidInputError(f"indices out of range for {len(doc_ids)} document ids")
    return {
        qid: {
            doc_ids[j]: float(s) for j, s in zip(row_idx.tolist(), row_scores.tolist(), strict=True)
        }
        for qid, row_idx, row_scores in zip(query_ids, indices, scores, strict=True)
    }
