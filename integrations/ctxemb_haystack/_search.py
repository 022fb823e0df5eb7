"""A Haystack search through a guarded index, for every store: the filter, the hits, the
documents.

A Haystack filter of ``meta.<key> == value`` tests (alone or under ``AND``) is the guarded
index's own filter (``{key: value}``), searched by the store; any other filter selects its ids
with the Haystack store's own ``filter_documents`` first, and those records are ranked exactly,
in the contract's distance. Scores are the contract's similarities
(:func:`ctxemb_core.guard.similarity`), higher is nearer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from haystack import Document

from ctxemb_core.guard import similarity
from ctxemb_core.index import GuardedIndex, Match

#: Metadata values a ``meta.<key> == value`` filter is the index's own filter for.
_SCALARS = (str, int, float, bool)


def where_of(filters: dict[str, Any] | None) -> dict[str, Any] | None:
    """A Haystack filter of ``meta.<key> == value`` tests (alone or under ``AND``) as the
    guarded index's filter; ``None`` for no filter or any other filter."""
    if not filters:
        return None
    conditions = filters.get("conditions") if filters.get("operator") == "AND" else [filters]
    if not isinstance(conditions, list) or not conditions:
        return None
    where: dict[str, Any] = {}
    for c in conditions:
        field = c.get("field") if isinstance(c, dict) else None
        if (
            c.get("operator") != "=="
            or not isinstance(field, str)
            or not field.startswith("meta.")
            or "." in field[5:]
            or not isinstance(c.get("value"), _SCALARS)
            or field[5:] in where
        ):
            return None
        where[field[5:]] = c["value"]
    return where


def search(
    index: GuardedIndex,
    store: Any,
    vector: list[float],
    fingerprint: str,
    top_k: int,
    filters: dict[str, Any] | None,
    select: Callable[[GuardedIndex, dict[str, Any]], list[str]] | None = None,
) -> list[Document]:
    """The ``top_k`` documents of ``index`` nearest ``vector`` under ``filters``; ``select``:
    the ids a filter beyond metadata equality selects, where the store's own
    ``filter_documents`` cannot read what ctxemb writes (Qdrant's payload)."""
    where = where_of(filters)
    if filters and where is None:
        # Beyond metadata equality: the ids Haystack's own filter finds, ranked here.
        if select is not None:
            ids = select(index, filters)
        else:
            ids = [d.id for d in store.filter_documents(filters)]
        return _ranked(index, vector, ids, top_k) if ids else []
    found = index.query_vector(vector, top_k, fingerprint=fingerprint, where=where)
    return _found(index, found)


def search_text(
    index: GuardedIndex, store: Any, query: str, top_k: int, filters: dict[str, Any] | None
) -> list[Document]:
    """The ``top_k`` documents of ``index`` nearest ``query``, embedded by the index's own
    encoder (its contract's), under ``filters``."""
    where = where_of(filters)
    if filters and where is None:
        ids = [d.id for d in store.filter_documents(filters)]
        if not ids:
            return []
        vector = [float(x) for x in index.query_vectors([query])[0]]
        return _ranked(index, vector, ids, top_k)
    return _found(index, index.query([query], top_k, where=where)[0])


def stored_documents(index: GuardedIndex, page: int = 1000) -> list[Document]:
    """Every record of ``index`` as a Haystack document (vector included, unscored), read a
    page at a time in the store's order."""
    documents: list[Document] = []
    while True:
        found = index.page(len(documents), page, include=("vector", "text", "metadata"))
        documents += [_document(r.id, r.text, r.metadata, r.vector, None) for r in found]
        if len(found) < page:
            return documents


def _found(index: GuardedIndex, found: list[Match]) -> list[Document]:
    if not found:
        return []
    vectors = {r.id: r.vector for r in index.get([m.id for m in found], include=("vector",))}
    return [_document(m.id, m.text, m.metadata, vectors.get(m.id), m.score) for m in found]


def _document(i: str, text: Any, meta: Any, vector: Any, score: float | None) -> Document:
    # Python floats, as Haystack keeps an embedding: one conversion of the array, not one
    # float() per component (a search of 300 queries spent 2.5 s on it).
    embedding = None if vector is None else np.asarray(vector, dtype=np.float64).tolist()
    return Document(id=i, content=text, meta=dict(meta or {}), embedding=embedding, score=score)


def _ranked(index: GuardedIndex, vector: list[float], ids: list[str], k: int) -> list[Document]:
    """The nearest ``k`` of the records ``ids``, exactly, in the index's distance."""
    space = index.current().space
    records = [
        r for r in index.get(ids, include=("vector", "text", "metadata")) if r.vector is not None
    ]
    if not records:
        return []
    query = np.asarray(vector, dtype=np.float32)
    stored = np.stack([np.asarray(r.vector, dtype=np.float32) for r in records])
    if space == "l2":
        distances = ((stored - query) ** 2).sum(axis=1)
    elif space == "cosine":
        norms = np.linalg.norm(stored, axis=1) * np.linalg.norm(query)
        distances = 1.0 - (stored @ query) / np.where(norms == 0, 1.0, norms)
    else:  # ip
        distances = 1.0 - stored @ query
    order = np.argsort(distances, kind="stable")[:k]
    scores = similarity([float(distances[i]) for i in order], space, index.contract)
    return [
        _document(records[i].id, records[i].text, records[i].metadata, records[i].vector, float(s))
        for i, s in zip(order, scores, strict=True)
    ]
