"""Late interaction (MaxSim) reranking (placeholder: being written)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxemb_core.rerank._base import Reranker

__all__ = ["LateInteractionReranker", "TokenVectorStore", "maxsim"]


def maxsim(query_vectors: Any, doc_vectors: Any, masks: Any = None) -> np.ndarray:
    """Σ_i max_j q_i · d_j for each candidate."""
    raise NotImplementedError


class TokenVectorStore:
    """Document token vectors keyed by document id and reranker contract fingerprint."""


class LateInteractionReranker(Reranker):
    """Scores documents by MaxSim over per-token vectors."""
