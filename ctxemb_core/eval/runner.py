"""Run an evaluation through a :class:`~ctxemb_core.eval.paths.SearchPath` and report it.

One task at a time, never an average over tasks (MTEB's rule): :func:`evaluate_retrieval` indexes
a BEIR split's corpus, searches its queries and scores the run with trec_eval's definitions;
:func:`evaluate_sts` scores STS pairs through the path and correlates them with the gold scores.
Each returns a small frozen report holding the figures, what produced them and the raw
per-query run (or per-pair scores) for a run file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.eval.beir import BeirDataset, document_text
from ctxemb_core.eval.metrics import evaluate
from ctxemb_core.eval.paths import SearchPath
from ctxemb_core.eval.sts import StsPairs, pearson, spearman
from ctxemb_core.validate import check_positive_int

__all__ = [
    "RetrievalReport",
    "StsReport",
    "evaluate_retrieval",
    "evaluate_sts",
    "retrieval_cutoffs",
]

#: The cut-offs BEIR and MTEB report; a search ``k`` deep adds ``k`` and drops deeper ones.
CUTOFFS = (1, 10, 100)


def retrieval_cutoffs(k: int) -> tuple[int, ...]:
    """The cut-offs a run ``k`` deep is scored at: BEIR's 1, 10, 100 up to ``k``, and ``k``."""
    k = check_positive_int(k, "k")
    return tuple(sorted({c for c in CUTOFFS if c <= k} | {k}))


@dataclass(frozen=True)
class RetrievalReport:
    """The figures of one retrieval evaluation, and the run they were computed from.

    Attributes:
        via: the path's name (``memory``, ``chroma``, ...).
        fingerprint: the contract fingerprint the path indexed and searched under.
        metrics: ``evaluate``'s figures, unrounded (``ndcg@10``, ``recall@100``, ``map@100``...).
        run: ``{query_id: {doc_id: similarity}}`` as the path returned it.
        documents: documents in the corpus.
        indexed: documents the path embedded and stored in this evaluation (0 on a reused index).
        queries: queries searched.
        k: documents retrieved per query.
        seconds: wall-clock time of ``index`` and ``search``.
    """

    via: str
    fingerprint: str
    metrics: dict[str, float]
    run: dict[str, dict[str, float]] = field(repr=False)
    documents: int
    indexed: int
    queries: int
    k: int
    seconds: dict[str, float] = field(default_factory=dict)

    def rounded(self, places: int = 5) -> dict[str, float]:
        """The metrics rounded as BEIR and MTEB report them."""
        return {name: round(value, places) for name, value in self.metrics.items()}


@dataclass(frozen=True)
class StsReport:
    """The figures of one STS evaluation, and the per-pair scores they were computed from.

    Attributes:
        via: the path's name.
        fingerprint: the contract fingerprint the pairs were scored under.
        spearman: Spearman correlation of the scores with the gold scores (MTEB's main score).
        pearson: Pearson correlation.
        scores: ``(n,)`` similarity of each pair through the path.
        gold: ``(n,)`` gold scores.
        pairs: how many pairs.
        seconds: wall-clock time of scoring the pairs.
    """

    via: str
    fingerprint: str
    spearman: float
    pearson: float
    scores: np.ndarray = field(repr=False)
    gold: np.ndarray = field(repr=False)
    pairs: int
    seconds: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """``{"spearman": ..., "pearson": ...}``, unrounded."""
        return {"spearman": self.spearman, "pearson": self.pearson}


def evaluate_retrieval(path: SearchPath, dataset: BeirDataset, k: int = 100) -> RetrievalReport:
    """Index ``dataset``'s corpus through ``path`` (only what it lacks), search, score.

    Args:
        path: the search path (:class:`~ctxemb_core.eval.paths.MemoryPath`, an adapter's).
        dataset: one BEIR split.
        k: documents retrieved per query; the run is scored at :func:`retrieval_cutoffs`.

    Returns:
        The report; ``metrics`` hold ``ndcg``, ``recall``, ``precision``, ``mrr`` and ``map``
        at each cut-off.

    Raises:
        InvalidInputError: ``k`` is not a positive integer, or the dataset has no documents.

    Example:
        >>> report = evaluate_retrieval(MemoryPath(embedder), load_beir(folder))  # doctest: +SKIP
        >>> round(report.metrics["ndcg@10"], 5)                                  # doctest: +SKIP
        0.64508
    """
    cutoffs = retrieval_cutoffs(k)
    if not dataset.corpus:
        raise InvalidInputError("the dataset's corpus is empty; there is nothing to search")
    documents = {i: document_text(doc) for i, doc in dataset.corpus.items()}
    started = time.perf_counter()
    indexed = path.index(documents)
    searched = time.perf_counter()
    run = path.search(dataset.queries, k)
    done = time.perf_counter()
    return RetrievalReport(
        via=path.via,
        fingerprint=path.fingerprint,
        metrics=evaluate(run, dataset.qrels, ks=cutoffs),
        run=run,
        documents=len(documents),
        indexed=indexed,
        queries=len(dataset.queries),
        k=k,
        seconds={"index": searched - started, "search": done - searched},
    )


def evaluate_sts(path: SearchPath, pairs: StsPairs) -> StsReport:
    """Score every pair through ``path`` and correlate the scores with the gold scores.

    Raises:
        InvalidInputError: fewer than two pairs, or the path returned a score per pair that is
            not finite or not one per pair.

    Example:
        >>> report = evaluate_sts(MemoryPath(embedder), load_sts("sts-test.csv"))  # doctest: +SKIP
        >>> round(report.spearman, 5)                                            # doctest: +SKIP
        0.82032
    """
    if len(pairs) < 2:
        raise InvalidInputError(f"a correlation needs at least 2 pairs, got {len(pairs)}")
    started = time.perf_counter()
    scores = np.asarray(path.pair_scores(pairs.sentences1, pairs.sentences2), dtype=np.float64)
    seconds = time.perf_counter() - started
    _check_scores(scores, len(pairs), path)
    return StsReport(
        via=path.via,
        fingerprint=path.fingerprint,
        spearman=spearman(scores, pairs.scores),
        pearson=pearson(scores, pairs.scores),
        scores=scores,
        gold=pairs.scores,
        pairs=len(pairs),
        seconds={"score": seconds},
    )


def _check_scores(scores: np.ndarray, n: int, path: Any) -> None:
    if scores.shape != (n,) or not np.isfinite(scores).all():
        raise InvalidInputError(
            f"the {path.via!r} path returned scores of shape {scores.shape} (finite: "
            f"{bool(np.isfinite(scores).all())}) for {n} pairs; expected {n} finite scores"
        )
