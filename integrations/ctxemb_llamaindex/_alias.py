"""A LlamaIndex vector store reached through a ctxemb alias, whatever the store beneath.

:class:`ContractAliasVectorStore` is a ``BasePydanticVectorStore`` on core's
:class:`~ctxemb_core.aliases.AliasedIndex` (through :class:`~ctxemb_core.aliases.AliasSource`),
as LangChain's and Haystack's alias stores are: the alias is read on every call, a query is
embedded by the encoder of the index the alias serves at that call, and writes reach every
index the alias writes, each embedded under its own contract. What is LlamaIndex's own here:
nodes and filters (:mod:`._nodes`), and ``is_embedding_query = False``, LlamaIndex's word for a
store that embeds the query text itself (a vector carries no contract, and the alias's contract
changes at a cutover).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from ctxemb_core import EmbeddingContract
from ctxemb_core.aliases import AliasReader, AliasSource, Encoders, read_alias
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import OPEN_SAMPLE, check_count
from ctxemb_llamaindex._nodes import node_record, stored_node, where_of


class ContractAliasVectorStore(AliasReader, BasePydanticVectorStore):
    """A LlamaIndex vector store on the index a ctxemb alias serves (see the module).

    ``add`` (an upsert by node id) and ``delete`` reach every index the alias writes: during an
    upgrade the current and the new index, each embedding the node's text under its own
    contract (a vector a node carries is not stored: it is one contract's, and the indexes
    hold two). ``query`` embeds ``query_str`` with the encoder of the index the alias serves
    then; a query with only a vector is refused. With :class:`ContractIngestionPipeline` the
    docstore's namespace is the contract the alias serves, so after a cutover every document
    is embedded again.

    Args:
        alias: the alias.
        encoders: what the store may embed with, found by each index's contract:
            :class:`ContractEmbedding`\\ s, core ``Embedder``\\ s, model or export folders,
            URLs of servers that serve a contract.
        store, path, host, port, dsn, schema, catalog, find, sample: where the alias's store
            is, as :class:`~ctxemb_core.aliases.AliasSource` takes them.

    Example:
        >>> store = ContractAliasVectorStore("docs", [embed], path="./db")  # doctest: +SKIP
        >>> ContractIngestionPipeline(vector_store=store, ...).run(documents=docs)  # doctest: +SKIP
    """

    stores_text: bool = True
    is_embedding_query: bool = False
    _source: AliasSource = PrivateAttr()

    def __init__(
        self,
        alias: str,
        encoders: Encoders | Sequence[Any] = (),
        *,
        store: str | None = None,
        path: str | None = None,
        host: str | None = None,
        port: int | None = None,
        dsn: str | None = None,
        schema: str | None = None,
        catalog: Any = None,
        find: bool = False,
        sample: int = OPEN_SAMPLE,
    ) -> None:
        super().__init__(stores_text=True, is_embedding_query=False)
        self._source = AliasSource(
            alias,
            encoders,
            store=store,
            path=path,
            host=host,
            port=port,
            dsn=dsn,
            schema=schema,
            catalog=catalog,
            find=find,
            sample=sample,
        )

    @classmethod
    def class_name(cls) -> str:
        return "ContractAliasVectorStore"

    @property
    def client(self) -> Any:
        """The alias's store (its catalog)."""
        return self._source.catalog()

    def _alias_source(self) -> AliasSource:
        return self._source

    @property
    def contract(self) -> EmbeddingContract:
        """The contract of the index the alias serves now (only the alias is read)."""
        contract: EmbeddingContract = read_alias(
            self._source.catalog(), self._source.alias
        ).target.contract
        return contract

    def close(self) -> None:
        """Close the client this store opened (a ``catalog=`` given is the caller's)."""
        self._source.close()

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Write the nodes to every index the alias writes, each embedded under its contract."""
        nodes = list(nodes)
        if not nodes:
            return []
        ids, texts, metas = zip(*(node_record(n) for n in nodes), strict=True)
        self.aliased.upsert(list(ids), list(texts), list(metas))
        return list(ids)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete the nodes of one source document from every index the alias writes."""
        if not isinstance(ref_doc_id, str) or not ref_doc_id:
            raise InvalidInputError(f"ref_doc_id must be a non-empty string, got {ref_doc_id!r}")
        self.aliased.delete(where={"ref_doc_id": ref_doc_id})

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        self.aliased.delete(node_ids, where=where_of(filters))

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        if node_ids is None or filters is not None:
            raise InvalidInputError("get_nodes reads nodes by node_ids (no filters)")
        return [stored_node(r.id, r.text, r.metadata) for r in self.index.get(node_ids)]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` nearest nodes of the index the alias serves now, the query
        text embedded by that index's encoder."""
        if query.mode != VectorStoreQueryMode.DEFAULT or query.node_ids:
            raise InvalidInputError(
                "a ctxemb alias store searches by its contract's vectors (mode 'default', no "
                "node_ids)"
            )
        if not isinstance(query.query_str, str) or not query.query_str.strip():
            raise InvalidInputError(
                "ContractAliasVectorStore searches by text (query_str): a vector carries no "
                "contract, and the alias's contract changes at a cutover"
            )
        k = check_count(query.similarity_top_k, "similarity_top_k")
        where = where_of(query.filters, query.doc_ids)
        found = self.aliased.search([query.query_str], k, where=where).matches[0]
        return VectorStoreQueryResult(
            nodes=[stored_node(m.id, m.text, m.metadata) for m in found],
            similarities=[m.score for m in found],
            ids=[m.id for m in found],
        )
