"""Haystack rankers driven by a reranker contract: one component per reranker regime."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from ctxemb_core.components import component_contract
from ctxemb_core.documents import RERANKER_KEY
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.rerank import (
    LazyReranker,
    Reranker,
    RerankerContract,
    RerankKind,
    ScoreThreshold,
    load_reranker_contract,
    rerank_contract_for,
)
from ctxemb_core.rerank import as_threshold as _threshold
from ctxemb_core.validate import check_positive_int


class _ContractRanker:
    _kind: RerankKind  # the regime each subclass takes

    def __init__(
        self,
        *,
        contract: RerankerContract | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        model: str | os.PathLike[str] | None = None,
        top_k: int = 10,
        score_threshold: float | ScoreThreshold | Mapping[str, Any] | None = None,
        meta_fields_to_embed: list[str] | None = None,
        embedding_separator: str = "\n",
        path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 32,
        token_budget: int = 4096,
        progress_bar: bool = False,
        **options: Any,
    ) -> None:
        # model= and the reranker contract's options, as Haystack's own rankers take a model;
        # serialised as the contract they resolved to.
        resolved = component_contract(
            contract,
            model,
            options,
            component=type(self).__name__,
            derive=rerank_contract_for,
            load=load_reranker_contract,
        )
        # Settings are checked now; the model loads on warm_up (or the first run).
        self._lazy = LazyReranker(
            resolved,
            path=path,
            backend=backend,
            device=device,
            batch_size=batch_size,
            token_budget=token_budget,
            show_progress=progress_bar,
        )
        self.contract = self._lazy.contract
        if self.contract.kind is not self._kind:
            raise InvalidInputError(
                f"{type(self).__name__} takes a {self._kind.value} contract, got a "
                f"{self.contract.kind.value} one (each reranker regime has its own ranker)"
            )
        self.top_k = check_positive_int(top_k, "top_k")
        self.score_threshold = _threshold(score_threshold, self.contract)
        self.meta_fields_to_embed = list(meta_fields_to_embed or [])
        self.embedding_separator = embedding_separator
        self.progress_bar = progress_bar

    @property
    def reranker(self) -> Reranker | None:
        """The core reranker once :meth:`warm_up` (or the first run) built it, else ``None``."""
        return self._lazy.built

    def warm_up(self) -> None:
        """Load the model (once; later calls do nothing)."""
        self._lazy.get()

    def to_dict(self) -> dict[str, Any]:
        c = self._lazy.config
        threshold = self.score_threshold
        return default_to_dict(
            self,
            contract=c["contract"],
            top_k=self.top_k,
            score_threshold=None if threshold is None else threshold.to_dict(),
            meta_fields_to_embed=self.meta_fields_to_embed,
            embedding_separator=self.embedding_separator,
            path=c["path_hint"],
            **{k: c[k] for k in Reranker.run_settings.names},
            progress_bar=self.progress_bar,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        return default_from_dict(cls, data)  # a threshold of another contract is refused

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
        if not isinstance(documents, list) or not all(isinstance(d, Document) for d in documents):
            raise TypeError(
                f"{type(self).__name__} expects a list of Documents, got {type(documents).__name__}"
            )
        docs = _deduplicate(documents)
        ranking = self._lazy.get().rerank(
            query,
            [self._text(d) for d in docs],
            top_k=self.top_k if top_k is None else top_k,
            score_threshold=self.score_threshold if score_threshold is None else score_threshold,
        )
        stamp = {RERANKER_KEY: ranking.fingerprint}
        ranked = [replace(docs[r.index], score=r.score) for r in ranking]
        return {"documents": [replace(d, meta={**d.meta, **stamp}) for d in ranked]}

    def _text(self, doc: Document) -> str:
        # As Haystack's rankers and ContractDocumentEmbedder: a missing content is "".
        keys = self.meta_fields_to_embed
        fields = [str(doc.meta[k]) for k in keys if doc.meta.get(k) is not None]
        return self.embedding_separator.join([*fields, doc.content or ""])


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
        path, backend, device, batch_size, token_budget: as the core reranker's. ``path``
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
