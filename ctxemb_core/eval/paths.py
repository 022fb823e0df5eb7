"""Evaluation paths: one index and its query side, under one contract, through one store.

``ctxemb eval --via NAME`` drives a :class:`SearchPath`. The core has one (:class:`MemoryPath`,
exact search in numpy); each store adapter has its own (``ctxemb_chroma.eval_path``,
``ctxemb_haystack.eval_path``, ``ctxemb_langchain.eval_path``), built from the adapter's public
pieces, so what is measured is what a user of that integration runs; what the paths share is
here in core (:mod:`.guarded` for a store's guarded index, :mod:`.frameworks` for a framework's
stores), so an adapter's path says only what is its own. A path returns
similarities (higher is better) with the contract's meaning: the store's distance is turned into
a score inside the store's adapter (:func:`ctxemb_core.guard.similarity`), never by the caller.

:func:`check_documents`, :func:`check_queries` and :func:`check_pairs` are the argument checks
every path shares, so each refuses the same mistakes with the same words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.eval.metrics import build_run, search_topk
from ctxemb_core.records import storable
from ctxemb_core.validate import check_positive_int, check_text, check_texts

__all__ = [
    "VIAS",
    "MemoryPath",
    "SearchPath",
    "check_documents",
    "check_pairs",
    "check_queries",
    "via_store",
]

#: Every ``--via`` of ``ctxemb eval``: the core's exact search, Chroma embedded and as a server,
#: PostgreSQL + pgvector, and Haystack, LangChain and LlamaIndex each over an in-memory store,
#: over Chroma, over pgvector and over Qdrant.
VIAS = (
    "memory",
    "chroma",
    "chroma-server",
    "pgvector",
    "qdrant",
    "haystack",
    "haystack-chroma",
    "haystack-pgvector",
    "haystack-qdrant",
    "langchain",
    "langchain-chroma",
    "langchain-pgvector",
    "langchain-qdrant",
    "llamaindex",
    "llamaindex-chroma",
    "llamaindex-pgvector",
    "llamaindex-qdrant",
)


def via_store(via: str) -> str | None:
    """The store a ``--via`` path keeps its index in (``chroma``, ``pgvector``, ``qdrant``), or
    ``None`` for an in-memory one.

    Example:
        >>> via_store("llamaindex-pgvector"), via_store("chroma-server"), via_store("haystack")
        ('pgvector', 'chroma', None)
    """
    framework, _, store = via.partition("-")
    return next((s for s in ("qdrant", "pgvector", "chroma") if s in (framework, store)), None)


@runtime_checkable
class SearchPath(Protocol):
    """What an evaluation drives: index documents, search queries, score sentence pairs."""

    #: The ``--via`` name of this path.
    via: str

    @property
    def fingerprint(self) -> str:
        """The contract fingerprint that indexing and querying run under."""
        ...

    def index(self, documents: Mapping[str, str]) -> int:
        """Store the documents (``{id: text}``, document role) not stored yet.

        Returns:
            How many were added (0 when the index already held them all).
        """
        ...

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        """The top ``k`` stored documents of each query (query role).

        Returns:
            ``{query_id: {doc_id: similarity}}``, a run for :func:`ctxemb_core.eval.evaluate`.
        """
        ...

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        """The similarity of each pair, through the store.

        ``second[i]`` is stored (document role) and ``first[i]`` (query role) is searched
        against it alone, so the score is the store's own, turned into a similarity by its
        adapter. For a contract without role prefixes this is the symmetric cosine MTEB reports.

        Returns:
            ``(n,)`` float64 similarities.
        """
        ...

    def close(self) -> None:
        """Release what the path opened (clients, temporary stores, servers)."""
        ...


def check_documents(documents: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """``{id: text}`` as two aligned lists, every id and text a valid non-empty-id string.

    Raises:
        InvalidInputError: not a mapping, an id that is empty or not a string, a text that is
            not a string or not valid Unicode (each named).
    """
    return _checked_mapping(documents, "documents")


def check_queries(queries: Mapping[str, str], k: int) -> tuple[list[str], list[str], int]:
    """``{id: text}`` as two aligned lists, and ``k`` checked positive.

    Raises:
        InvalidInputError: as :func:`check_documents`, or ``k`` is not a positive integer.
    """
    ids, texts = _checked_mapping(queries, "queries")
    return ids, texts, check_positive_int(k, "k")


def check_pairs(first: Sequence[str], second: Sequence[str]) -> tuple[list[str], list[str]]:
    """Two equally long, non-empty batches of texts.

    Raises:
        InvalidInputError: either is not a batch of valid texts, they differ in length, or they
            are empty.
    """
    a = check_texts(first, "first", allow_empty=False)
    b = check_texts(second, "second", allow_empty=False)
    if len(a) != len(b):
        raise InvalidInputError(
            f"first and second must pair up: {len(a)} and {len(b)} texts were given"
        )
    return a, b


def _checked_mapping(items: Mapping[str, str], name: str) -> tuple[list[str], list[str]]:
    if not isinstance(items, Mapping):
        kind = type(items).__name__
        raise InvalidInputError(f"{name} must be a mapping {{id: text}}, got {kind}")
    ids: list[str] = []
    texts: list[str] = []
    for key, text in items.items():
        key = check_text(key, f"{name} id {key!r}")
        if not key:
            raise InvalidInputError(f"{name}: an id is empty; every record needs a name")
        ids.append(key)
        texts.append(check_text(text, f"{name}[{key!r}]"))
    return ids, texts


class MemoryPath:
    """Exact search in numpy under one contract: the reference every store path is held to.

    Documents are embedded once (ids already held with the same text are skipped) and kept as
    one matrix; queries are searched exhaustively with :func:`~ctxemb_core.eval.search_topk`.
    The score is the contract's similarity as a ctxemb Chroma collection reports it
    (:func:`ctxemb_core.guard.similarity`): the cosine under a normalising contract, the inner
    product otherwise (the space such a collection is created with).

    Example:
        >>> from ctxemb_core import Embedder, contract_for
        >>> path = MemoryPath(Embedder(contract_for("sentence-transformers/all-MiniLM-L6-v2")))
        >>> path.index({"tea": "Green tea is steamed.", "moon": "The Moon has phases."})
        2
        >>> run = path.search({"q": "how is green tea made"}, k=1)
        >>> list(run["q"])
        ['tea']
    """

    via = "memory"

    def __init__(self, embedder: Embedder) -> None:
        if not isinstance(embedder, Embedder):
            raise InvalidInputError(f"MemoryPath needs an Embedder, got {type(embedder).__name__}")
        self.embedder = embedder
        self._row: dict[str, int] = {}
        self._texts: list[str] = []
        self._vectors = np.empty((0, embedder.contract.output_dim), dtype=np.float32)

    def __repr__(self) -> str:
        return f"MemoryPath(documents={len(self._texts)}, fingerprint={self.fingerprint[:12]})"

    @property
    def fingerprint(self) -> str:
        return self.embedder.contract.fingerprint

    def count(self) -> int:
        """How many documents are held."""
        return len(self._texts)

    def index(self, documents: Mapping[str, str]) -> int:
        """Embed the documents not held yet (or held under another text); returns how many."""
        ids, texts = check_documents(documents)
        todo = [k for k, (i, t) in enumerate(zip(ids, texts, strict=True)) if self._stale(i, t)]
        if not todo:
            return 0
        vectors = self._vectors_of([texts[k] for k in todo], query=False)
        new_rows = []
        for n, k in enumerate(todo):
            row = self._row.get(ids[k])
            if row is None:
                new_rows.append(n)
                self._row[ids[k]] = len(self._texts)
                self._texts.append(texts[k])
            else:  # the same id with another text: replaced, as an upsert would
                self._vectors[row] = vectors[n]
                self._texts[row] = texts[k]
        self._vectors = np.concatenate([self._vectors, vectors[new_rows]])
        return len(todo)

    def search(self, queries: Mapping[str, str], k: int) -> dict[str, dict[str, float]]:
        qids, texts, k = check_queries(queries, k)
        if not self._texts:
            raise InvalidInputError("nothing is indexed yet: call index() before search()")
        if not qids:
            return {}
        order = list(self._row)  # ids in row order (rows are appended as ids are first seen)
        indices, scores = search_topk(self._vectors_of(texts, query=True), self._vectors, k)
        return build_run(qids, order, indices, scores)

    def pair_scores(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        a, b = check_pairs(first, second)
        u = self._vectors_of(a, query=True).astype(np.float64)
        v = self._vectors_of(b, query=False).astype(np.float64)
        return np.einsum("ij,ij->i", u, v)

    def close(self) -> None:
        self._row.clear()
        self._texts.clear()
        self._vectors = self._vectors[:0]

    def _stale(self, doc_id: str, text: str) -> bool:
        row = self._row.get(doc_id)
        return row is None or self._texts[row] != text

    def _vectors_of(self, texts: list[str], *, query: bool) -> np.ndarray:
        """The vectors a store would hold (:func:`~ctxemb_core.guard.storable`), scaled to unit
        length under a normalising contract so the inner product is the store's cosine."""
        contract = self.embedder.contract
        embed = self.embedder.embed_queries if query else self.embedder.embed_documents
        vectors = storable(embed(texts), contract.precision)
        if contract.normalize:
            # float32 unit vectors already; int8 and binary ones are not (cosine space rescales).
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        return vectors.astype(np.float32, copy=False)
