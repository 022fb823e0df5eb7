"""Hybrid retrieval on a BEIR split: the dense run of any path, BM25 under a pinned lexical
recipe, and their fusion, each scored on the same judgements (``ctxemb eval --hybrid``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ctxemb_core.eval.beir import BeirDataset, document_text
from ctxemb_core.hybrid import Fusion, LexicalContract, LexicalIndex, fuse

__all__ = ["HybridRuns", "hybrid_runs"]


@dataclass(frozen=True)
class HybridRuns:
    """The lexical and the fused run, the fitted lexical contract, and the seconds spent."""

    lexical: dict[str, dict[str, float]]
    fused: dict[str, dict[str, float]]
    contract: LexicalContract
    seconds: dict[str, float]


def hybrid_runs(
    dataset: BeirDataset,
    dense: dict[str, dict[str, float]],
    *,
    lexical: LexicalContract | None = None,
    fusion: Fusion | None = None,
    k: int = 100,
    index: LexicalIndex | None = None,
) -> HybridRuns:
    """BM25 on ``dataset``'s corpus (or ``index``, fitted on it already) and its fusion with
    ``dense`` (``{query: {doc: score}}``, the dense path's run), both cut to ``k``."""
    fusion = fusion or Fusion()
    started = time.perf_counter()
    if index is None:
        ids = list(dataset.corpus)
        index = LexicalIndex.fit(ids, [document_text(dataset.corpus[i]) for i in ids], lexical)
    fitted = time.perf_counter()
    depth = max(k, fusion.depth)
    lexical_run: dict[str, dict[str, float]] = {}
    fused_run: dict[str, dict[str, float]] = {}
    for qid, text in dataset.queries.items():
        hits = index.search(text, depth)
        lexical_run[qid] = dict(hits[:k])
        ranked = sorted((dense.get(qid) or {}).items(), key=lambda item: (-item[1], item[0]))
        fused_run[qid] = dict(fuse(fusion, ranked, hits, k))
    return HybridRuns(
        lexical_run,
        fused_run,
        index.contract,
        {"fit": fitted - started, "search": time.perf_counter() - fitted},
    )


def describe_runs(runs: HybridRuns, fusion: Fusion) -> dict[str, Any]:
    return {"lexical": runs.contract.to_dict(), "fusion": fusion.to_dict()}
