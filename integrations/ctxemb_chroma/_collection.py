"""A stamped Chroma collection bound to one contract: core's guarded index in Chroma's shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chromadb.api.models.Collection import Collection

from ctxemb_chroma._driver import ChromaDriver
from ctxemb_chroma._store import read_settled, translated
from ctxemb_core import Embedder
from ctxemb_core.guard import check_count, check_delete, check_paging
from ctxemb_core.index import IndexFacade


class GuardedCollection(IndexFacade[ChromaDriver, Collection]):
    """A Chroma collection bound to one contract; every call is checked before it runs. Its
    own: Chroma's shapes and ``raw``."""

    _driver_type = ChromaDriver
    _translated = staticmethod(translated)  # Chroma's errors as ctxemb's

    @property
    def raw(self) -> Collection:
        """The Chroma collection as it was last verified (no embedding function of its own)."""
        return self.driver._collection()

    def _seen(self) -> Collection:
        return self.raw

    def query(
        self,
        query_texts: Sequence[str],
        n_results: int = 10,
        *,
        embedder: Embedder | None = None,
        **kwargs: Any,
    ) -> Any:
        """Embed queries (query role) and search, checked first; ``embedder``: the caller's own,
        of the collection's contract; other keywords are Chroma's ``query``'s."""
        check_count(n_results, "n_results")
        with translated(f"verifying {self.name!r}"):
            vectors = self.index.query_vectors(query_texts, embedder=embedder)
        with translated("query"):
            return read_settled(
                self.raw.query, query_embeddings=vectors, n_results=n_results, **kwargs
            )

    def get(self, **kwargs: Any) -> Any:
        """Chroma's ``get`` on the collection, after the stamp is checked."""
        check_paging(kwargs, "get")
        raw = self.current()
        with translated("get"):
            return read_settled(raw.get, **kwargs)

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        where_document: Mapping[str, Any] | None = None,
    ) -> None:
        """Delete records by id and/or Chroma ``where`` / ``where_document`` (all must match;
        an empty filter is refused, never read as "everything")."""
        ids, given = check_delete(ids, {"where": where, "where_document": where_document})
        raw = self.current()
        if given:  # Chroma's own filter language: the records it matches, deleted by id
            with translated("delete"):
                found = read_settled(raw.get, ids=ids, include=[], **given)["ids"]
            ids = list(found) if ids is None else [i for i in ids if i in set(found)]
        if ids:
            self.index.delete(ids)
