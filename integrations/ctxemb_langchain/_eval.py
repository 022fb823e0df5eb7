"""``ctxemb eval --via langchain|langchain-chroma``: the vector stores a LangChain user runs.

Documents are added and queries searched through :class:`ContractVectorStore` over
``InMemoryVectorStore`` or through :class:`ContractChroma`, both with :class:`ContractEmbeddings`,
using the store's scored search (``similarity_search_with_score``). What a store returns is
turned into the contract's similarity here, so every path means one thing by a score: the
cosine for a normalised contract, the inner product otherwise. Sentence pairs are stored apart
(in memory: 64 pairs to a store; Chroma: the collection ``<collection>-pairs``), each with its
pair id in the metadata, and each first sentence is searched with a metadata filter on that id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core import Embedder
from ctxemb_core.eval.frameworks import eval_path_of
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._eval_path import PAIR_KEY, LangChainPath
from ctxemb_langchain._store import ContractVectorStore

__all__ = ["LangChainPath", "eval_path"]


def _langchain_path(
    embedder: Embedder, store: str, collection: str, where: dict[str, Any]
) -> LangChainPath:
    """``eval_path(embedder, store="memory", *, collection="ctxemb-eval", path=None, host=None,
    port=8000, dsn=None)``: the LangChain evaluation path of ``embedder``'s contract over one
    vector store (the signature and the checks of ``store`` and where it is are core's:
    :func:`~ctxemb_core.eval.frameworks.eval_path_of`).

    Args:
        embedder: the core Embedder; its contract, model folder and run settings make the
            :class:`ContractEmbeddings`, and its cache (if any) is theirs, so vectors embedded
            by another path are read back.
        store: ``"memory"`` (``InMemoryVectorStore`` in a :class:`ContractVectorStore`, exact
            search; ``--via langchain``), ``"chroma"`` (:class:`ContractChroma`;
            ``--via langchain-chroma``) or ``"pgvector"`` (:class:`ContractPGVector`;
            ``--via langchain-pgvector``).
        collection: the Chroma collection or PostgreSQL table (sentence pairs go to
            ``<collection>-pairs``).
        path, host, port: Chroma only: an embedded folder, or a server.
        dsn: pgvector only: the PostgreSQL database's connection string.

    Example:
        >>> path = eval_path(Embedder(contract_for("all-MiniLM-L6-v2")))
        >>> path.index({"d1": "Green tea is steamed."})  # doctest: +SKIP
        1
    """
    options = embedder.component_options()  # the contract, folder (or server), run settings
    embeddings = ContractEmbeddings(
        options.pop("contract"),
        **options,
        show_progress=embedder.show_progress,
        cache=embedder.cache if embedder.cache is not None else False,
    )
    if store == "memory":
        return LangChainPath("langchain", embeddings, _MemoryStores(embeddings))
    stores: Any
    if store == "chroma":
        from ctxemb_langchain._eval_chroma import ChromaStores

        stores = ChromaStores(embeddings, collection, **where)
    else:
        from ctxemb_langchain._eval_pgvector import PgvectorStores

        stores = PgvectorStores(embeddings, collection, **where)
    return LangChainPath(f"langchain-{store}", embeddings, stores)


eval_path = eval_path_of(_langchain_path)


class _MemoryStores:
    """A new guarded ``InMemoryVectorStore`` for the documents and one for each block of
    sentence pairs."""

    #: Sentence pairs one store holds. ``InMemoryVectorStore`` filters by building a
    #: ``Document`` of each record for the filter to test, so STS-B's 1,379 filtered searches
    #: in one store of all its pairs would build 1.9 million; in stores of 64 they build 88,000.
    #: The score is the same either way: the filter leaves the pair's one record to be scored.
    pairs_per_store: int | None = 64

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
