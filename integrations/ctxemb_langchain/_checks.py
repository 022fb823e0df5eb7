"""The checks ContractVectorStore and ContractChroma make around a store's own calls, and the
records they read back without ctxemb's own keys."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core import EmbeddingContract
from ctxemb_core.documents import (
    FINGERPRINT_KEY,
    TEXT_KEY,
    check_document_widths,
    check_documents,
    stamp_meta,
    store_sample,
)
from ctxemb_core.guard import check_records

#: How a LangChain user writes again the documents written around ctxemb (a refusal's advice).
REWRITE = (
    "through the ContractVectorStore, store.delete(ids=[...]), then store.add_documents(documents)"
)


def check_memory_sample(store: Any, contract: EmbeddingContract, *, every: bool = False) -> None:
    """Check a few stored records of an ``InMemoryVectorStore`` (they stand for the whole, as
    every write goes through the guard), or ``every`` one; other stores are checked by their
    results only."""
    records = getattr(store, "store", None)
    if not isinstance(store, InMemoryVectorStore) or not isinstance(records, dict):
        return
    # Its own search fails on vectors of another width before any result could be checked.
    picked = list(records.values()) if every else store_sample(records.values())
    ids = [str(r.get("id")) for r in picked]
    check_documents([r.get("metadata") or {} for r in picked], contract, ids=ids, rewrite=REWRITE)
    # The fingerprint may have been copied onto a vector of another width: name it here.
    check_document_widths([r.get("vector") for r in picked], contract, ids=ids)


def documents_by_ids(store: Any, ids: Sequence[str]) -> list[Document]:
    """``store.get_by_ids(ids)``, but a plain ``langchain_chroma.Chroma`` is read as
    ``ContractChroma`` reads it: a record stored without metadata comes back with ``{}``, so
    the fingerprint check names it (Chroma's own builds ``Document(metadata=None)``, a pydantic
    error naming no record).

    ``Chroma`` is looked up only where it is imported already: a store of it was made after its
    module was imported, and importing langchain-chroma (chromadb, ~0.7 s) to find that a
    ``ContractPGVector`` is no ``Chroma`` slows every other store's start."""
    chroma: Any = getattr(sys.modules.get("langchain_chroma"), "Chroma", None)
    if (
        chroma is None
        or not isinstance(store, chroma)
        or type(store).get_by_ids is not chroma.get_by_ids
    ):
        return list(store.get_by_ids(ids))
    return chroma_documents(store, ids)


def chroma_documents(store: Any, ids: Sequence[str]) -> list[Document]:
    """The documents of these ids read through a Chroma store's ``get``, as ``ContractChroma``
    reads them: a record stored without metadata has ``{}``, one without text is none."""
    if not ids:  # chromadb refuses an empty id list; nothing asked, nothing found
        return []
    found = store.get(ids=list(ids), include=["documents", "metadatas"])
    return [
        Document(page_content=text, metadata=meta or {}, id=i)
        for i, text, meta in zip(found["ids"], found["documents"], found["metadatas"], strict=True)
        if text is not None  # as Chroma's own: a record without text is no Document
    ]


# ctxemb's own keys, kept in the store and taken out of what a LangChain caller gets back.
_OURS = (FINGERPRINT_KEY, TEXT_KEY)


def unstamped(document: Document) -> Document:
    """A copy without the fingerprint and the text digest: documents come out as they went in."""
    if FINGERPRINT_KEY not in document.metadata and TEXT_KEY not in document.metadata:
        return document
    meta = {k: v for k, v in document.metadata.items() if k not in _OURS}
    return document.model_copy(update={"metadata": meta})


def without_digest(results: Any) -> Any:
    """A Chroma ``get``/``query`` result with the text digest taken out of each record's
    metadata (a record that had no other key has none, as before ctxemb wrote the digest)."""
    metas = results.get("metadatas") if isinstance(results, dict) else None
    if not metas:
        return results
    nested = isinstance(metas[0], list)
    rows = [_unkeyed(m) for m in metas] if not nested else [[_unkeyed(m) for m in r] for r in metas]
    return {**results, "metadatas": rows}


def _unkeyed(meta: Any) -> Any:
    if not isinstance(meta, Mapping) or TEXT_KEY not in meta:
        return meta
    return {k: v for k, v in meta.items() if k != TEXT_KEY} or None


def stamped(
    ids: list[str], texts: list[str], metas: list[Any] | None, contract: EmbeddingContract
) -> list[dict[str, Any]]:
    """The metadata of a batch (``_writer.batch``'s) stamped with the contract and each text's
    digest, the batch checked whole before a store sees it (a store that keeps the last of a
    repeated id would lose texts silently)."""
    check_records(ids, texts, metas)
    given = metas or [None] * len(texts)
    return [stamp_meta(m or {}, contract, text=t) for m, t in zip(given, texts, strict=True)]


def check_settings(kwargs: dict[str, Any], contract: EmbeddingContract) -> None:
    """Refuse collection settings other than the space the contract's collection has anyway."""
    space = "cosine" if contract.normalize else "ip"
    metadata = kwargs.pop("collection_metadata", None) or {}
    configuration = kwargs.pop("collection_configuration", None) or {}
    given = {"collection_metadata": metadata, "collection_configuration": configuration}
    asked = [metadata.get("hnsw:space")] if metadata else []
    if configuration:
        asked.append((configuration.get("hnsw") or {}).get("space"))
    extra = set(metadata) - {"hnsw:space"} or set(configuration) - {"hnsw"}
    if extra or (configuration.get("hnsw") and set(configuration["hnsw"]) - {"space"}):
        raise TypeError(
            f"ContractChroma takes no collection settings but the space ({given}): the "
            "collection's metadata is the contract's stamp"
        )
    for value in asked:
        if value != space:
            raise TypeError(
                f"this contract's collection searches in the {space!r} space, not {value!r} "
                f"({'normalised' if space == 'cosine' else 'unnormalised'} vectors); leave the "
                "space out, the contract decides it"
            )


def without_text_digest(meta: Any) -> Any:
    """A record's metadata to write without a text digest carried in from an earlier text."""
    # Chroma stores no empty metadata: a record without any keeps none.
    if isinstance(meta, Mapping):
        return {k: v for k, v in meta.items() if k != TEXT_KEY} or None
    return meta or None  # not a mapping: refused, by name, with the batch


class UnstampedView:
    """The collection as ``Chroma``'s own methods read it: each record's metadata without the
    text digest ctxemb keeps (documents come out as they went in); all else as it is."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return without_digest(self._raw.get(*args, **kwargs))

    def query(self, *args: Any, **kwargs: Any) -> Any:
        return without_digest(self._raw.query(*args, **kwargs))
