"""ctxemb for LangChain: contract-bound embeddings and vector stores that refuse another contract.

Install with ``pip install 'ctxemb[langchain]'``. :class:`ContractEmbeddings` embeds documents and
queries each in its own role under one contract; :class:`ContractChroma` is a
``langchain_chroma.Chroma`` on a stamped collection (the stamp ``ctxemb_chroma`` and the Haystack
adapter write); :class:`ContractVectorStore` guards any other ``VectorStore`` (e.g.
``InMemoryVectorStore``) by a fingerprint on each document; :class:`ContractPGVector` is a
vector store on a stamped PostgreSQL + pgvector table (``ctxemb[pgvector]``);
:class:`ContractQdrant` is a ``langchain_qdrant.QdrantVectorStore`` on a stamped Qdrant
collection;
:class:`ContractRetriever` is the retriever of each, and :class:`ContractHybridRetriever` fuses
a store's dense ranking with BM25 under one stamped hybrid contract (``ctxemb[hybrid]``);
:class:`ContractAliasVectorStore` is a vector store opened by alias, in any store: index and
query encoder follow the alias together, and writes reach every index it writes. Each
name is imported when first used: :class:`ContractEmbeddings` alone loads no store's client.

Example:
    >>> from ctxemb_core import contract_for
    >>> from ctxemb_langchain import ContractChroma, ContractEmbeddings
    >>> embeddings = ContractEmbeddings(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
    >>> store = ContractChroma("docs", embeddings, persist_directory="./db")  # doctest: +SKIP
    >>> store.as_retriever(k=3).invoke("how is green tea made")  # doctest: +SKIP
"""

from __future__ import annotations

from ctxemb_core.errors import MissingDependencyError
from ctxemb_core.lazy import lazy_exports

MissingDependencyError.require(
    "ctxemb_langchain", "langchain", {"langchain_core": "langchain-core"}
)

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxemb_langchain._alias import ContractAliasVectorStore
    from ctxemb_langchain._chroma import ContractChroma
    from ctxemb_langchain._compressors import (
        ContractCrossEncoderReranker,
        ContractLateInteractionReranker,
    )
    from ctxemb_langchain._embeddings import ContractEmbeddings
    from ctxemb_langchain._eval import eval_path
    from ctxemb_langchain._hybrid import ContractHybridRetriever
    from ctxemb_langchain._pgvector import ContractPGVector
    from ctxemb_langchain._qdrant import ContractQdrant
    from ctxemb_langchain._retriever import ContractRetriever
    from ctxemb_langchain._store import ContractVectorStore

__all__ = [
    "ContractAliasVectorStore",
    "ContractChroma",
    "ContractCrossEncoderReranker",
    "ContractEmbeddings",
    "ContractHybridRetriever",
    "ContractLateInteractionReranker",
    "ContractPGVector",
    "ContractQdrant",
    "ContractRetriever",
    "ContractVectorStore",
    "eval_path",
]

#: The module of each name, imported when the name is first asked for: ContractEmbeddings
#: alone needs langchain-core's Embeddings (a quarter of a second), where the stores bring
#: langchain-chroma and chromadb, LangChain's retrievers and tracers (1.5 s more), and
#: ContractPGVector psycopg and pgvector (ctxemb[pgvector]), which the other stores work without.
_HOMES = {
    "ContractAliasVectorStore": "_alias",
    "ContractChroma": "_chroma",
    "ContractCrossEncoderReranker": "_compressors",
    "ContractEmbeddings": "_embeddings",
    "ContractHybridRetriever": "_hybrid",
    "ContractLateInteractionReranker": "_compressors",
    "ContractPGVector": "_pgvector",
    "ContractQdrant": "_qdrant",
    "ContractRetriever": "_retriever",
    "ContractVectorStore": "_store",
    "eval_path": "_eval",
}

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
