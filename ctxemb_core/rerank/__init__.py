"""Rerankers: the cross-encoder and late-interaction regimes, each under its own contract.

The seed reference names three retrieval regimes. The bi-encoder is the
:class:`~ctxemb_core.Embedder`; this package adds the other two, each pinned by a
:class:`RerankerContract` whose fingerprint every result carries:

- :class:`CrossEncoderReranker`: query and document read jointly by one network (not
  pre-computable; accurate and slow, so it reranks a shortlist);
- :class:`LateInteractionReranker`: per-token vectors scored with :func:`maxsim`,
  ``Σ_i max_j q_i · d_j`` (ColBERT); document token vectors can be stored
  (:class:`TokenVectorStore`, keyed by the contract's fingerprint);
- :func:`two_stage`: a bi-encoder shortlist from a stamped index, reranked.

Example:
    >>> from ctxemb_core.rerank import CrossEncoderReranker, rerank_contract_for
    >>> reranker = CrossEncoderReranker(rerank_contract_for("./my-cross-encoder"))  # doctest: +SKIP
    >>> reranker.rerank("tea", ["green tea", "bicycles"], top_k=1)[0].text  # doctest: +SKIP
    'green tea'
"""

from __future__ import annotations

from ctxemb_core.rerank._base import (
    Ranked,
    Reranker,
    Reranking,
    as_threshold,
    check_settings,
    resolve_threshold,
)
from ctxemb_core.rerank.build import reranker_for, reranker_from_config
from ctxemb_core.rerank.contract import (
    Activation,
    PairFormat,
    RerankerContract,
    RerankKind,
    ScoreThreshold,
    SkipTokens,
    load_reranker_contract,
)
from ctxemb_core.rerank.cross import CrossEncoderReranker
from ctxemb_core.rerank.late import LateInteractionReranker, TokenVectorStore, maxsim
from ctxemb_core.rerank.lazy import LazyReranker
from ctxemb_core.rerank.resolve import rerank_contract_for
from ctxemb_core.rerank.search import Candidate, Hit, Shortlist, TwoStageResult, two_stage

__all__ = [
    "Activation",
    "Candidate",
    "CrossEncoderReranker",
    "Hit",
    "LateInteractionReranker",
    "LazyReranker",
    "PairFormat",
    "Ranked",
    "RerankKind",
    "Reranker",
    "RerankerContract",
    "Reranking",
    "ScoreThreshold",
    "Shortlist",
    "SkipTokens",
    "TokenVectorStore",
    "TwoStageResult",
    "as_threshold",
    "check_settings",
    "load_reranker_contract",
    "maxsim",
    "rerank_contract_for",
    "reranker_for",
    "reranker_from_config",
    "resolve_threshold",
    "two_stage",
]
