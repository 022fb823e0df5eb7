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
from collections.abc import Iterator
from typing import Any

from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.storage.docstore.keyval_docstore import KVDocumentStore

from ctxemb_core import EmbeddingContract
from ctxemb_core.contract import same_contract
from ctxemb_core.errors import InvalidInputError
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._store import ContractVectorStore


class ContractIngestionPipeline(IngestionPipeline):
    """An ``IngestionPipeline`` whose docstore deduplication is per contract.

    Arguments as ``IngestionPipeline``'s. The contract is the :class:`ContractEmbedding`'s among
    the ``transformations`` (else the :class:`ContractVectorStore`'s, which embeds the nodes
    itself); the docstore must be a LlamaIndex key-value docstore (``SimpleDocumentStore``,
    Redis, MongoDB, …), whose records are kept under ``<namespace>/ctxemb-<fingerprint>``.

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
        embeds = [t for t in self.transformations if isinstance(t, ContractEmbedding)]
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
        with self._per_contract():
            return super().run(*args, **kwargs)

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        with self._per_contract():
            return await super().arun(*args, **kwargs)

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
