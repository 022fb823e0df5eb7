"""The evaluation path through a guarded LangChain vector store, whichever store it is.

:func:`~ctxemb_langchain.eval_path` picks the stores (:mod:`._eval` for the in-memory one,
:mod:`._eval_chroma` for Chroma); both build on the path and the pair key here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxemb_core.eval.frameworks import PAIR_KEY, FrameworkPath
from ctxemb_core.eval.paths import check_documents, check_queries
from ctxemb_langchain._embeddings import ContractEmbeddings

__all__ = ["PAIR_KEY", "LangChainPath"]

# Texts per add_texts call (the embeddings plan their batches within one call).
_CHUNK = 2048
# Ids asked of the store at once.
_IDS = 1000


class LangChainPath(FrameworkPath):
    """A :class:`~ctxemb_core.eval.paths.SearchPath` through a guarded LangChain vector store
    (see :func:`eval_path`)."""

    embedder: ContractEmbeddings

    def store(self, pairs: bool = False, block: int = 0) -> Any:
        """The documents' store (or a block of sentence pairs'), opened on first use
        (:meth:`~ctxemb_core.eval.frameworks.FrameworkPath.opened`)."""
        return self.opened(pairs, block)

    def open(self, pairs: bool) -> Any:
        return self.stores.make(pairs)

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

    def add_pairs(self, opened: Any, ids: list[str], texts: list[str]) -> None:
        self._add(opened, dict(zip(ids, texts, strict=True)), PAIR_KEY)

    def pair_search(self, opened: Any, text: str, pair: str) -> list[float]:
        found = opened.similarity_search_with_score(text, k=1, filter=self.stores.pair_filter(pair))
        scores: list[float] = self.stores.similarities(opened, text, found)
        return scores

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
