"""LangChain document compressors that rerank under a reranker contract, one per regime."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, InstanceOf, PrivateAttr

from ctxemb_core.components import ContractComponent, reranker_contract
from ctxemb_core.documents import RERANKER_KEY
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.rerank import (
    Reranker,
    RerankerContract,
    RerankKind,
    ScoreThreshold,
    as_threshold,
    check_settings,
    reranker_for,
)
from ctxemb_core.validate import check_positive_int, check_text

#: A reranked document's score (LangChain's key); RERANKER_KEY names the contract of its scale.
SCORE_KEY = "relevance_score"
_SETTINGS = ("path", "backend", "device", "batch_size", "token_budget")


class _Built:
    """The core reranker, built on first use; a copy (pickle, deepcopy) starts without it."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.reranker: Reranker | None = None
        self.lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Built, ())


class _ContractReranker(ContractComponent, BaseDocumentCompressor):
    """What both compressors share; each subclass names the regime it takes."""

    _kind: ClassVar[RerankKind]

    contract: InstanceOf[RerankerContract]
    top_n: int | None = 3
    score_threshold: InstanceOf[ScoreThreshold] | None = None
    path: str | None = None
    backend: str = "auto"
    device: str = "cpu"
    batch_size: int = 32
    token_budget: int = 4096

    model_config = ConfigDict(extra="forbid")
    _built: _Built = PrivateAttr(default_factory=_Built)

    def __init__(
        self,
        contract: RerankerContract | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        model_name: str | os.PathLike[str] | None = None,
        top_n: int | None = 3,
        score_threshold: float | ScoreThreshold | Mapping[str, Any] | None = None,
        path: str | os.PathLike[str] | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 32,
        token_budget: int = 4096,
        **options: Any,
    ) -> None:
        # Checked here rather than by pydantic, so a bad value raises ctxemb's typed error.
        # model_name= and the contract's options, as HuggingFaceCrossEncoder takes a model.
        found = reranker_contract(
            contract,
            model_name,
            options,
            component=type(self).__name__,
            kind=self._kind,
            model_keyword="model_name",
            others={c._kind: c.__name__ for c in _ContractReranker.__subclasses__()},
        )
        path = None if path is None else os.fspath(path)
        values = (path, backend, device, batch_size, token_budget)
        settings: dict[str, Any] = dict(zip(_SETTINGS, values, strict=True))
        check_settings(backend, device, batch_size, token_budget)
        if top_n is not None:
            check_positive_int(top_n, "top_n")
        # Kept with the contract it was set under; one of another contract is refused here.
        threshold = as_threshold(score_threshold, found)
        settings |= {"contract": found, "top_n": top_n, "score_threshold": threshold}
        super().__init__(**settings)

    def _shown(self) -> dict[str, Any]:
        return {"top_n": self.top_n}

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._built.reranker is not None

    @property
    def reranker(self) -> Reranker:
        """The core reranker (built once, on first use; again if the settings were changed)."""
        settings, built = self.model_dump(include=set(_SETTINGS)), self._built
        key = (self.contract.fingerprint, *(settings[k] for k in _SETTINGS))
        with built.lock:
            if built.reranker is None or built.key != key:
                built.reranker = reranker_for(self.contract, **settings, show_progress=False)
                built.key = key
            return built.reranker

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Copies of the best ``top_n`` documents scoring at least ``score_threshold``, best
        first (ties in input order), with ``relevance_score`` and ``ctxemb_reranker`` (the
        contract's fingerprint) in their metadata; ``acompress_documents`` runs this on a thread.

        Raises:
            InvalidInputError: ``query`` is not a string, ``documents`` not Documents.
            RerankerMismatchError: a threshold of another contract (after a ``model_copy``).
        """
        query = check_text(query, "query")
        if isinstance(documents, (str, bytes)) or not isinstance(documents, Sequence):
            raise InvalidInputError(f"documents must be a list, got {type(documents).__name__}")
        for i, doc in enumerate(documents):
            if not isinstance(doc, Document):
                raise InvalidInputError(f"documents[{i}] is a {type(doc).__name__}, not a Document")
        if not documents:
            return []
        texts, threshold = [d.page_content for d in documents], self.score_threshold
        ranking = self.reranker.rerank(query, texts, top_k=self.top_n, score_threshold=threshold)
        meta = {RERANKER_KEY: ranking.fingerprint}
        return [
            documents[r.index].model_copy(
                update={"metadata": {**documents[r.index].metadata, SCORE_KEY: r.score, **meta}}
            )
            for r in ranking
        ]


class ContractCrossEncoderReranker(_ContractReranker):
    """Reranks retrieved documents with a cross-encoder pinned by a reranker contract.

    LangChain's ``CrossEncoderReranker`` under a contract: the pair's form, truncation and
    activation are the contract's, and each returned document names it.

    Args:
        contract: a ``cross_encoder`` :class:`~ctxemb_core.rerank.RerankerContract`, its
            ``to_dict()``, or the path of its JSON file; or instead:
        model_name: a cross-encoder's name or folder, as ``HuggingFaceCrossEncoder`` takes it,
            read with :func:`~ctxemb_core.rerank.rerank_contract_for` (its options as keywords).
        top_n: the most documents returned (``None``: all that pass the threshold).
        score_threshold: keep documents scoring at least this: a number (set under
            ``contract``) or a :class:`~ctxemb_core.rerank.ScoreThreshold` (or its dict); one
            set under another contract is refused (``RerankerMismatchError`` naming fields).
        path: the model folder; used when it holds the contract's weights.
        backend: ``"auto"`` (ONNX Runtime, else torch), ``"onnx"`` or ``"torch"``.
        device, batch_size, token_budget: as the core reranker's.

    Example:
        >>> reranker = ContractCrossEncoderReranker(rerank_contract_for("./ce"), top_n=3)
        >>> ContextualCompressionRetriever(  # doctest: +SKIP
        ...     base_compressor=reranker, base_retriever=store.as_retriever(k=20)
        ... ).invoke("how is green tea made")
    """

    _kind = RerankKind.CROSS_ENCODER


class ContractLateInteractionReranker(_ContractReranker):
    """Reranks retrieved documents by MaxSim over token vectors, under a reranker contract.

    Arguments as :class:`ContractCrossEncoderReranker`'s; the ``late_interaction`` contract
    pins the token encoder, markers, query length, skipped tokens and per-token normalisation.

    Example:
        >>> reranker = ContractLateInteractionReranker(rerank_contract_for(encoder_contract))
        >>> reranker.compress_documents(docs, "how is green tea made")  # doctest: +SKIP
    """

    _kind = RerankKind.LATE_INTERACTION
