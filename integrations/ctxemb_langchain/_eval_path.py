"""The evaluation path through a guarded LangChain vector store, whichever store it is.

:func:`~ctxemb_langchain.eval_path` picks the stores (the in-memory ones here, ``._eval_<store>``
for another); all build on the path and the pair key here. The loop is
core's (:class:`~ctxemb_core.eval.frameworks.FrameworkPath`); here are LangChain's calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core.eval.frameworks import PAIR_KEY, FrameworkPath, MemoryStores
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._store import ContractVectorStore

__all__ = ["PAIR_KEY", "LangChainPath"]

# Ids asked of the store at once.
_IDS = 1000


class _MemoryStores(MemoryStores):
    """A new guarded ``InMemoryVectorStore`` for the documents and for each block of pairs."""

    embedder: ContractEmbeddings

    def make(self, pairs: bool) -> ContractVectorStore:
        return ContractVectorStore(InMemoryVectorStore(self.embedder))

    def pair_filter(self, pair: str) -> Callable[[Document], bool]:
        return lambda document: document.metadata.get(PAIR_KEY) == pair

    def similarities(
        self, store: ContractVectorStore, query: str, found: list[tuple[Document, float]]
    ) -> list[float]:
        """``InMemoryVectorStore`` scores by cosine: the contract's similarity when it
        normalises; otherwise the inner product is that cosine times both lengths."""
        scores = [float(s) for _, s in found]
        if self.embedder.contract.normalize or not found:
            return scores
        inner: InMemoryVectorStore = store.store  # type: ignore[assignment]
        q = float(np.linalg.norm(self.embedder.embed_query(query)))
        lengths = [float(np.linalg.norm(inner.store[str(d.id)]["vector"])) for d, _ in found]
        return [s * q * d for s, d in zip(scores, lengths, strict=True)]


class LangChainPath(FrameworkPath):
    """:class:`ContractEmbeddings` made from ``embedder`` (its settings and cache), in a guarded
    vector store of one kind: texts go in by ``add_texts``, queries by the store's scored search
    (``similarity_search_with_score``), whose score the store's side turns into the contract's
    similarity (``stores.similarities``).

    Args:
        store: ``"memory"`` (``InMemoryVectorStore`` in a :class:`ContractVectorStore`, exact
            search; ``--via langchain``), ``"chroma"`` (:class:`ContractChroma`;
            ``--via langchain-chroma``) or ``"pgvector"`` (:class:`ContractPGVector`;
            ``--via langchain-pgvector``).

    Example:
        >>> path = eval_path(Embedder(contract_for("all-MiniLM-L6-v2")))
        >>> path.index({"d1": "Green tea is steamed."})  # doctest: +SKIP
        1
    """

    framework = "langchain"
    memory = _MemoryStores
    component = ContractEmbeddings
    embedder: ContractEmbeddings

    def store(self, pairs: bool = False, block: int = 0) -> Any:
        """The documents' store (or a block of sentence pairs'), opened on first use
        (:meth:`~ctxemb_core.eval.frameworks.FrameworkPath.opened`)."""
        return self.opened(pairs, block)

    def open(self, pairs: bool) -> Any:
        return self.stores.make(pairs)

    def present(self, opened: Any, ids: list[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(ids), _IDS):
            found.update(str(d.id) for d in opened.get_by_ids(ids[start : start + _IDS]))
        return found

    def write(
        self, opened: Any, ids: list[str], texts: list[str], metadatas: list[dict[str, str]] | None
    ) -> int:
        opened.add_texts(texts, metadatas, ids=ids)
        return len(ids)

    def retrieve(
        self, opened: Any, text: str, k: int, pair: str | None = None
    ) -> list[tuple[str, float]]:
        where = {} if pair is None else {"filter": self.stores.pair_filter(pair)}
        found = opened.similarity_search_with_score(text, k=k, **where)
        scores = self.stores.similarities(opened, text, found)
        return [(str(d.id), s) for (d, _), s in zip(found, scores, strict=True)]
