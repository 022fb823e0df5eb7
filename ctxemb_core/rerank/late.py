"""Late interaction: MaxSim over per-token vectors (ColBERT), under a reranker contract.

A query and a document are each a matrix of token vectors, and the score is

    score(q, d) = Σ_i max_j q_i · d_j

(plain dot products; with unit-length token vectors, a sum of cosines). Document token vectors
do not depend on the query, so they can be computed once and kept: :class:`TokenVectorStore`
keeps them under the reranker contract's fingerprint, so vectors made under one contract are
never served to another. The MaxSim kernels live in :mod:`ctxemb_core.rerank.kernels`, the
store and its file format in :mod:`ctxemb_core.rerank.token_store`; this module is the reranker
(and still exports ``maxsim``, ``EMPTY_SCORE`` and ``TokenVectorStore``).

Example:
    >>> from ctxemb_core.rerank import LateInteractionReranker, TokenVectorStore
    >>> reranker = LateInteractionReranker(contract, store=TokenVectorStore("./tokens"))
    >>> reranker.rerank("tea", ["green tea", "bicycles"], ids=["t", "b"])[0].id  # doctest: +SKIP
    't'
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.contract import Role
from ctxemb_core.embedder import Embedder, TokenEmbeddings
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.pooling import l2_normalize
from ctxemb_core.rerank._base import Reranker, Reranking
from ctxemb_core.rerank.contract import (
    RerankerContract,
    RerankKind,
    ScoreThreshold,
    SkipTokens,
)
from ctxemb_core.rerank.kernels import (
    _GATHER_BELOW,  # noqa: F401  (kept importable here: tests reach the kernels through late)
    _MLAS_MIN_FLOPS,  # noqa: F401
    EMPTY_SCORE,
    _matmul,  # noqa: F401
    _mlas_session,  # noqa: F401
    maxsim,
)
from ctxemb_core.rerank.token_store import TokenVectorStore, check_token_vectors
from ctxemb_core.validate import check_text, check_texts

__all__ = ["EMPTY_SCORE", "LateInteractionReranker", "TokenVectorStore", "maxsim"]


# -- the reranker ------------------------------------------------------------------------------


class LateInteractionReranker(Reranker):
    """Scores documents by MaxSim over per-token vectors, under a late-interaction contract.

    Any encoder serves: the contract's ``encoder`` (an
    :class:`~ctxemb_core.EmbeddingContract`) gives the token vectors through the
    :class:`~ctxemb_core.Embedder`'s token path. How a text becomes its token matrix:

    1. the contract's marker (``query_prefix`` / ``document_prefix``, ColBERT's ``[Q] ``/``[D] ``)
       is read before the text, after the encoder contract's own role prefix (whose tokens are
       always dropped);
    2. with ``query_length``, a query is cut at that many tokens and padded up to it with the
       tokenizer's mask token (ColBERT's query expansion; the network attends to the masks);
    3. ``skip`` drops special tokens and the marker's tokens (both sides; never the expansion
       tokens) and punctuation-only tokens (the document side, as ColBERT does);
    4. the encoder folder's dense heads (a ``Dense`` module: ColBERT's linear projection) are
       applied to each token, so vectors have the encoder contract's ``dimension``;
    5. with ``token_normalize``, each token vector is scaled to unit length.

    The encoder contract's pooling, Matryoshka truncation and precision play no part. Document
    token vectors can be given (``token_vectors=``), or kept in a :class:`TokenVectorStore`
    under this contract's fingerprint (``store=``; looked up by ``ids=``).

    Args:
        contract: a ``late_interaction`` :class:`~ctxemb_core.rerank.RerankerContract` (or its
            ``to_dict()`` / JSON).
        path: the encoder's model folder; found from the contract if omitted.
        backend, device, batch_size, token_budget, show_progress: as the
            :class:`~ctxemb_core.Embedder`'s, for the token encoder.
        store: where document token vectors are kept between calls (``None``: nowhere); a
            local resource, so not part of :meth:`config`.

    Raises:
        InvalidInputError: a contract of another kind, or a store that is not a
            :class:`TokenVectorStore`.

    Example:
        >>> reranker = LateInteractionReranker(contract, store=TokenVectorStore())
        >>> ranking = reranker.rerank("tea", ["green tea", "bicycles"], ids=["t", "b"])
        >>> ranking.ids, ranking.fingerprint == contract.fingerprint  # doctest: +SKIP
        (['t', 'b'], True)
    """

    def __init__(
        self,
        contract: RerankerContract | Mapping[str, Any] | str,
        *,
        path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 32,
        token_budget: int = 4096,
        show_progress: bool | None = None,
        store: TokenVectorStore | None = None,
    ) -> None:
        super().__init__(
            contract,
            path=path,
            backend=backend,
            device=device,
            batch_size=batch_size,
            token_budget=token_budget,
            show_progress=show_progress,
        )
        if self.contract.kind is not RerankKind.LATE_INTERACTION:
            raise InvalidInputError(
                "LateInteractionReranker needs a late_interaction contract, got "
                f"kind={self.contract.kind.value!r}; use CrossEncoderReranker (or reranker_for, "
                "which picks the regime) for it"
            )
        if store is not None and not isinstance(store, TokenVectorStore):
            raise InvalidInputError(
                f"store must be a TokenVectorStore or None, got {type(store).__name__}"
            )
        assert self.contract.encoder is not None
        #: Where document token vectors are kept between calls, if anywhere.
        self.store = store
        self._skip = frozenset(self.contract.skip)
        self._embedder = Embedder(
            self.contract.encoder,
            path=path,
            backend=backend,
            device=device,
            batch_size=batch_size,
            token_budget=token_budget,
            show_progress=show_progress,
        )

    @property
    def embedder(self) -> Embedder:
        """The token encoder's :class:`~ctxemb_core.Embedder`."""
        return self._embedder

    @property
    def dimension(self) -> int:
        """The width of every token vector (the encoder contract's ``dimension``)."""
        assert self.contract.encoder is not None
        return self.contract.encoder.dimension

    # -- token vectors -------------------------------------------------------------------------

    def query_vectors(self, query: str) -> np.ndarray:
        """The query's ``(tokens, dimension)`` float32 token matrix under the contract."""
        query = check_text(query, "query")
        c = self.contract
        toks = self._embedder.embed_token_batch(
            [query],
            role=Role.QUERY,
            keep_special=True,
            marker=c.query_prefix,
            expand_to=c.query_length,
            dense=True,
        )[0]
        return self._matrix(toks, document=False)

    def document_vectors(self, documents: Sequence[str]) -> list[np.ndarray]:
        """Each document's ``(tokens, dimension)`` float32 token matrix, in input order.

        Batched by the token budget; what :class:`TokenVectorStore` keeps and what
        ``token_vectors=`` takes.
        """
        docs = check_texts(documents, "documents", single="wrap a single document in a list")
        if not docs:
            return []
        toks = self._embedder.embed_token_batch(
            docs,
            role=Role.DOCUMENT,
            keep_special=True,
            marker=self.contract.document_prefix,
            dense=True,
        )
        return [self._matrix(t, document=True) for t in toks]

    def _matrix(self, toks: TokenEmbeddings, *, document: bool) -> np.ndarray:
        keep = np.ones(len(toks.tokens), dtype=bool)
        if SkipTokens.SPECIAL in self._skip:
            keep &= ~toks.special
        if SkipTokens.MARKER in self._skip:
            keep &= ~toks.marker
        if document and SkipTokens.PUNCTUATION in self._skip:
            keep &= ~_punctuation(toks)
        keep |= toks.expansion
        vectors = toks.vectors[keep]
        if self.contract.token_normalize:
            vectors = l2_normalize(vectors)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    # -- scoring -------------------------------------------------------------------------------

    def score(
        self,
        query: str,
        documents: Sequence[str],
        *,
        ids: Sequence[str] | None = None,
        token_vectors: Sequence[Any] | None = None,
        **inputs: Any,
    ) -> np.ndarray:
        """The MaxSim score of each document for ``query``, in input order (float32).

        Args:
            query: the query.
            documents: the candidate texts.
            ids: an id per document: with a ``store``, their token vectors are read from it
                (and the missing ones computed and stored).
            token_vectors: pre-computed token matrices, one per document (as
                :meth:`document_vectors` gives them); neither computed nor stored.
        """
        return super().score(query, documents, token_vectors=token_vectors, _ids=ids, **inputs)

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        ids: Sequence[str] | None = None,
        top_k: int | None = None,
        score_threshold: float | ScoreThreshold | None = None,
        token_vectors: Sequence[Any] | None = None,
        **inputs: Any,
    ) -> Reranking:
        """Documents ordered by MaxSim, best first (see :meth:`Reranker.rerank`).

        ``ids`` also key the ``store``; ``token_vectors`` are as in :meth:`score`.
        """
        return super().rerank(
            query,
            documents,
            ids=ids,
            top_k=top_k,
            score_threshold=score_threshold,
            token_vectors=token_vectors,
            _ids=ids,
            **inputs,
        )

    def _scores(self, query: str, documents: list[str], **inputs: Any) -> np.ndarray:
        given = inputs.pop("token_vectors", None)
        ids = inputs.pop("_ids", None)
        if inputs:
            raise InvalidInputError(
                f"unknown inputs {sorted(inputs)}; a LateInteractionReranker takes ids= and "
                "token_vectors="
            )
        if given is not None:
            docs = self._given(given, len(documents))
        else:
            docs = self._stored(documents, ids)
        return maxsim(self.query_vectors(query), docs)

    def _given(self, vectors: Any, count: int) -> list[np.ndarray]:
        docs = check_token_vectors(vectors, count, self.dimension, "token_vectors")
        if self.contract.token_normalize:
            for j, d in enumerate(docs):
                norms = np.linalg.norm(d, axis=1)
                if len(norms) and not np.allclose(norms, 1.0, atol=1e-3):
                    raise InvalidInputError(
                        f"token_vectors[{j}] are not unit length, and this contract has "
                        "token_normalize=True: they were made under another contract. Use "
                        "document_vectors() of this reranker"
                    )
        return docs

    def _stored(self, documents: list[str], ids: Any) -> list[np.ndarray]:
        if ids is None or self.store is None:
            return self.document_vectors(documents)
        keys = check_texts(ids, "ids", single="wrap a single id in a list")
        if len(keys) != len(documents):
            raise InvalidInputError(f"ids has {len(keys)} items for {len(documents)} documents")
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            j = first.setdefault(key, i)
            if documents[j] != documents[i]:
                raise InvalidInputError(
                    f"ids[{j}] and ids[{i}] are both {key!r} for different texts; an id keys "
                    "one document's token vectors in the store"
                )
        found = self.store.get(self.contract, keys, texts=documents)
        missing = [k for k, i in first.items() if found[i] is None]
        if missing:
            texts = [documents[first[k]] for k in missing]
            computed = self.document_vectors(texts)
            self.store.put(self.contract, missing, computed, texts=texts)
            made = dict(zip(missing, computed, strict=True))
            found = [made.get(k, v) if v is None else v for k, v in zip(keys, found, strict=True)]
        return [v for v in found if v is not None]


def _punctuation(toks: TokenEmbeddings) -> np.ndarray:
    """Per token: a text token made only of punctuation (``string.punctuation`` or Unicode P*)."""
    out = np.zeros(len(toks.tokens), dtype=bool)
    plain = ~(toks.special | toks.marker | toks.expansion)
    for i, (s, e) in enumerate(toks.offsets):
        if plain[i] and e > s:
            out[i] = all(
                ch in string.punctuation or unicodedata.category(ch).startswith("P")
                for ch in toks.text[s:e]
            )
    return out
