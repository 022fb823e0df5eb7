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

from ctxemb_core.eval.frameworks import eval_path_of
from ctxemb_langchain._eval_path import LangChainPath

__all__ = ["LangChainPath", "eval_path"]


#: The Chroma and pgvector sides of the path, imported only for a path over that store.
SIDES = {
    "chroma": "ctxemb_langchain._eval_chroma:ChromaStores",
    "pgvector": "ctxemb_langchain._eval_pgvector:PgvectorStores",
    "qdrant": "ctxemb_langchain._eval_qdrant:QdrantStores",
}


eval_path = eval_path_of(LangChainPath.maker(SIDES))
