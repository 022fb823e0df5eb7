"""Evaluation: BEIR retrieval and STS Benchmark data, the metrics BEIR and MTEB report, and the
runners ``ctxemb eval`` drives through every search path.

Depends on numpy only, so evaluating needs neither scipy nor pytrec_eval nor a framework; the
BM25 baseline (:func:`bm25_run`) imports ``bm25s`` when it is called (``ctxemb[eval]``).

Example:
    >>> from ctxemb_core import Embedder, contract_for
    >>> from ctxemb_core.eval import MemoryPath, evaluate_retrieval, load_beir
    >>> path = MemoryPath(Embedder(contract_for("sentence-transformers/all-MiniLM-L6-v2")))
    >>> report = evaluate_retrieval(path, load_beir("../shared/data/scifact"))  # doctest: +SKIP
    >>> round(report.metrics["ndcg@10"], 5)                                     # doctest: +SKIP
    0.64508
"""

from __future__ import annotations

from ctxemb_core.eval.beir import BeirDataset, document_text, load_beir, load_jsonl_corpus
from ctxemb_core.eval.bm25 import bm25_run
from ctxemb_core.eval.metrics import (
    build_run,
    evaluate,
    map_at_k,
    mrr_at_k,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    search_topk,
)
from ctxemb_core.eval.paths import VIAS, MemoryPath, SearchPath
from ctxemb_core.eval.runfiles import read_run, write_pair_scores, write_run
from ctxemb_core.eval.runner import RetrievalReport, StsReport, evaluate_retrieval, evaluate_sts
from ctxemb_core.eval.sts import StsPairs, cosine_scores, load_sts, pearson, spearman

__all__ = [
    "VIAS",
    "BeirDataset",
    "MemoryPath",
    "RetrievalReport",
    "SearchPath",
    "StsPairs",
    "StsReport",
    "bm25_run",
    "build_run",
    "cosine_scores",
    "document_text",
    "evaluate",
    "evaluate_retrieval",
    "evaluate_sts",
    "load_beir",
    "load_jsonl_corpus",
    "load_sts",
    "map_at_k",
    "mrr_at_k",
    "ndcg_at_k",
    "pearson",
    "precision_at_k",
    "read_run",
    "recall_at_k",
    "search_topk",
    "spearman",
    "write_pair_scores",
    "write_run",
]
