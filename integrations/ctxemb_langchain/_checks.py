"""The checks ContractVectorStore makes around a store's own calls."""

from __future__ import annotations

import itertools
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core import EmbeddingContract
from ctxemb_core.documents import FINGERPRINT_KEY, check_documents

#: Stored documents of an ``InMemoryVectorStore`` checked before a search (its own search fails
#: on vectors of another width before any result could be checked).
MEMORY_SAMPLE = 16


def check_memory_sample(store: Any, contract: EmbeddingContract) -> None:
    """Check a few stored records of an ``InMemoryVectorStore`` (they stand for the whole, as
    every write goes through the guard); other stores are checked by their results only."""
    records = getattr(store, "store", None)
    if not isinstance(store, InMemoryVectorStore) or not isinstance(records, dict):
        return
    half = MEMORY_SAMPLE // 2
    picked = list(itertools.islice(records.values(), half))
    if len(records) > half:
        picked += list(itertools.islice(reversed(records.values()), half))
    check_documents(
        [r.get("metadata") or {} for r in picked],
        contract,
        ids=[str(r.get("id")) for r in picked],
    )


def unstamped(document: Document) -> Document:
    """A copy without the fingerprint: documents come out as they went in."""
    if FINGERPRINT_KEY not in document.metadata:
        return document
    meta = {k: v for k, v in document.metadata.items() if k != FINGERPRINT_KEY}
    return document.model_copy(update={"metadata": meta})
