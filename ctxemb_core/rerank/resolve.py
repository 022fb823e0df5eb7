"""Reading a reranker's contract from its folder (placeholder: being written)."""

from __future__ import annotations

from typing import Any

from ctxemb_core.rerank.contract import RerankerContract

__all__ = ["rerank_contract_for"]


def rerank_contract_for(model: Any, **overrides: Any) -> RerankerContract:
    """The reranker contract of a cross-encoder folder or a token encoder."""
    raise NotImplementedError
