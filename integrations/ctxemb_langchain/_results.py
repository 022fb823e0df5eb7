"""The documents a LangChain caller gets back from a search on a guarded index: the stored text
and metadata without ctxemb's own keys (documents come out as they went in), and what the search
measured: the contract's distance for ``IndexedStore`` (:func:`scored`), the fused and per-side
ranks and scores for ``ContractHybridRetriever`` (:func:`hybrid_documents`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document

from ctxemb_core.documents import TEXT_KEY
from ctxemb_langchain._checks import unstamped

if TYPE_CHECKING:
    from ctxemb_core.hybrid.pair import HybridHit, HybridIndex
    from ctxemb_core.index import Match

#: The metadata keys each hybrid result carries (they are set over the stored metadata's keys).
RESULT_KEYS = (
    "id",
    "hybrid_score",
    "dense_rank",
    "dense_score",
    "lexical_rank",
    "lexical_score",
    "hybrid_fingerprint",
)


def document(i: str, text: Any, meta: Any) -> Document:
    """A stored record as a ``Document``, without the text digest ctxemb keeps beside it."""
    clean = {k: v for k, v in (meta or {}).items() if k != TEXT_KEY}
    return Document(page_content=text or "", metadata=clean, id=i)


def scored(found: Sequence[Match]) -> list[tuple[Document, float]]:
    """Each match with the contract's distance (``1 - similarity``: lower is nearer)."""
    return [(document(m.id, m.text, m.metadata), 1.0 - m.score) for m in found]


def hybrid_documents(index: HybridIndex, hits: list[HybridHit]) -> list[Document]:
    """Each hit's stored text and metadata, with :data:`RESULT_KEYS` set over it."""
    if not hits:
        return []
    got = index.dense.get(ids=[h.id for h in hits], include=["metadatas"])
    stored = dict(zip(got["ids"], got["metadatas"], strict=True))
    fingerprint = index.contract.fingerprint
    out = []
    for h in hits:
        found = unstamped(Document(h.document or "", metadata=stored.get(h.id) or {}))
        values = (h.id, h.score, h.dense_rank, h.dense_score, h.lexical_rank, h.lexical_score)
        meta = found.metadata | dict(zip(RESULT_KEYS, (*values, fingerprint), strict=True))
        out.append(Document(page_content=found.page_content, metadata=meta, id=h.id))
    return out
