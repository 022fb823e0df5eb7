"""What one store brings to the Haystack guard: the :class:`Binding` protocol.

:class:`~._index.IndexGuard` does every write and retrieval on core's
:class:`~ctxemb_core.index.GuardedIndex`; a store's binding (:mod:`._chroma`, :mod:`._pgvector`)
gives it only what is that store's own.
"""

from __future__ import annotations

from typing import Any, Protocol

from haystack import Document

from ctxemb_core import EmbeddingContract
from ctxemb_core.index import StoreDriver
from ctxemb_core.remedy import StoreTerms
from ctxemb_haystack._writes import Row


class Binding(Protocol):
    """What one store brings to :class:`IndexGuard`: only what is that store's own."""

    #: The index's name in the store (a collection's, a table's).
    name: str
    #: The words of the store's adapter, for the advice of an error (``ctxemb_pgvector``…).
    terms: StoreTerms

    def driver(self) -> StoreDriver:
        """The driver of the index behind the Haystack store (made once, from the store's own
        connection parameters, on first use: building a pipeline reaches no server)."""
        ...

    def opened(self) -> None:
        """Called after each open (Chroma hands its client to a store that has none yet)."""
        ...

    def metadata(self, document: Document) -> dict[str, Any]:
        """The metadata of ``document`` the store can keep (others left out, warned)."""
        ...

    def check_batch(self, contract: EmbeddingContract, rows: list[Row]) -> None:
        """What the store would refuse of a batch (its ``(id, text, metadata)`` rows), refused
        before the index is created."""
        ...

    def made_empty(self) -> str:
        """The remedy for an empty unstamped index the Haystack store made by itself."""
        ...

    def open_hybrid(self, contract: EmbeddingContract, **options: Any) -> Any:
        """The hybrid index of the store's adapter (``open_hybrid``) over this index."""
        ...


def made_empty(kind: str, store: str, remedy: str) -> str:
    """:meth:`Binding.made_empty` in every store's words: the ``kind`` the Haystack ``store``
    made empty by itself, and how to remove it (``remedy``)."""
    return (
        f"The {kind} is empty: the {store} created it before the first ContractDocumentWriter "
        f"write (any store call does). {remedy}, and let ContractDocumentWriter create it "
        "stamped."
    )
