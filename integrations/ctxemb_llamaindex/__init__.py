"""ctxemb for LlamaIndex: a contract-bound embedding model and vector stores that refuse another.

Install with ``pip install 'ctxemb[llamaindex]'``. :class:`ContractEmbedding` is a
``BaseEmbedding`` that embeds queries and texts each in its own role under one contract (it
works as ``Settings.embed_model``); :class:`ContractChromaVectorStore`,
:class:`ContractPGVectorStore` and :class:`ContractQdrantVectorStore` are vector stores on a
stamped Chroma collection, PostgreSQL table or Qdrant collection (the stamp the CLI,
Haystack and LangChain write: an index written by any of them opens
here under the same contract), which refuse query vectors and nodes embedded under another
contract, fields named; :func:`load_index` is a ``VectorStoreIndex`` on such a store with the
embedding model its stamp names; :class:`ContractIngestionPipeline` is an ``IngestionPipeline``
whose deduplication is kept per contract, so a new contract re-embeds everything;
:class:`ContractRerank` is a node postprocessor reranking under a cross-encoder's reranker
contract, and :class:`ContractHybridRetriever` fuses a store's dense ranking with BM25 under one
stamped hybrid contract (``ctxemb[hybrid]``); :class:`ContractAliasVectorStore` is a store on
the index a ctxemb alias serves. Each name is imported when first used.

Example:
    >>> from ctxemb_llamaindex import ContractChromaVectorStore, ContractEmbedding, load_index
    >>> embed = ContractEmbedding(model_name="sentence-transformers/all-MiniLM-L6-v2")
    >>> store = ContractChromaVectorStore("docs", embed, persist_path="./db")  # doctest: +SKIP
    >>> load_index(store).as_query_engine(llm=None)  # doctest: +SKIP
"""

from __future__ import annotations

from ctxemb_core.errors import MissingDependencyError
from ctxemb_core.lazy import lazy_exports

MissingDependencyError.require(
    "ctxemb_llamaindex", "llamaindex", {"llama_index.core": "llama-index-core"}
)

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxemb_llamaindex._alias import ContractAliasVectorStore
    from ctxemb_llamaindex._chroma import ContractChromaVectorStore
    from ctxemb_llamaindex._embedding import ContractEmbedding
    from ctxemb_llamaindex._eval import eval_path
    from ctxemb_llamaindex._hybrid import ContractHybridRetriever
    from ctxemb_llamaindex._ingestion import ContractIngestionPipeline
    from ctxemb_llamaindex._pgvector import ContractPGVectorStore
    from ctxemb_llamaindex._qdrant import ContractQdrantVectorStore
    from ctxemb_llamaindex._rerank import ContractRerank
    from ctxemb_llamaindex._store import ContractVectorStore, load_index

__all__ = [
    "ContractAliasVectorStore",
    "ContractChromaVectorStore",
    "ContractEmbedding",
    "ContractHybridRetriever",
    "ContractIngestionPipeline",
    "ContractPGVectorStore",
    "ContractQdrantVectorStore",
    "ContractRerank",
    "ContractVectorStore",
    "eval_path",
    "load_index",
]

#: The module of each name, imported when first asked for: the PostgreSQL store needs psycopg
#: (ctxemb[pgvector]) and the Chroma store chromadb, which the embedding model works without.
_HOMES = {
    "ContractAliasVectorStore": "_alias",
    "ContractChromaVectorStore": "_chroma",
    "ContractEmbedding": "_embedding",
    "ContractHybridRetriever": "_hybrid",
    "ContractIngestionPipeline": "_ingestion",
    "ContractPGVectorStore": "_pgvector",
    "ContractQdrantVectorStore": "_qdrant",
    "ContractRerank": "_rerank",
    "ContractVectorStore": "_store",
    "eval_path": "_eval",
    "load_index": "_store",
}

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
