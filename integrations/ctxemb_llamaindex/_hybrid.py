"""A LlamaIndex retriever over a hybrid index: dense and BM25 rankings fused under one stamp.

LlamaIndex's ``QueryFusionRetriever`` over a vector retriever and ``BM25Retriever`` fuses what
it is given: nothing pins the BM25 analyzer or the fusion constant beside the index. Here the
retriever queries core's :class:`~ctxemb_core.hybrid.pair.HybridIndex` (the one the CLI and
the other frameworks open beside the same collection or table): the dense side through the
store's guard, the lexical side and the fusion under the stamp's hybrid contract, so another
recipe is refused with the field named.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from ctxemb_core.hybrid import Fusion, HybridContract, LexicalContract
from ctxemb_core.hybrid.guard import check_recipe
from ctxemb_core.hybrid.pair import HybridIndex, beside_store
from ctxemb_core.validate import check_ids, check_positive_int
from ctxemb_llamaindex._nodes import node_record, stored_node
from ctxemb_llamaindex._store import ContractVectorStore

#: The stores whose hybrid index :meth:`ContractHybridRetriever.from_store` opens.
_STORES = "a ContractChromaVectorStore, a ContractPGVectorStore or a ContractQdrantVectorStore"


class ContractHybridRetriever(BaseRetriever):
    """Fused dense + BM25 retrieval from a hybrid index, refused under another recipe.

    Each result is the stored node with the fused score; ``hybrid_ranks`` holds each side's
    rank and score of the last call's results (``None``: not among that side's candidates).
    Write through :meth:`add` (both sides, in step); a write through the vector store alone
    reaches the dense side only, and the next query is refused until :meth:`refresh`.

    Args:
        index: the :class:`~ctxemb_core.hybrid.pair.HybridIndex`, or build one from a store
            with :meth:`from_store`.
        similarity_top_k: how many fused results.
        lexical, fusion: the caller's recipe; ``None`` takes the stamp's. Another is refused
            now and on every query (``HybridMismatchError``, naming the field).

    Example:
        >>> retriever = ContractHybridRetriever.from_store(store)  # doctest: +SKIP
        >>> retriever.retrieve("how is green tea made")  # doctest: +SKIP
    """

    def __init__(
        self,
        index: HybridIndex,
        *,
        similarity_top_k: int = 4,
        lexical: LexicalContract | None = None,
        fusion: Fusion | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(index, HybridIndex):
            raise TypeError(f"index must be a HybridIndex, got {type(index).__name__}")
        self.index = index
        self.similarity_top_k = check_positive_int(similarity_top_k, "similarity_top_k")
        self.lexical, self.fusion = lexical, fusion
        check_recipe(index.contract, lexical, fusion, where=repr(index.name))  # now, not later
        self.hybrid_ranks: dict[str, dict[str, Any]] = {}
        super().__init__(**kwargs)

    @property
    def contract(self) -> HybridContract:
        return self.index.contract

    @classmethod
    def from_store(
        cls,
        store: ContractVectorStore,
        *,
        lexical_path: str | os.PathLike[str] | None = None,
        lexical: LexicalContract | None = None,
        fusion: Fusion | None = None,
        create: bool = True,
        refresh: bool = False,
        **kwargs: Any,
    ) -> ContractHybridRetriever:
        """The retriever of the hybrid index beside ``store``'s collection or table, opened by
        its store adapter as the CLI opens it (``lexical_path``: Chroma's lexical folder;
        ``create``: build the lexical side from the stored texts if there is none;
        ``refresh``: bring it in step after writes around the retriever)."""
        options: dict[str, Any] = {"lexical": lexical, "fusion": fusion, "create": create}
        index = beside_store(store, _STORES, lexical_path=lexical_path, refresh=refresh, **options)
        return cls(index, lexical=lexical, fusion=fusion, **kwargs)

    def add(self, nodes: Sequence[BaseNode]) -> list[str]:
        """Write nodes to both sides (an upsert by node id), embedded by the index under its
        contract; all or nothing on the dense side."""
        records = [node_record(n) for n in nodes]
        if not records:
            return []
        ids, texts, metas = (list(part) for part in zip(*records, strict=True))
        self.index.upsert(ids, texts, metas)
        return ids

    def delete(self, ids: Sequence[str]) -> None:
        """Delete these node ids from both sides (ids not stored are no error)."""
        if list(ids):
            self.index.delete(check_ids(ids))

    def refresh(self) -> tuple[list[str], list[str], list[str]]:
        """Bring the lexical side in step with the dense side; the ids ``(added, removed,
        changed)`` on the lexical side."""
        return self.index.refresh()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.index.query(
            query_bundle.query_str, self.similarity_top_k, lexical=self.lexical, fusion=self.fusion
        )
        if not hits:
            return []
        got = self.index.dense.get(ids=[h.id for h in hits], include=["metadatas"])
        stored = dict(zip(got["ids"], got["metadatas"], strict=True))
        self.hybrid_ranks = {
            h.id: {
                "dense_rank": h.dense_rank,
                "dense_score": h.dense_score,
                "lexical_rank": h.lexical_rank,
                "lexical_score": h.lexical_score,
            }
            for h in hits
        }
        return [
            NodeWithScore(node=stored_node(h.id, h.document, stored.get(h.id)), score=h.score)
            for h in hits
        ]
