"""The retriever of :class:`~._alias.ContractAliasDocumentStore`: by query text, embedded by the
encoder of the index the alias serves at that call."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_to_dict
from haystack.document_stores.types.filter_policy import FilterPolicy, apply_filter_policy

from ctxemb_core.guard import check_count
from ctxemb_haystack._alias import ContractAliasDocumentStore, as_written
from ctxemb_haystack._base import Serialised, in_thread
from ctxemb_haystack._search import search_text


@component
class ContractAliasRetriever(Serialised):
    """Retrieves from a :class:`ContractAliasDocumentStore` by query text.

    The query is embedded by the encoder of the index the alias serves at that call, and that
    index is searched: after a cutover the next query follows, index and encoder together;
    without the new contract's encoder ``run`` raises ``NoEncoderError`` and returns nothing.
    Scores are the contract's similarities (higher is nearer). ``filters``: Haystack's; a
    filter of ``meta.<key> ==`` tests is the store's own search filter, any other selects the
    documents first and ranks them exactly.

    Args:
        document_store: a :class:`ContractAliasDocumentStore`.
        top_k: how many documents to return.
        filters, filter_policy: as Haystack's embedding retrievers take them.

    Example:
        >>> retriever = ContractAliasRetriever(ContractAliasDocumentStore("docs", ...), top_k=3)
        >>> retriever.run(query="how is green tea made")["documents"]  # doctest: +SKIP
    """

    def __init__(
        self,
        document_store: ContractAliasDocumentStore,
        *,
        top_k: int = 10,
        filters: dict[str, Any] | None = None,
        filter_policy: FilterPolicy | str = FilterPolicy.REPLACE,
    ) -> None:
        if not isinstance(document_store, ContractAliasDocumentStore):
            raise TypeError(
                "ContractAliasRetriever reads a ContractAliasDocumentStore, got "
                f"{type(document_store).__name__}"
            )
        self.document_store = document_store
        self.top_k = check_count(top_k, "top_k")
        self.filters = filters
        self.filter_policy = (
            FilterPolicy.from_str(filter_policy)
            if isinstance(filter_policy, str)
            else filter_policy
        )

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            document_store=self.document_store,
            top_k=self.top_k,
            filters=self.filters,
            filter_policy=self.filter_policy.value,
        )

    @component.output_types(documents=list[Document])
    def run(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, list[Document]]:
        """The ``top_k`` documents nearest ``query`` in the index the alias serves now.

        Raises:
            NoEncoderError: the alias serves a contract no encoder was given for.
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        k = check_count(top_k if top_k is not None else self.top_k, "top_k")
        filters = apply_filter_policy(self.filter_policy, self.filters, filters)
        store = self.document_store
        found = search_text(store.serving(), store, query, k, filters)
        return {"documents": as_written(found)}

    run_async = in_thread(run)
