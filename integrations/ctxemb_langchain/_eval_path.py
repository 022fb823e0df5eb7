"""The evaluation path through a guarded LangChain vector store, whichever store it is.

:func:`~ctxemb_langchain.eval_path` picks the stores (:mod:`._eval` for the in-memory one,
:mod:`._eval_chroma` for Chroma); both build on the path and the pair key here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxemb_core.errors import CtxembError
from ctxemb_core.eval.paths import check_documents, check_pairs, check_queries
from ctxemb_langchain._embeddings import ContractEmbeddings

__all__ = ["PAIR_KEY", "LangChainPath"]

#: The metadata key that holds a sentence pair's id (what ``pair_scores`` filters on).
PAIR_KEY = "ctxemb_pair"
# Texts per add_texts call (the embeddings plan their batches within one call).
_CHUNK = 2048
# Ids asked of the store at once.
_IDS = 1000


class LangChainPath:
    """A :class:`~ctxemb_core.eval.paths.SearchPath` through a guarded LangChain vector store
    (see :func:`eval_path`)."""

    def __init__(self, via: str, embeddings: ContractEmbeddings, stores: Any) -> None:
        self.via = via
        self.embeddings = embeddings
        self.stores = stores
        self._opened: dict[tuple[bool, int], Any] = {}
        self._closed = False

    @property
    def fingerprint(self) -> str:
        return self.embeddings.fingerprint

    def store(self, pairs: bool = False, block: int = 0) -> Any:
        """The documents' store (or that of a block of sentence pairs: pair ``n`` is kept in
        block ``n // stores.pairs_per_store``; Chroma keeps all in one), opened on first use."""
        if self._closed:
            raise CtxembError(f"this {self.via!r} evaluation path is closed")
        key = (pairs, block if pairs else 0)
        if key not in self._opened:
            self._opened[key] = self.stores.make(pairs)
        return self._opened[key]

    def index(self, documents: Mapping[str, str]) -> int:
        ids, texts = check_documents(documents)
        return self._add(self.store(), dict(zip(ids, texts, strict=True)), None)

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        qids, texts, k = check_queries(queries, k)
        store = self.store()
        run: dict[str, dict[str, float]] = {}
        for qid, text in zip(qids, texts, strict=True):
            found = store.similarity_search_with_score(text, k=k)
            scores = self.stores.similarities(store, text, found)
            run[qid] = {str(d.id): s for (d, _), s in zip(found, scores, strict=True)}
        return run

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        first, second = check_pairs(first, second)
        # The id names the stored sentence and its place, so a kept store is never stale.
        ids = [f"{i}-{hashlib.sha256(s.encode()).hexdigest()[:16]}" for i, s in enumerate(second)]
        size = self.stores.pairs_per_store or len(ids)
        scores = np.empty(len(first), dtype=np.float64)
        for start in range(0, len(ids), size):
            store = self.store(pairs=True, block=start // size)
            block = range(start, min(start + size, len(ids)))
            self._add(store, {ids[n]: second[n] for n in block}, PAIR_KEY)
            for n in block:
                found = store.similarity_search_with_score(
                    first[n], k=1, filter=self.stores.pair_filter(ids[n])
                )
                if len(found) != 1:
                    raise CtxembError(
                        f"pair {ids[n]!r}: the store returned {len(found)} documents, not 1"
                    )
                scores[n] = self.stores.similarities(store, first[n], found)[0]
        return scores

    def close(self) -> None:
        """Close the client this path opened (again: nothing happens)."""
        if self._closed:
            return
        self._closed = True
        self._opened.clear()
        self.stores.close()

    def _add(self, store: Any, documents: dict[str, str], key: str | None) -> int:
        ids = list(documents)
        present: set[str] = set()
        for start in range(0, len(ids), _IDS):
            present.update(str(d.id) for d in store.get_by_ids(ids[start : start + _IDS]))
        new = [i for i in ids if i not in present]
        for start in range(0, len(new), _CHUNK):
            chunk = new[start : start + _CHUNK]
            metas = [{key: i} for i in chunk] if key else None
            store.add_texts([documents[i] for i in chunk], metas, ids=chunk)
        return len(new)
