"""ctxemb for Haystack: embedders driven by one contract, and a guarded write and read path.

Install with ``pip install 'ctxemb[haystack]'``. An indexing pipeline embeds with
:class:`ContractDocumentEmbedder` and writes with :class:`ContractDocumentWriter`; a query
pipeline embeds with :class:`ContractTextEmbedder` and retrieves through
:class:`ContractRetriever`, which refuses a store written under another contract before any
document leaves it. Works with ``InMemoryDocumentStore``, ``ChromaDocumentStore``,
``PgvectorDocumentStore`` (through ``ctxemb_pgvector``, the shared pgvector guard) and
``QdrantDocumentStore`` (through ``ctxemb_qdrant``).

Hybrid retrieval (Chroma and pgvector): the writer's ``hybrid=True`` keeps a stamped BM25 side
beside the store, :class:`ContractLexicalRetriever` reads it and :class:`ContractFusionJoiner`
fuses both rankings under the stamp's fusion; another recipe is refused, the field named.

Opened by alias (``ctxemb upgrade`` changes the model without downtime):
:class:`ContractAliasDocumentStore` reads the alias on every call and writes every index it
writes; :class:`ContractAliasRetriever` embeds the query with the encoder of the index the alias
serves, so index and query encoder switch together at a cutover.

Importing this package adds ``ctxemb_haystack`` (and nothing else) to Haystack's
deserialisation allowlist, so a pipeline YAML that uses these components loads with
``Pipeline.loads``; without the import, pass ``allowed_modules=["ctxemb_haystack"]``.

Example:
    >>> from haystack import Pipeline
    >>> from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    >>> from haystack.document_stores.in_memory import InMemoryDocumentStore
    >>> from ctxemb_core import contract_for
    >>> from ctxemb_haystack import ContractRetriever, ContractTextEmbedder
    >>> contract = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    >>> store = InMemoryDocumentStore()
    >>> query = Pipeline()
    >>> query.add_component("embedder", ContractTextEmbedder(contract=contract))
    >>> query.add_component("retriever", ContractRetriever(InMemoryEmbeddingRetriever(store)))
    >>> query.connect("embedder.embedding", "retriever.query_embedding")  # doctest: +ELLIPSIS
    <haystack...>
    >>> query.connect("embedder.fingerprint", "retriever.fingerprint")  # doctest: +ELLIPSIS
    <haystack...>
"""

from __future__ import annotations

from ctxemb_core.errors import MissingDependencyError

MissingDependencyError.require("ctxemb_haystack", "haystack", {"haystack": "haystack-ai"})

from haystack.core.serialization import allow_deserialization_module

from ctxemb_haystack._alias import ContractAliasDocumentStore
from ctxemb_haystack._alias_retriever import ContractAliasRetriever
from ctxemb_haystack._components import ContractDocumentWriter, ContractRetriever
from ctxemb_haystack._embedders import ContractDocumentEmbedder, ContractTextEmbedder
from ctxemb_haystack._eval import eval_path
from ctxemb_haystack._fusion import ContractFusionJoiner
from ctxemb_haystack._hybrid import ContractLexicalRetriever
from ctxemb_haystack._rankers import ContractCrossEncoderRanker, ContractLateInteractionRanker
from ctxemb_haystack._writes import DuplicateDocumentsError

# Our own modules only: they build nothing but these components from a pipeline's YAML.
allow_deserialization_module("ctxemb_haystack")

__all__ = [
    "ContractAliasDocumentStore",
    "ContractAliasRetriever",
    "ContractCrossEncoderRanker",
    "ContractDocumentEmbedder",
    "ContractDocumentWriter",
    "ContractFusionJoiner",
    "ContractLateInteractionRanker",
    "ContractLexicalRetriever",
    "ContractRetriever",
    "ContractTextEmbedder",
    "DuplicateDocumentsError",
    "eval_path",
]
