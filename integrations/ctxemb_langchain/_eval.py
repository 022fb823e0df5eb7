"""``ctxemb eval --via langchain|langchain-chroma``: the vector stores a LangChain user runs.

Documents are added and queries searched through :class:`ContractVectorStore` over
``InMemoryVectorStore`` or through :class:`ContractChroma`, both with :class:`ContractEmbeddings`,
using the store's scored search (``similarity_search_with_score``). What a store returns is
turned into the contract's similarity here, so every path means one thing by a score: the
cosine for a normalised contract, the inner product otherwise. Sentence pairs are stored apart
(Chroma: the collection ``<collection>-pairs``), each with its pair id in the metadata, and each
first sentence is searched with a metadata filter on that id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core import Embedder
from ctxemb_core.errors import CtxembError, InvalidInputError
from ctxemb_core.eval.paths import check_documents, check_pairs, check_queries
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._store import ContractVectorStore

__all__ = ["LangChainPath", "eval_path"]

#: The metadata key that holds a sentence pair's id (what ``pair_scores`` filters on).
PAIR_KEY = "ctxemb_pair"
# Texts per add_texts call (the embeddings plan their batches within one call).
_CHUNK = 2048
# Ids asked of the store at once.
_IDS = 1000


def eval_path(
    embedder: Embedder,
    store: str = "memory",
    *,
    collection: str = "ctxemb-eval",
    path: str | None = None,
    host: str | None = None,
    port: int = 8000,
) -> LangChainPath:
    """The LangChain evaluation path of ``embedder``'s contract over one vector store.

    Args:
        embedder: the core Embedder; its contract, model folder and run settings make the
            :class:`ContractEmbeddings`, and its cache (if any) is theirs, so vectors embedded
            by another path are read back.
        store: ``"memory"`` (``InMemoryVectorStore`` in a :class:`ContractVectorStore`, exact
            search; ``--via langchain``) or ``"chroma"`` (:class:`ContractChroma`;
            ``--via langchain-chroma``).
        collection: the Chroma collection (sentence pairs go to ``<collection>-pairs``).
        path, host, port: Chroma only: an embedded folder, or a server.

    Example:
        >>> path = eval_path(Embedder(contract_for("all-MiniLM-L6-v2")))
        >>> path.index({"d1": "Green tea is steamed."})  # doctest: +SKIP
        1
    """
    embeddings = ContractEmbeddings(
        embedder.contract,
        path=embedder.model_path,
        backend=embedder.backend,
        device=embedder.device,
        batch_size=embedder.batch_size,
        token_budget=embedder.token_budget,
        show_progress=embedder.show_progress,
        cache=embedder.cache if embedder.cache is not None else False,
    )
    if store == "memory":
        return LangChainPath("langchain", embeddings, _MemoryStores(embeddings))
    if store != "chroma":
        raise InvalidInputError(f"store must be 'memory' or 'chroma', got {store!r}")
    from ctxemb_langchain._eval_chroma import ChromaStores

    stores = ChromaStores(embeddings, collection, path, host, port)
    return LangChainPath("langchain-chroma", embeddings, stores)


class _MemoryStores:
    """A new guarded ``InMemoryVectorStore`` for the documents and one for the pairs."""

    def __init__(self, embeddings: ContractEmbeddings) -> None:
        self.embeddings = embeddings

    def make(self, pairs: bool) -> ContractVectorStore:
        return ContractVectorStore(InMemoryVectorStore(self.embeddings))

    def pair_filter(self, pair: str) -> Callable[[Document], bool]:
        return lambda document: document.metadata.get(PAIR_KEY) == pair

    def similarities(
        self, store: ContractVectorStore, query: str, found: list[tuple[Document, float]]
    ) -> list[float]:
        """``InMemoryVectorStore`` scores by cosine: the contract's similarity when it
        normalises; otherwise the inner product is that cosine times both lengths."""
        scores = [float(s) for _, s in found]
        if self.embeddings.contract.normalize or not found:
            return scores
        inner: InMemoryVectorStore = store.store  # type: ignore[assignment]
        q = float(np.linalg.norm(self.embeddings.embed_query(query)))
        lengths = [float(np.linalg.norm(inner.store[str(d.id)]["vector"])) for d, _ in found]
        return [s * q * d for s, d in zip(scores, lengths, strict=True)]

    def close(self) -> None:
        pass


class LangChainPath:
    """A :class:`~ctxemb_core.eval.paths.SearchPath` through a guarded LangChain vector store
    (see :func:`eval_path`)."""

    def __init__(self, via: str, embeddings: ContractEmbeddings, stores: Any) -> None:
        self.via = via
        self.embeddings = embeddings
        self.stores = stores
        self._opened: dict[bool, Any] = {}
        self._closed = False

    @property
    def fingerprint(self) -> str:
        return self.embeddings.fingerprint

    def store(self, pairs: bool = False) -> Any:
        """The documents' store (or the pairs'), opened on first use."""
        if self._closed:
            raise CtxembError(f"this {self.via!r} evaluation path is closed")
        if pairs not in self._opened:
            self._opened[pairs] = self.stores.make(pairs)
        return self._opened[pairs]

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
        store = self.store(pairs=True)
        # The id names the stored sentence and its place, so a kept store is never stale.
        ids = [f"{i}-{hashlib.sha256(s.encode()).hexdigest()[:16]}" for i, s in enumerate(second)]
        self._add(store, dict(zip(ids, second, strict=True)), PAIR_KEY)
        scores = np.empty(len(first), dtype=np.float64)
        for n, (pair, text) in enumerate(zip(ids, first, strict=True)):
            found = store.similarity_search_with_score(
                text, k=1, filter=self.stores.pair_filter(pair)
            )
            if len(found) != 1:
                raise CtxembError(
                    f"pair {pair!r}: the store returned {len(found)} documents, not 1"
                )
            scores[n] = self.stores.similarities(store, text, found)[0]
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
