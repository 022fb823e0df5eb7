"""Cross-encoder reranking (placeholder: being written)."""

from __future__ import annotations

from ctxemb_core.rerank._base import Reranker

__all__ = ["CrossEncoderReranker"]


class CrossEncoderReranker(Reranker):
    """Scores each (query, document) pair jointly under a cross-encoder contract."""
