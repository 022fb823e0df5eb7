"""Evaluation: BEIR retrieval and STS Benchmark data, with the metrics BEIR and MTEB report.

Depends on numpy only, so evaluating needs neither scipy nor pytrec_eval nor a framework.
"""

from __future__ import annotations

from ctxemb_core.eval.beir import BeirDataset, document_text, load_beir, load_jsonl_corpus
from ctxemb_core.eval.metrics import (
    build_run,
    evaluate,
    mrr_at_k,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    search_topk,
)
from ctxemb_core.eval.sts import StsPairs, cosine_scores, load_sts, pearson, spearman

__all__ = [
    "BeirDataset",
    "StsPairs",
    "build_run",
    "cosine_scores",
    "document_text",
    "evaluate",
    "load_beir",
    "load_jsonl_corpus",
    "load_sts",
    "mrr_at_k",
    "ndcg_at_k",
    "pearson",
    "precision_at_k",
    "recall_at_k",
    "search_topk",
    "spearman",
]
