"""A guard around any LangChain ``VectorStore``: stamped documents in, checked documents out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from ctxemb_core.contract import same_contract
from ctxemb_core.documents import check_documents
from ctxemb_core.guard import check_query_vector
from ctxemb_langchain._checks import (
    REWRITE,
    check_memory_sample,
    documents_by_ids,
    stamped,
    unstamped,
)
from ctxemb_langchain._embeddings import ContractEmbeddings, contract_embeddings
from ctxemb_langchain._retriever import GuardedStore
from ctxemb_langchain._writer import BuiltFromTexts, TextWriter


class ContractVectorStore(BuiltFromTexts, TextWriter, GuardedStore):
    """Wraps any ``VectorStore`` so that only the contract's documents go in and come out.

    Every added document's metadata gets ``ctxemb_fingerprint`` (a document already carrying
    another contract's is refused); every search path (``similarity_search*``,
    ``max_marginal_relevance_search*``, ``get_by_ids``, the retriever, their async forms)
    checks each document found and refuses the whole result if one is not the contract's
    (:class:`~ctxemb_core.errors.ContractMismatchError`, or ``MissingStampError`` for one written
    around ctxemb). The fingerprint is removed from the documents returned, so they read as they
    were added. Searching by a raw vector checks the vector's form (present, finite, the
    contract's width) and the results: a vector carries no contract.

    Args:
        store: the store to guard, built with the same :class:`ContractEmbeddings` (e.g.
            ``InMemoryVectorStore(embeddings)``).
        embeddings: the contract's embeddings (default: ``store.embeddings``).

    Example:
        >>> embeddings = ContractEmbeddings(contract_for("all-MiniLM-L6-v2"))
        >>> store = ContractVectorStore(InMemoryVectorStore(embeddings))
        >>> store.add_texts(["Green tea is steamed."])  # doctest: +SKIP
    """

    def __init__(self, store: VectorStore, embeddings: ContractEmbeddings | None = None) -> None:
        if not isinstance(store, VectorStore):
            raise TypeError(f"store must be a LangChain VectorStore, got {type(store).__name__}")
        self.store = store
        self._embeddings = contract_embeddings(
            embeddings if embeddings is not None else store.embeddings
        )
        inner = getattr(store.embeddings, "contract", None)
        if store.embeddings is not None and not (
            inner is not None and same_contract(self._embeddings.contract, inner)
        ):
            raise TypeError(
                "the store embeds with other embeddings than the guard's contract; build it "
                "with the same ContractEmbeddings"
            )

    @property
    def embeddings(self) -> Embeddings:
        return self._embeddings

    @property
    def contract(self) -> Any:
        return self._embeddings.contract

    # -- in ----------------------------------------------------------------------------------

    def _write(
        self, ids: list[str], texts: list[str], metas: list[Any] | None, **kwargs: Any
    ) -> None:
        # Each document stamped, the batch checked whole before the store sees it (a store that
        # keeps the last of a repeated id would lose texts silently); kwargs are the store's.
        self.store.add_texts(texts, stamped(ids, texts, metas, self.contract), ids=ids, **kwargs)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        return self.store.delete(ids, **kwargs)

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        return await self.store.adelete(ids, **kwargs)

    # -- out ---------------------------------------------------------------------------------

    def _search(self, search: Any, *args: Any, **kwargs: Any) -> Any:
        """The inner store's search, after a sample of an in-memory store is checked; if the
        search itself fails (another width found outside the sample), every stored record is
        checked so the contract's error is raised, not the store's."""
        check_memory_sample(self.store, self.contract)
        try:
            return search(*args, **kwargs)
        except Exception:
            check_memory_sample(self.store, self.contract, every=True)
            raise

    def _checked(self, documents: Sequence[Document]) -> list[Document]:
        check_documents(
            [d.metadata for d in documents],
            self.contract,
            ids=[str(d.id) if d.id is not None else str(i) for i, d in enumerate(documents)],
            rewrite=REWRITE,
        )
        return [unstamped(d) for d in documents]

    def _checked_pairs(self, pairs: Sequence[tuple[Document, float]]) -> list[Any]:
        documents = self._checked([d for d, _ in pairs])
        return [(d, s) for d, (_, s) in zip(documents, pairs, strict=True)]

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return self._checked(documents_by_ids(self.store, ids))

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return self._checked(self._search(self.store.similarity_search, query, k=k, **kwargs))

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        found = self._search(self.store.similarity_search_with_score, query, k=k, **kwargs)
        return self._checked_pairs(found)

    def _similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        search = self.store.similarity_search_with_relevance_scores
        found = self._search(search, query, k=k, **kwargs)
        return self._checked_pairs(found)

    async def _asimilarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        # The base class's async form asks this wrapper for a score function it cannot have
        # (the inner store knows its metric): delegate as the sync form does.
        check_memory_sample(self.store, self.contract)
        found = await self.store.asimilarity_search_with_relevance_scores(query, k=k, **kwargs)
        return self._checked_pairs(found)

    def _vector(self, embedding: Any) -> list[float]:
        """A query vector given by the caller: present, finite, of the contract's width."""
        return check_query_vector(
            embedding, self.contract.output_dim, "embedding", contract=self.contract
        )

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        search = self.store.similarity_search_by_vector
        return self._checked(self._search(search, self._vector(embedding), k=k, **kwargs))

    # k, fetch_k and lambda_mult are passed on as the caller gave them: the inner store's own
    # defaults apply, as they would without the guard.

    def max_marginal_relevance_search(
        self, query: str, *args: Any, **kwargs: Any
    ) -> list[Document]:
        found = self._search(self.store.max_marginal_relevance_search, query, *args, **kwargs)
        return self._checked(found)

    def max_marginal_relevance_search_by_vector(
        self, embedding: list[float], *args: Any, **kwargs: Any
    ) -> list[Document]:
        search = self.store.max_marginal_relevance_search_by_vector
        return self._checked(self._search(search, self._vector(embedding), *args, **kwargs))

    @classmethod
    def _for_texts(cls, embedding: ContractEmbeddings, **kwargs: Any) -> ContractVectorStore:
        """For ``from_texts``: a guarded ``InMemoryVectorStore`` (``kwargs`` are ignored, as
        that store ignores them)."""
        return cls(InMemoryVectorStore(embedding))
