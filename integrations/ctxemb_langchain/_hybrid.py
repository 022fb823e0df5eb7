"""A LangChain retriever over a hybrid index: dense and BM25 rankings fused under one stamp.

LangChain's own ``EnsembleRetriever`` fuses whatever retrievers it is given: nothing pins the
BM25 analyzer, its vocabulary or the fusion constant, so a query side built with another
stemmer or ``c`` returns other documents silently. :class:`ContractHybridRetriever` queries a
:class:`~ctxemb_core.hybrid.pair.HybridIndex` instead: the dense side through the store's guard,
the lexical side and the fusion under the stamp's :class:`~ctxemb_core.hybrid.HybridContract`,
so a caller's other recipe is refused with the field named.

Writes go through the retriever (``add_texts`` / ``add_documents`` / ``delete``, or
``from_texts``), which writes the dense side and then the lexical side (core's
``HybridIndex``); a write through the vector store alone reaches the dense side only, and the
next query is refused (``OutOfStepError``) until ``refresh()`` brings the lexical side in step.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, model_validator

from ctxemb_core.hybrid import Fusion, HybridContract, LexicalContract
from ctxemb_core.hybrid.guard import check_recipe
from ctxemb_core.hybrid.pair import HybridIndex, beside_store
from ctxemb_core.validate import check_ids, check_positive_int
from ctxemb_langchain._results import hybrid_documents
from ctxemb_langchain._writer import TextWriter

_PER_CALL = ("k", "lexical", "fusion")

#: The stores whose hybrid index :meth:`ContractHybridRetriever.from_store` opens.
_STORES = "a ContractQdrant, a ContractChroma or a ContractPGVector"


class ContractHybridRetriever(TextWriter, BaseRetriever):
    """Fused dense + BM25 retrieval from a hybrid index, refused under another recipe.

    Each result is a ``Document`` of the stored text and metadata, plus ``id``,
    ``hybrid_score`` (the fused score), ``dense_rank`` / ``dense_score`` (similarity),
    ``lexical_rank`` / ``lexical_score`` (BM25; a rank is ``None`` where the document was not
    among that side's candidates) and ``hybrid_fingerprint`` (the stamp's).

    Args:
        index: the :class:`~ctxemb_core.hybrid.pair.HybridIndex` (``ctxemb_chroma.open_hybrid``,
            ``ctxemb_pgvector.open_hybrid``), or build one from a store with :meth:`from_store`.
        k: how many fused results (also per call: ``invoke(q, k=3)``).
        lexical: the caller's lexical recipe; ``None`` takes the stamp's. Another recipe is
            refused on construction and on every query (``HybridMismatchError``, naming
            ``lexical.<field>``).
        fusion: the caller's fusion, checked the same way (``fusion.<field>``).

    Example:
        >>> store = ContractChroma("docs", ContractEmbeddings(contract), persist_directory="./db")
        >>> retriever = ContractHybridRetriever.from_store(store, k=3)  # doctest: +SKIP
        >>> retriever.add_texts(["Green tea is steamed."], ids=["tea"])  # doctest: +SKIP
        >>> retriever.invoke("how is green tea made")[0].metadata["lexical_rank"]  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    index: HybridIndex
    k: int = 4
    lexical: LexicalContract | None = None
    fusion: Fusion | None = None

    @model_validator(mode="after")
    def _checked(self) -> ContractHybridRetriever:
        check_positive_int(self.k, "k")
        self._caller(self.lexical, self.fusion)  # another recipe is refused now, not later
        return self

    def _caller(self, lexical: LexicalContract | None, fusion: Fusion | None) -> HybridContract:
        return check_recipe(self.index.contract, lexical, fusion, where=repr(self.index.name))

    @property
    def contract(self) -> HybridContract:
        """The stamp's hybrid contract."""
        return self.index.contract

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def from_store(
        cls,
        store: Any,
        *,
        lexical_path: str | os.PathLike[str] | None = None,
        lexical: LexicalContract | None = None,
        fusion: Fusion | None = None,
        k: int = 4,
        create: bool = True,
        refresh: bool = False,
        **kwargs: Any,
    ) -> ContractHybridRetriever:
        """The retriever of ``store``'s hybrid index (a :class:`ContractChroma`, a
        :class:`ContractPGVector` or a :class:`ContractQdrant`), opened by that store's adapter
        (``ctxemb_chroma`` / ``ctxemb_pgvector`` / ``ctxemb_qdrant.open_hybrid``): the same
        lexical store and stamp as the CLI's.

        Args:
            lexical_path: Chroma: the lexical side's folder (an embedded store's default:
                ``<its path>/ctxemb-lexical/<collection>``; required for a server). PostgreSQL
                keeps the lexical side in the table's database (a path names an old folder to
                convert once).
            create: build the lexical side from the store's texts if there is none.
            refresh: bring the lexical side in step with the store (after writes around the
                retriever) instead of refusing.
            **kwargs: the retriever's own fields (``tags``, ``metadata``).
        """
        options: dict[str, Any] = {"lexical": lexical, "fusion": fusion, "create": create}
        index = beside_store(store, _STORES, lexical_path=lexical_path, refresh=refresh, **options)
        return cls(index=index, k=k, lexical=lexical, fusion=fusion, **kwargs)

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        store: Any,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        **options: Any,
    ) -> ContractHybridRetriever:
        """:meth:`from_store`, then ``texts`` written to both sides (:meth:`add_texts`)."""
        retriever = cls.from_store(store, **options)
        retriever.add_texts(texts, metadatas, ids=ids)
        return retriever

    @classmethod
    def from_documents(
        cls, documents: Sequence[Document], store: Any, **options: Any
    ) -> ContractHybridRetriever:
        """:meth:`from_store`, then ``documents`` written to both sides."""
        retriever = cls.from_store(store, **options)
        retriever.add_documents(documents)
        return retriever

    # -- writing -----------------------------------------------------------------------------

    def _write(
        self, ids: list[str], texts: list[str], metas: list[Any] | None, **kwargs: Any
    ) -> None:
        # TextWriter's add_texts: upserted to the dense side, then to the lexical side.
        if kwargs:  # no store's own arguments to pass on
            raise TypeError(f"add_texts got unexpected keyword arguments {sorted(kwargs)}")
        self.index.upsert(ids, texts, metas)

    def delete(self, ids: Sequence[str]) -> None:
        """Delete these ids from both sides (ids not stored are no error), checked first."""
        if not isinstance(ids, (list, tuple)) or ids:  # an empty list deletes nothing
            self.index.delete(check_ids(ids))

    def refresh(self) -> tuple[list[str], list[str], list[str]]:
        """Bring the lexical side in step with the dense side (after writes around this
        retriever); returns the ids ``(added, removed, changed)`` on the lexical side."""
        return self.index.refresh()

    # -- reading -----------------------------------------------------------------------------

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        # verbose is LangChain's own (read by invoke for its callbacks, then passed on).
        unknown = sorted(set(kwargs) - {*_PER_CALL, "verbose"})
        if unknown:
            raise TypeError(f"unknown arguments {unknown}; a call takes {list(_PER_CALL)}")
        k = check_positive_int(kwargs.get("k", self.k), "k")
        lexical = kwargs.get("lexical", self.lexical)
        fusion = kwargs.get("fusion", self.fusion)
        hits = self.index.query(query, k, lexical=lexical, fusion=fusion)
        return hybrid_documents(self.index, hits)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        # On a worker thread, as the base class does, but with the per-call arguments (its
        # own form takes none, so ainvoke(q, k=1) would be a TypeError).
        return await run_in_executor(
            None,
            self._get_relevant_documents,
            query,
            run_manager=run_manager.get_sync(),
            **kwargs,
        )
