"""``ctxemb eval --via llamaindex|llamaindex-chroma|llamaindex-pgvector``: what a LlamaIndex user
runs. Documents are embedded by :class:`ContractEmbedding` (``get_text_embedding_batch``) and
added as ``TextNode``\\ s to a guarded vector store; queries go through the ``VectorStoreIndex``
retriever (``similarity_top_k``), whose scores are the contract's similarity. In memory the store
is core's reference driver (exact search); otherwise :class:`ContractChromaVectorStore` or
:class:`ContractPGVectorStore`. Sentence pairs are stored apart, each with its pair id in the
metadata (left out of what is embedded), and each first sentence is retrieved with a metadata
filter on that id.
"""

from __future__ import annotations

from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from ctxemb_chroma import connect as chroma_connect
from ctxemb_core.eval.frameworks import (
    PAIR_KEY,
    FrameworkPath,
    MemoryStores,
    PairedStores,
    eval_path_of,
)
from ctxemb_core.index import IndexFacade, MemoryStore
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._store import ContractVectorStore, load_index

__all__ = ["LlamaIndexPath", "eval_path"]


class _MemoryStores(MemoryStores):
    """A new in-memory guarded store (core's reference driver) for the documents and for each
    block of pairs."""

    embedder: ContractEmbedding

    def __init__(self, embedder: ContractEmbedding) -> None:
        super().__init__(embedder)
        self._memory = MemoryStore()
        self._made = 0

    def make(self, pairs: bool) -> ContractVectorStore:
        self._made += 1
        driver = self._memory.driver(f"{'pairs' if pairs else 'docs'}-{self._made}")
        store = ContractVectorStore()
        store._open(IndexFacade, lambda _: driver, self.embedder, sample=0)
        return store


class LlamaIndexPath(FrameworkPath):
    """:class:`ContractEmbedding` made from ``embedder``, over one guarded vector store:
    ``"memory"`` (``--via llamaindex``), ``"chroma"`` (``--via llamaindex-chroma``) or
    ``"pgvector"`` (``--via llamaindex-pgvector``). Nodes are embedded by
    ``get_text_embedding_batch`` and added to the store; queries go through the
    ``VectorStoreIndex`` retriever.

    Example:
        >>> path = eval_path(embedder, "pgvector", dsn="postgresql:///rag")  # doctest: +SKIP
        >>> path.pair_scores(["A man plays a guitar."], ["Someone plays music."])  # doctest: +SKIP
    """

    framework = "llamaindex"
    memory = _MemoryStores
    component = ContractEmbedding
    embedder: ContractEmbedding

    def open(self, pairs: bool) -> VectorStoreIndex:
        return load_index(self.stores.make(pairs))

    def present(self, opened: VectorStoreIndex, ids: list[str]) -> set[str]:
        store: ContractVectorStore = opened.vector_store  # type: ignore[assignment]
        return {r.id for r in store.index.get(ids, include=())}

    def write(
        self,
        opened: VectorStoreIndex,
        ids: list[str],
        texts: list[str],
        metadatas: list[dict[str, str]] | None,
    ) -> int:
        vectors = self.embedder.get_text_embedding_batch(texts)
        metas = metadatas or [{}] * len(ids)
        zipped = zip(ids, texts, metas, vectors, strict=True)
        opened.vector_store.add([_node(*one) for one in zipped])
        return len(ids)

    def retrieve(
        self, opened: VectorStoreIndex, text: str, k: int, pair: str | None = None
    ) -> list[tuple[str, float]]:
        only = None
        if pair is not None:
            only = MetadataFilters(filters=[MetadataFilter(key=PAIR_KEY, value=pair)])
        found = opened.as_retriever(similarity_top_k=k, filters=only).retrieve(text)
        return [(n.node.node_id, float(n.score or 0.0)) for n in found]


def _node(node_id: str, text: str, meta: dict[str, str], vector: list[float]) -> TextNode:
    # The pair id is a filter, not part of the text embedded (nor of an LLM's context).
    hidden = list(meta)
    return TextNode(
        id_=node_id,
        text=text,
        metadata=dict(meta),
        embedding=vector,
        excluded_embed_metadata_keys=hidden,
        excluded_llm_metadata_keys=hidden,
    )


class _ChromaStores(PairedStores):
    def __init__(self, embedder: ContractEmbedding, collection: str, **where: Any) -> None:
        super().__init__(collection, chroma_connect(**where), embedder)

    def make(self, pairs: bool) -> ContractVectorStore:
        from ctxemb_llamaindex._chroma import ContractChromaVectorStore

        return ContractChromaVectorStore(self.name(pairs), self.embedder, client=self._client)


class _PgvectorStores(PairedStores):
    def __init__(self, embedder: ContractEmbedding, collection: str, dsn: str) -> None:
        from ctxemb_pgvector import connect

        super().__init__(collection, connect(dsn), embedder)

    def make(self, pairs: bool) -> ContractVectorStore:
        from ctxemb_llamaindex._pgvector import ContractPGVectorStore

        return ContractPGVectorStore(self.name(pairs), self.embedder, connection=self._client)


SIDES = {
    "chroma": "ctxemb_llamaindex._eval:_ChromaStores",
    "pgvector": "ctxemb_llamaindex._eval:_PgvectorStores",
    "qdrant": "ctxemb_llamaindex._eval_qdrant:QdrantStores",
}


eval_path = eval_path_of(LlamaIndexPath.maker(SIDES))
