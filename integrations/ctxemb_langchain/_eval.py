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

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core import Embedder
from ctxemb_core.eval.frameworks import MemoryStores, eval_path_of, paired_stores
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._eval_path import PAIR_KEY, LangChainPath
from ctxemb_langchain._store import ContractVectorStore

__all__ = ["LangChainPath", "eval_path"]


#: The Chroma and pgvector sides of the path, imported only for a path over that store.
SIDES = {
    "chroma": "ctxemb_langchain._eval_chroma:ChromaStores",
    "pgvector": "ctxemb_langchain._eval_pgvector:PgvectorStores",
    "qdrant": "ctxemb_langchain._eval_qdrant:QdrantStores",
}


def _langchain_path(
    embedder: Embedder, store: str, collection: str, where: dict[str, Any]
) -> LangChainPath:
    """The LangChain evaluation path of ``embedder``'s contract over one vector store.

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
    options = embedder.component_options()  # the contract, folder (or server), run settings
    embeddings = ContractEmbeddings(
        options.pop("contract"),
        **options,
        show_progress=embedder.show_progress,
        cache=embedder.cache if embedder.cache is not None else False,
    )
    memory = functools.partial(_MemoryStores, embeddings)
    via, stores = paired_stores("langchain", store, memory, SIDES, embeddings, collection, **where)
    return LangChainPath(via, embeddings, stores)


eval_path = eval_path_of(_langchain_path)


class _MemoryStores(MemoryStores):
    """A new guarded ``InMemoryVectorStore`` for the documents and for each block of pairs."""

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
