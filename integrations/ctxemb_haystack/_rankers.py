"""Haystack rankers driven by a reranker contract: one component per reranker regime."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from haystack import Document, component, default_to_dict

from ctxemb_core.components import component_reranker, reranker_arguments
from ctxemb_core.documents import RERANKER_KEY
from ctxemb_core.rerank import Reranker, RerankKind, ScoreThreshold, as_threshold
from ctxemb_core.validate import check_positive_int
from ctxemb_haystack._base import ModelComponent, documents_of, text_of


class _ContractRanker(ModelComponent):
    """What both rankers share. The reranker's settings are ``path=``, ``backend=``,
    ``device=``, ``batch_size=`` and ``token_budget=``
    (:func:`~ctxemb_core.components.component_reranker`).
    """

    _kind: RerankKind  # the regime each subclass takes

    def __init__(
        self,
        *,
        top_k: int = 10,
        score_threshold: float | ScoreThreshold | Mapping[str, Any] | None = None,
        meta_fields_to_embed: list[str] | None = None,
        embedding_separator: str = "\n",
        **keywords: Any,
    ) -> None:
        # Not super(): @component rebuilds the class, and the zero-argument form names the old one.
        ModelComponent.__init__(self, **keywords)  # the model loads on warm_up (or run)
        self.top_k = check_positive_int(top_k, "top_k")
        self.score_threshold = as_threshold(score_threshold, self.contract)
        self.meta_fields_to_embed = list(meta_fields_to_embed or [])
        self.embedding_separator = embedding_separator

    def _model(self, keywords: dict[str, Any]) -> tuple[Callable[..., Any], dict[str, Any]]:
        others = {c._kind: c.__name__ for c in _ContractRanker.__subclasses__()}
        return component_reranker, {"kind": self._kind, "others": others}

    @property
    def reranker(self) -> Reranker | None:
        """The core reranker once :meth:`warm_up` (or the first run) built it, else ``None``."""
        return self.lazy.built

    def to_dict(self) -> dict[str, Any]:
        threshold = self.score_threshold
        return default_to_dict(
            self,
            top_k=self.top_k,
            score_threshold=None if threshold is None else threshold.to_dict(),
            meta_fields_to_embed=self.meta_fields_to_embed,
            embedding_separator=self.embedding_separator,
            **reranker_arguments(self.lazy),
            progress_bar=self.progress_bar,
        )

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        documents: list[Document],
        top_k: int | None = None,
        score_threshold: float | ScoreThreshold | None = None,
    ) -> dict[str, list[Document]]:
        """Copies of ``documents`` best first (ties in input order), one per id as Haystack's
        rankers keep, with ``score`` set and the contract's fingerprint in
        ``meta["ctxemb_reranker"]``. ``top_k`` and ``score_threshold`` override the init values.

        Raises:
            TypeError: ``documents`` is not a list of ``Document``.
            InvalidInputError: ``query`` is not a string, ``top_k`` not a positive integer.
            RerankerMismatchError: a ``ScoreThreshold`` set under another contract.
        """
        docs = _deduplicate(documents_of(documents, type(self).__name__))
        # As Haystack's rankers and ContractDocumentEmbedder: a missing content is "".
        fields, separator = self.meta_fields_to_embed, self.embedding_separator
        ranking = self.lazy.get().rerank(
            query,
            [text_of(d, fields, separator) for d in docs],
            top_k=self.top_k if top_k is None else top_k,
            score_threshold=self.score_threshold if score_threshold is None else score_threshold,
        )
        stamp = {RERANKER_KEY: ranking.fingerprint}
        ranked = [replace(docs[r.index], score=r.score) for r in ranking]
        return {"documents": [replace(d, meta={**d.meta, **stamp}) for d in ranked]}


def _deduplicate(documents: list[Document]) -> list[Document]:
    best: dict[str, Document] = {}
    for doc in documents:
        kept = best.setdefault(doc.id, doc)
        if doc.score is not None and (kept.score is None or doc.score > kept.score):
            best[doc.id] = doc
    return list(best.values())


@component
class ContractCrossEncoderRanker(_ContractRanker):
    """Ranks documents with a cross-encoder pinned by a ``cross_encoder`` reranker contract.

    A drop-in for Haystack's ``SentenceTransformersSimilarityRanker``, whose loose arguments
    (prefixes, ``scale_score``, truncation) the contract fixes, so every score has one recipe.

    Args:
        contract: a :class:`~ctxemb_core.rerank.RerankerContract`, its ``to_dict()``, or the
            path of its JSON file (see :func:`~ctxemb_core.rerank.rerank_contract_for`); or:
        model: a cross-encoder's name or folder, as ``SentenceTransformersSimilarityRanker``
            takes it, read with :func:`~ctxemb_core.rerank.rerank_contract_for` (its options,
            ``activation=``, ``max_tokens=``, …, as keywords); ``to_dict`` stores the contract.
        top_k: the most documents returned.
        score_threshold: keep scores at or above it: a number (set under ``contract``) or a
            :class:`~ctxemb_core.rerank.ScoreThreshold` (or its dict). Serialised with its
            contract, so a pipeline whose contract is edited later refuses it
            (:class:`~ctxemb_core.errors.RerankerMismatchError` naming the fields).
        meta_fields_to_embed, embedding_separator: metadata values scored before the content
            and what joins them; a document without content is scored as ``""`` plus those.
        path, backend, device, batch_size, token_budget: as the core reranker's (defaults
            ``"auto"``, ``"cpu"``, 32, 4096), as keywords. ``path``
            (where the model was, as ``to_dict`` records it) is checked as the core reranker's
            is: a folder whose weights changed since is refused (``RerankerMismatchError``);
            one that is gone, on another machine, is passed over for the contract's model.
        progress_bar: show a progress bar on long work.

    Example:
        >>> ranker = ContractCrossEncoderRanker(contract=rerank_contract_for("./ce"), top_k=3)
        >>> ranker.run(query="tea", documents=docs)["documents"]  # doctest: +SKIP
    """

    _kind = RerankKind.CROSS_ENCODER


@component
class ContractLateInteractionRanker(_ContractRanker):
    """Ranks documents by MaxSim over token vectors, under a ``late_interaction`` contract.

    Arguments as :class:`ContractCrossEncoderRanker`; the contract pins the token encoder,
    markers, query length, skipped tokens and per-token normalisation.

    Example:
        >>> ranker = ContractLateInteractionRanker(contract=rerank_contract_for(enc_contract))
        >>> ranker.run(query="tea", documents=docs)["documents"]  # doctest: +SKIP
    """

    _kind = RerankKind.LATE_INTERACTION
