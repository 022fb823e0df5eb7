"""A retriever over a guarded store: LangChain's own, refusing stores ctxemb cannot check.

:class:`GuardedStore` is what the guarded stores (``ContractChroma``, ``ContractVectorStore``)
share: their retriever. It lives here, below both, so the retriever knows a guarded store
without importing either.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever
from pydantic import model_validator


class GuardedStore(VectorStore):
    """A vector store whose every search goes through ctxemb's guard (``ContractChroma`` and
    ``ContractVectorStore``): the only stores a :class:`ContractRetriever` takes."""

    def as_retriever(self, **kwargs: Any) -> Any:
        """A :class:`~ctxemb_langchain.ContractRetriever` over this store (``k=`` accepted)."""
        tags = kwargs.pop("tags", None) or [*self._get_retriever_tags()]
        return ContractRetriever(vectorstore=self, tags=tags, **kwargs)


class ContractRetriever(VectorStoreRetriever):
    """``VectorStoreRetriever`` over a :class:`ContractChroma` or :class:`ContractVectorStore`.

    Every search goes through the store's guard, so a store of another contract raises
    :class:`~ctxemb_core.errors.ContractMismatchError` inside a chain instead of returning
    documents. ``k`` may be given on construction or per call (``retriever.invoke(q, k=3)``).

    Example:
        >>> retriever = ContractRetriever(vectorstore=store, k=3)  # or store.as_retriever(k=3)
        >>> chain = retriever | format_docs | prompt | model  # doctest: +SKIP
    """

    k: int | None = None

    @model_validator(mode="after")
    def _guarded_store(self) -> ContractRetriever:
        if not isinstance(self.vectorstore, GuardedStore):
            raise TypeError(
                "ContractRetriever needs a ContractChroma or a ContractVectorStore, got "
                f"{type(self.vectorstore).__name__}; wrap the store in ContractVectorStore"
            )
        return self

    def _kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        base = dict(self.search_kwargs)
        if self.k is not None:
            base["k"] = self.k
        return base | kwargs

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return super()._get_relevant_documents(
            query, run_manager=run_manager, **self._kwargs(kwargs)
        )

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return await super()._aget_relevant_documents(
            query, run_manager=run_manager, **self._kwargs(kwargs)
        )
