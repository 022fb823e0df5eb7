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

from collections.abc import Mapping
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from ctxemb_chroma import connect as chroma_connect
from ctxemb_core import Embedder
from ctxemb_core.eval.frameworks import (
    PAIR_KEY,
    FrameworkPath,
    MemoryStores,
    PairedStores,
    eval_path_of,
    paired_stores,
)
from ctxemb_core.eval.paths import check_documents, check_queries
from ctxemb_core.index import IndexFacade, MemoryStore
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._store import ContractVectorStore, load_index

__all__ = ["LlamaIndexPath", "eval_path"]

# Nodes embedded and added at once (LlamaIndex's largest embedding batch).
_CHUNK = 2048


class LlamaIndexPath(FrameworkPath):
    """A :class:`~ctxemb_core.eval.paths.SearchPath` through a guarded LlamaIndex vector store."""

    embedder: ContractEmbedding

    def open(self, pairs: bool) -> VectorStoreIndex:
        return load_index(self.stores.make(pairs))

    def index(self, documents: Mapping[str, str]) -> int:
        ids, texts = check_documents(documents)
        return self._add(self.opened(), dict(zip(ids, texts, strict=True)), None)

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        qids, texts, k = check_queries(queries, k)
        retriever = self.opened().as_retriever(similarity_top_k=k)
        return {
            qid: {n.node.node_id: float(n.score or 0.0) for n in retriever.retrieve(text)}
            for qid, text in zip(qids, texts, strict=True)
        }

    def add_pairs(self, opened: Any, ids: list[str], texts: list[str]) -> None:
        self._add(opened, dict(zip(ids, texts, strict=True)), PAIR_KEY)

    def pair_search(self, opened: Any, text: str, pair: str) -> list[float]:
        only = MetadataFilters(filters=[MetadataFilter(key=PAIR_KEY, value=pair)])
        found = opened.as_retriever(similarity_top_k=1, filters=only).retrieve(text)
        return [float(n.score or 0.0) for n in found]

    def _add(self, index: VectorStoreIndex, documents: dict[str, str], key: str | None) -> int:
        store: ContractVectorStore = index.vector_store  # type: ignore[assignment]
        present = {r.id for r in store.index.get(list(documents), include=())}
        new = [i for i in documents if i not in present]
        for start in range(0, len(new), _CHUNK):
            chunk = new[start : start + _CHUNK]
            vectors = self.embedder.get_text_embedding_batch([documents[i] for i in chunk])
            store.add([_node(i, documents[i], key, v) for i, v in zip(chunk, vectors, strict=True)])
        return len(new)


def _node(node_id: str, text: str, key: str | None, vector: list[float]) -> TextNode:
    meta = {key: node_id} if key else {}
    # The pair id is a filter, not part of the text embedded (nor of an LLM's context).
    hidden = list(meta)
    return TextNode(
        id_=node_id,
        text=text,
        metadata=meta,
        embedding=vector,
        excluded_embed_metadata_keys=hidden,
        excluded_llm_metadata_keys=hidden,
    )


class _MemoryStores(MemoryStores):
    """A new in-memory guarded store (core's reference driver) for the documents and for each
    block of pairs."""

    def __init__(self, embedder: ContractEmbedding) -> None:
        self.embedder = embedder
        self._memory = MemoryStore()
        self._made = 0

    def make(self, pairs: bool) -> ContractVectorStore:
        self._made += 1
        driver = self._memory.driver(f"{'pairs' if pairs else 'docs'}-{self._made}")
        store = ContractVectorStore()
        store._open(IndexFacade, lambda _: driver, self.embedder, sample=0)
        return store


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


def _llamaindex_path(
    embedder: Embedder, store: str, collection: str, where: dict[str, Any]
) -> LlamaIndexPath:
    """The LlamaIndex evaluation path of ``embedder``'s contract over one vector store:
    ``"memory"`` (``--via llamaindex``), ``"chroma"`` (``--via llamaindex-chroma``) or
    ``"pgvector"`` (``--via llamaindex-pgvector``).

    Example:
        >>> path = eval_path(Embedder(contract_for("all-MiniLM-L6-v2")))
        >>> path.index({"d1": "Green tea is steamed."})  # doctest: +SKIP
        1
    """
    options = embedder.component_options()  # the contract, folder (or server), run settings
    embed = ContractEmbedding(
        options.pop("contract"),
        **options,
        show_progress=embedder.show_progress,
        cache=embedder.cache if embedder.cache is not None else False,
    )
    memory = lambda: _MemoryStores(embed)  # noqa: E731
    via, stores = paired_stores("llamaindex", store, memory, SIDES, embed, collection, **where)
    return LlamaIndexPath(via, embed, stores)


eval_path = eval_path_of(_llamaindex_path)
