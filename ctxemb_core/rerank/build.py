"""A reranker of the right regime from its contract, or from a framework's stored config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxemb_core.rerank._base import Reranker, check_config
from ctxemb_core.rerank.contract import RerankerContract, RerankKind, load_reranker_contract

__all__ = ["reranker_for", "reranker_from_config"]


def reranker_for(contract: RerankerContract | Mapping[str, Any] | str, **settings: Any) -> Reranker:
    """The :class:`CrossEncoderReranker` or :class:`LateInteractionReranker` of ``contract``.

    Example:
        >>> reranker = reranker_for(contract, backend="onnx")  # doctest: +SKIP
    """
    from ctxemb_core.rerank.cross import CrossEncoderReranker
    from ctxemb_core.rerank.late import LateInteractionReranker

    contract = load_reranker_contract(contract)
    if contract.kind is RerankKind.CROSS_ENCODER:
        return CrossEncoderReranker(contract, **settings)
    return LateInteractionReranker(contract, **settings)


def reranker_from_config(config: Mapping[str, Any], **options: Any) -> Reranker:
    """Rebuild a reranker from :meth:`Reranker.config` (``options`` override its settings)."""
    contract, settings = check_config(config)
    return reranker_for(contract, **{**settings, **options})
