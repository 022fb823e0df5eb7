"""Two-stage search: a bi-encoder shortlist from a stamped index, then a rerank.

A cross-encoder reads every (query, document) pair jointly, so it cannot be the retriever: the
seed reference's failure mode "a cross-encoder is too slow to serve as the retriever". The
answer is two stages. The bi-encoder (an :class:`~ctxemb_core.Embedder` over a stamped index)
returns ``k`` candidates, its stamp checked before anything leaves the index; a
:class:`~ctxemb_core.rerank.Reranker` orders them and keeps ``n``. The result names both
contracts: the index's fingerprint and the reranker's.

Any store serves as the first stage through a *shortlist* callable ``(query, k) -> Shortlist``;
a store adapter's ``shortlist`` is :func:`index_shortlist` over its guarded index with its own
filters (``ctxemb_chroma.search``, ``ctxemb_pgvector.search``), and the Haystack and LangChain
adapters compose the same two stages in their own pipelines (retriever, then ranker/compressor).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.records import similarity
from ctxemb_core.rerank._base import Reranker
from ctxemb_core.rerank.contract import RerankerContract, ScoreThreshold
from ctxemb_core.validate import check_flag, check_positive_int, check_text

__all__ = [
    "Candidate",
    "Hit",
    "Shortlist",
    "TwoStageResult",
    "index_shortlist",
    "shortlist_of",
    "two_stage",
]

_FINGERPRINT_LEN = 64


@dataclass(frozen=True)
class Candidate:
    """One first-stage candidate.

    Attributes:
        id: its id in the index.
        text: its stored text (what the reranker reads).
        score: its first-stage similarity under the index's embedding contract.
        metadata: its stored metadata, if any.
    """

    id: str
    text: str
    score: float
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Shortlist:
    """What a first stage returns: candidates best first, and the stamp it checked.

    Attributes:
        candidates: the candidates, best first.
        index_fingerprint: the embedding contract fingerprint of the index's stamp, checked
            against the querying contract before the candidates were read.
    """

    candidates: tuple[Candidate, ...]
    index_fingerprint: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", tuple(self.candidates))
        fp = self.index_fingerprint
        if not isinstance(fp, str) or len(fp) != _FINGERPRINT_LEN:
            raise InvalidInputError(
                f"a shortlist names the index's contract fingerprint (64 hex digits), got {fp!r}"
            )
        ids = [c.id for c in self.candidates]
        if len(set(ids)) != len(ids):
            raise InvalidInputError("a shortlist holds a candidate id twice")


@dataclass(frozen=True)
class Hit:
    """One result of a two-stage search.

    Attributes:
        id: the document's id.
        text: its text.
        score: its rerank score (under the reranker's contract).
        first_score: its first-stage similarity (under the index's contract).
        first_rank: its 0-based place in the shortlist.
        metadata: its stored metadata, if any.
    """

    id: str
    text: str
    score: float
    first_score: float
    first_rank: int
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class TwoStageResult:
    """The reranked hits of one query and what produced them.

    Attributes:
        hits: the kept documents, best rerank score first.
        index_fingerprint: the embedding contract of the index (its stamp was checked).
        reranker: the reranker's contract; ``reranker_fingerprint`` is its fingerprint.
        shortlisted: how many candidates the first stage returned (at most ``k``).
        shortlist_seconds: wall time of the first stage (embedding the query included).
        rerank_seconds: wall time of the rerank: what the second stage adds per query.
    """

    hits: tuple[Hit, ...]
    index_fingerprint: str
    reranker: RerankerContract
    shortlisted: int
    shortlist_seconds: float = field(compare=False)
    rerank_seconds: float = field(compare=False)

    @property
    def reranker_fingerprint(self) -> str:
        return self.reranker.fingerprint

    @property
    def ids(self) -> list[str]:
        return [h.id for h in self.hits]

    def __iter__(self) -> Any:
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)


def two_stage(
    query: str,
    shortlist: Callable[[str, int], Shortlist],
    reranker: Reranker,
    *,
    k: int = 100,
    n: int = 10,
    score_threshold: float | ScoreThreshold | None = None,
) -> TwoStageResult:
    """``k`` candidates from a stamped index's bi-encoder, reranked to ``n``.

    Args:
        query: the query text.
        shortlist: the first stage, ``(query, k) -> Shortlist``; it must check the index's
            stamp before it returns candidates (``ctxemb_chroma.search`` builds one from a
            guarded collection).
        reranker: the second stage.
        k: candidates to shortlist.
        n: results to keep.
        score_threshold: keep hits scoring at least this under the reranker's contract; a
            :class:`ScoreThreshold` set under another contract is refused.

    Raises:
        InvalidInputError: ``n`` larger than ``k``, a bad query or count, or a first stage
            that returns something other than a :class:`Shortlist`.
        RerankerMismatchError: a threshold set under another reranker contract (checked
            before the first stage runs).
        ContractMismatchError: the index's stamp refused the querying contract (raised by the
            first stage; nothing is returned).

    Example:
        >>> result = two_stage("tea", shortlist, reranker, k=50, n=5)  # doctest: +SKIP
        >>> result.index_fingerprint, result.reranker_fingerprint  # doctest: +SKIP
    """
    query = check_text(query, "query")
    check_positive_int(k, "k")
    check_positive_int(n, "n")
    if n > k:
        raise InvalidInputError(f"n={n} results cannot come from k={k} candidates; use n <= k")
    if not isinstance(reranker, Reranker):
        raise InvalidInputError(
            f"reranker must be a ctxemb Reranker, got {type(reranker).__name__}"
        )
    # A threshold of another contract is refused before any work is done.
    if isinstance(score_threshold, ScoreThreshold):
        score_threshold.check(reranker.contract)
    started = time.perf_counter()
    found = shortlist(query, k)
    if not isinstance(found, Shortlist):
        raise InvalidInputError(
            f"the first stage must return a Shortlist, got {type(found).__name__}"
        )
    middle = time.perf_counter()
    candidates: Sequence[Candidate] = found.candidates[:k]
    ranked = reranker.rerank(
        query,
        [c.text for c in candidates],
        ids=[c.id for c in candidates],
        top_k=n,
        score_threshold=score_threshold,
    )
    finished = time.perf_counter()
    hits = tuple(
        Hit(
            id=candidates[r.index].id,
            text=r.text,
            score=r.score,
            first_score=candidates[r.index].score,
            first_rank=r.index,
            metadata=candidates[r.index].metadata,
        )
        for r in ranked
    )
    return TwoStageResult(
        hits,
        found.index_fingerprint,
        reranker.contract,
        len(candidates),
        middle - started,
        finished - middle,
    )


def shortlist_of(
    result: Mapping[str, Any],
    scores: Any,
    fingerprint: str,
    *,
    where: str,
    require_text: bool = True,
) -> Shortlist:
    """The shortlist of one query's search result in Chroma's shape (``ids``, ``documents``,
    ``metadatas``: lists of one query's list), with ``scores`` (the contract's similarity,
    higher is better) beside them; what every store's two-stage search builds.

    ``require_text=False`` keeps records stored without their text (with an empty text), for a
    caller that shows results rather than reranking them; ``where`` names the records in the
    refusal (``"records ... of 'docs'"``).

    Raises:
        InvalidInputError: a candidate stored without its text (nothing to rerank), unless
            ``require_text=False``.
    """
    ids, texts = list(result["ids"][0]), list(result["documents"][0])
    metadatas = (result.get("metadatas") or [[None] * len(ids)])[0]
    missing = [i for i, text in zip(ids, texts, strict=True) if not isinstance(text, str)]
    if missing and not check_flag(require_text, "require_text"):
        texts = [t if isinstance(t, str) else "" for t in texts]
    elif missing:
        raise InvalidInputError(
            f"{missing[:5]} {where} are stored without their text: a reranker reads the text, "
            "so they cannot be reranked (store the documents' texts)"
        )
    candidates = tuple(
        Candidate(i, t, float(s), m)
        for i, t, s, m in zip(ids, texts, scores, metadatas, strict=True)
    )
    return Shortlist(candidates, fingerprint)


def index_shortlist(
    guarded: Any,
    query: str,
    k: int,
    *,
    records: str,
    embedder: Any = None,
    require_text: bool = True,
    **filters: Any,
) -> Shortlist:
    """The ``k`` nearest records of ``query`` in a store adapter's guarded index, with their
    texts and the contract's similarities (higher is better): a store's ``shortlist``.

    ``guarded`` is the adapter's wrapper (``GuardedCollection``, ``GuardedTable``): its
    ``query`` checks the stamp (and ``embedder``'s contract) before anything is read and
    answers in Chroma's shape; its ``index`` (the guarded index) gives the space the distances
    are in and the stamp's fingerprint. ``filters`` are the store's own keywords of ``query``
    (``where``, ...; those that are ``None`` are left out); ``records`` names the records in a
    refusal (``"rows of 'docs'"``); ``require_text`` is :func:`shortlist_of`'s.

    Raises:
        InvalidInputError: a candidate stored without its text, unless ``require_text=False``.
        ContractMismatchError: ``embedder``'s contract is not the index's.
    """
    given = {key: value for key, value in filters.items() if value is not None}
    include = ["documents", "metadatas", "distances"]
    result = guarded.query([query], k, embedder=embedder, include=include, **given)
    index = guarded.index
    scores = similarity(result["distances"][0], index.verified_head.space, index.contract)
    fingerprint = index.stamp.fingerprint
    return shortlist_of(result, scores, fingerprint, where=records, require_text=require_text)
