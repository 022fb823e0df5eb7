"""Evaluation paths: one index and its query side, under one contract, through one store.

``ctxemb eval --via NAME`` drives a :class:`SearchPath`. The core has one (:class:`MemoryPath`,
exact search in numpy); each store adapter has its own (``ctxemb_chroma.eval_path``,
``ctxemb_haystack.eval_path``, ``ctxemb_langchain.eval_path``), built from the adapter's public
pieces, so what is measured is what a user of that integration runs. A path returns
similarities (higher is better) with the contract's meaning: the store's distance is turned into
a score inside the store's adapter, never by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["VIAS", "SearchPath"]

#: Every ``--via`` of ``ctxemb eval``: the core's exact search, Chroma embedded and as a server,
#: and Haystack and LangChain each over their in-memory store and over Chroma.
VIAS = (
    "memory",
    "chroma",
    "chroma-server",
    "haystack",
    "haystack-chroma",
    "langchain",
    "langchain-chroma",
)


@runtime_checkable
class SearchPath(Protocol):
    """What an evaluation drives: index documents, search queries, score sentence pairs."""

    #: The ``--via`` name of this path.
    via: str

    @property
    def fingerprint(self) -> str:
        """The contract fingerprint that indexing and querying run under."""
        ...

    def index(self, documents: Mapping[str, str]) -> int:
        """Store the documents (``{id: text}``, document role) not stored yet.

        Returns:
            How many were added (0 when the index already held them all).
        """
        ...

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        """The top ``k`` stored documents of each query (query role).

        Returns:
            ``{query_id: {doc_id: similarity}}``, a run for :func:`ctxemb_core.eval.evaluate`.
        """
        ...

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        """The similarity of each pair, through the store.

        ``second[i]`` is stored (document role) and ``first[i]`` (query role) is searched
        against it alone, so the score is the store's own, turned into a similarity by its
        adapter. For a contract without role prefixes this is the symmetric cosine MTEB reports.

        Returns:
            ``(n,)`` float64 similarities.
        """
        ...

    def close(self) -> None:
        """Release what the path opened (clients, temporary stores, servers)."""
        ...
