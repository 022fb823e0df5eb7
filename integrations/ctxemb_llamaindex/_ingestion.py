"""LlamaIndex's ``IngestionPipeline`` with its deduplication kept per contract.

Stock ``IngestionPipeline`` skips a document whose id and content hash its docstore already
holds (``_handle_upserts``; ``_handle_duplicates`` by hash alone). The hash is of the text and
metadata, not of the model: after the embedding model changes, a run re-embeds nothing and the
vector store keeps the old model's vectors beside the new one's queries. Here the docstore's
records live in a namespace of the contract's fingerprint, so a new contract finds none and
re-embeds everything, and going back finds the old contract's records again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.keyval_docstore import KVDocumentStore

from ctxemb_core import EmbeddingContract
from ctxemb_core.contract import same_contract
from ctxemb_core.documents import check_fingerprint
from ctxemb_core.errors import InvalidInputError
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._store import ContractVectorStore


class ContractIngestionPipeline(IngestionPipeline):
    """An ``IngestionPipeline`` whose docstore deduplication is per contract.

    Arguments as ``IngestionPipeline``'s. The contract is the :class:`ContractEmbedding`'s among
    the ``transformations`` (else the :class:`ContractVectorStore`'s, which embeds the nodes
    itself, or the contract a :class:`ContractAliasVectorStore`'s alias serves at each run, so
    after a cutover every document is embedded again); the docstore must be a LlamaIndex
    key-value docstore (``SimpleDocumentStore``, Redis, MongoDB, …), whose records are kept
    under ``<namespace>/ctxemb-<fingerprint>``.

    Example:
        >>> embed = ContractEmbedding(model_name="all-MiniLM-L6-v2")
        >>> pipeline = ContractIngestionPipeline(
        ...     transformations=[SentenceSplitter(), embed],
        ...     docstore=SimpleDocumentStore(), vector_store=store)  # doctest: +SKIP
        >>> pipeline.run(documents=documents)  # doctest: +SKIP
    """

    @property
    def contract(self) -> EmbeddingContract:
        """The contract the pipeline embeds under (its ContractEmbedding's or its store's)."""
        from ctxemb_llamaindex._alias import ContractAliasVectorStore

        embeds = [t for t in self.transformations if isinstance(t, ContractEmbedding)]
        if isinstance(self.vector_store, ContractAliasVectorStore):
            if embeds:
                raise InvalidInputError(
                    "a ContractAliasVectorStore embeds each node itself, under the contract of "
                    "each index the alias writes; leave the ContractEmbedding out of the "
                    "transformations"
                )
            return self.vector_store.contract  # the alias's, read on this run
        if any(not same_contract(embeds[0].contract, e.contract) for e in embeds[1:]):
            raise InvalidInputError(
                "the pipeline embeds under two contracts (two ContractEmbedding of different "
                "contracts among its transformations); keep one"
            )
        if embeds:
            return embeds[0].contract
        if isinstance(self.vector_store, ContractVectorStore):
            return self.vector_store.contract
        raise InvalidInputError(
            "ContractIngestionPipeline needs its contract: a ContractEmbedding among the "
            "transformations, or a ctxemb vector store"
        )

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self._check_store()
        with self._per_contract():
            return self._unembedded(super().run(*args, **kwargs))

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        self._check_store()
        with self._per_contract():
            return self._unembedded(await super().arun(*args, **kwargs))

    def _check_store(self) -> None:
        """A ContractEmbedding of another contract than a ctxemb store's is refused (fields
        named) before the run deletes or writes anything."""
        store = self.vector_store
        if isinstance(store, ContractVectorStore):
            for model in self.transformations:
                if isinstance(model, ContractEmbedding):
                    check_fingerprint(model.fingerprint, store.contract)

    def _unembedded(self, nodes: Sequence[BaseNode]) -> Sequence[BaseNode]:
        """Write the nodes without a vector to a ctxemb store, which embeds them itself under
        its contract (LlamaIndex writes only nodes that carry one)."""
        from ctxemb_llamaindex._alias import ContractAliasVectorStore

        store = self.vector_store
        if isinstance(store, (ContractVectorStore, ContractAliasVectorStore)):
            bare = [n for n in nodes if n.embedding is None]
            if bare:
                store.add(bare)
        return nodes

    def _handle_upserts(self, nodes: Sequence[BaseNode]) -> Sequence[BaseNode]:
        """Stock upserts in the contract's namespace; a document new to it has its nodes of
        another contract's run deleted from the store first (LlamaIndex does so for a changed
        document only), so a splitter's fresh node ids never sit beside the old ones."""
        new = self._new_here(nodes)
        kept = super()._handle_upserts(nodes)
        self._delete(new)
        return kept

    async def _ahandle_upserts(
        self, nodes: Sequence[BaseNode], store_doc_text: bool = True
    ) -> Sequence[BaseNode]:
        new = self._new_here(nodes)
        kept = await super()._ahandle_upserts(nodes, store_doc_text)
        self._delete(new)
        return kept

    def _new_here(self, nodes: Sequence[BaseNode]) -> list[str]:
        """The documents of ``nodes`` this contract's namespace has never seen."""
        assert self.docstore is not None
        refs = {n.ref_doc_id or n.id_ for n in nodes}
        return sorted(r for r in refs if not self.docstore.get_document_hash(r))

    def _delete(self, ref_doc_ids: list[str]) -> None:
        if self.vector_store is not None:
            for ref_doc_id in ref_doc_ids:
                self.vector_store.delete(ref_doc_id)

    @contextlib.contextmanager
    def _per_contract(self) -> Iterator[None]:
        """The run's docstore is the contract's namespace of the one given."""
        given = self.docstore
        if given is None:
            yield
            return
        if not isinstance(given, KVDocumentStore):
            raise InvalidInputError(
                "ContractIngestionPipeline keeps a namespace per contract in a key-value "
                f"docstore (SimpleDocumentStore, Redis, MongoDB, …), got {type(given).__name__}"
            )
        namespace = f"{given._namespace}/ctxemb-{self.contract.fingerprint[:16]}"
        self.docstore = KVDocumentStore(
            given._kvstore, namespace=namespace, batch_size=given._batch_size
        )
        try:
            yield
        finally:
            self.docstore = given
