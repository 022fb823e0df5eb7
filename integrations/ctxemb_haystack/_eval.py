"""``ctxemb eval --via haystack|haystack-chroma|haystack-pgvector``: the pipelines a Haystack
user runs, measured.

Documents go through an indexing ``Pipeline`` (:class:`ContractDocumentEmbedder` →
:class:`ContractDocumentWriter`) and queries through a query ``Pipeline``
(:class:`ContractTextEmbedder` → :class:`ContractRetriever` around the store's own retriever),
into ``InMemoryDocumentStore``, ``ChromaDocumentStore`` or ``PgvectorDocumentStore``. The
scores are the retriever's, already similarities with the contract's meaning (the Chroma and
pgvector distances are converted by :class:`ContractRetriever`). Sentence pairs are stored
apart from the documents (in memory: 64 pairs to a store; Chroma: the collection
``<collection>-pairs``; pgvector: the table ``<collection>-pairs``), each with its pair id in
``meta``, and each first sentence is searched under a Haystack filter on that id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from haystack import Document
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from ctxemb_core import Embedder
from ctxemb_core.errors import CtxembError, InvalidInputError
from ctxemb_core.eval.paths import check_documents, check_pairs, check_queries
from ctxemb_haystack._eval_pipelines import Pipelines

__all__ = ["HaystackPath", "eval_path"]

#: The metadata key that holds a sentence pair's id (what ``pair_scores`` filters on).
PAIR_KEY = "ctxemb_pair"


def eval_path(
    embedder: Embedder,
    store: str = "memory",
    *,
    collection: str = "ctxemb-eval",
    path: str | None = None,
    host: str | None = None,
    port: int = 8000,
    dsn: str | None = None,
) -> HaystackPath:
    """The Haystack evaluation path of ``embedder``'s contract over one document store.

    Args:
        embedder: the core Embedder; its contract, model folder and run settings make the
            pipelines' embedders, and its cache (if any) is theirs, so vectors embedded by
            another path are read back.
        store: ``"memory"`` (``InMemoryDocumentStore``, exact search; ``--via haystack``) or
            ``"chroma"`` (``ChromaDocumentStore``; ``--via haystack-chroma``) or ``"pgvector"``
            (``PgvectorDocumentStore``; ``--via haystack-pgvector``).
        collection: the Chroma collection or PostgreSQL table (sentence pairs go to
            ``<collection>-pairs``).
        path, host, port: Chroma only: an embedded folder, or a server.
        dsn: pgvector only: the database's connection string.

    Example:
        >>> path = eval_path(Embedder(contract_for("all-MiniLM-L6-v2")), "chroma", path="./db")
        >>> path.index({"d1": "Green tea is steamed."})  # doctest: +SKIP
        1
    """
    if store == "memory":
        return HaystackPath("haystack", embedder, _MemoryStores())
    if store == "pgvector":
        from ctxemb_haystack._eval_pgvector import PgvectorStores

        return HaystackPath(
            "haystack-pgvector", embedder, PgvectorStores(embedder, collection, dsn)
        )
    if store != "chroma":
        raise InvalidInputError(f"store must be 'memory' or 'chroma', or 'pgvector', got {store!r}")
    from ctxemb_haystack._eval_chroma import ChromaStores

    return HaystackPath(
        "haystack-chroma", embedder, ChromaStores(embedder, collection, path, host, port)
    )


class _MemoryStores:
    """A new ``InMemoryDocumentStore`` for the documents and one for each block of sentence
    pairs."""

    #: Sentence pairs one store holds. ``InMemoryDocumentStore`` filters by testing each of its
    #: documents, so STS-B's 1,379 filtered searches in one store of all its pairs would test
    #: 1.9 million documents; in stores of 64 they test 88,000. The score is the same either
    #: way: the filter leaves the pair's one document to be scored.
    pairs_per_store: int | None = 64

    def make(self, pairs: bool) -> InMemoryDocumentStore:
        return InMemoryDocumentStore()

    def retriever(self, store: InMemoryDocumentStore) -> InMemoryEmbeddingRetriever:
        return InMemoryEmbeddingRetriever(store)

    def present(self, store: InMemoryDocumentStore, pairs: bool) -> set[str]:
        return set(store.storage)

    def close(self) -> None:
        pass


class HaystackPath:
    """A :class:`~ctxemb_core.eval.paths.SearchPath` through Haystack pipelines (see
    :func:`eval_path`); the stores and pipelines are made on first use."""

    def __init__(self, via: str, embedder: Embedder, stores: Any) -> None:
        self.via = via
        self.embedder = embedder
        self.stores = stores
        self._parts: dict[tuple[bool, int], Pipelines] = {}
        self._closed = False

    @property
    def fingerprint(self) -> str:
        return self.embedder.fingerprint

    def part(self, pairs: bool = False, block: int = 0) -> Pipelines:
        """The documents' store and pipelines (or those of a block of sentence pairs: pair
        ``n`` is kept in block ``n // stores.pairs_per_store``; Chroma keeps all in one)."""
        if self._closed:
            raise CtxembError(f"this {self.via!r} evaluation path is closed")
        key = (pairs, block if pairs else 0)
        if key not in self._parts:
            self._parts[key] = Pipelines(self.embedder, self.stores, pairs)
        return self._parts[key]

    def index(self, documents: Mapping[str, str]) -> int:
        ids, texts = check_documents(documents)
        new = [Document(id=i, content=t) for i, t in zip(ids, texts, strict=True)]
        return self.part().index(new)

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        qids, texts, k = check_queries(queries, k)
        part = self.part()
        return {
            qid: {d.id: _score(d) for d in part.ask(text, k)}
            for qid, text in zip(qids, texts, strict=True)
        }

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        first, second = check_pairs(first, second)
        ids = pair_ids(second)
        size = self.stores.pairs_per_store or len(ids)
        scores = np.empty(len(first), dtype=np.float64)
        for start in range(0, len(ids), size):
            part = self.part(pairs=True, block=start // size)
            block = range(start, min(start + size, len(ids)))
            part.index(
                [Document(id=ids[n], content=second[n], meta={PAIR_KEY: ids[n]}) for n in block]
            )
            for n in block:
                where = {"field": f"meta.{PAIR_KEY}", "operator": "==", "value": ids[n]}
                found = part.ask(first[n], 1, where)
                if len(found) != 1:
                    raise CtxembError(
                        f"pair {ids[n]!r}: the store returned {len(found)} documents, not 1"
                    )
                scores[n] = _score(found[0])
        return scores

    def close(self) -> None:
        """Close the stores and the client this path opened (again: nothing happens)."""
        if self._closed:
            return
        self._closed = True
        for part in self._parts.values():
            part.close()
        self._parts.clear()
        self.stores.close()


def pair_ids(second: Sequence[str]) -> list[str]:
    """One id per pair, naming its place and its stored sentence (a kept store is never stale)."""
    return [f"{i}-{hashlib.sha256(s.encode()).hexdigest()[:16]}" for i, s in enumerate(second)]


def _score(document: Document) -> float:
    if document.score is None:  # ContractRetriever scores every document it returns
        raise CtxembError(f"document {document.id!r} came back from the retriever unscored")
    return float(document.score)
