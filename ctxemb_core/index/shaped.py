"""Chroma's result shapes over any guarded index: ``query``, ``query_vectors``, ``get`` (and
``delete`` by id and filter).

Chroma's collection API is the shape callers of a store's index object know: ``ids``,
``documents``, ``metadatas``, ``distances`` (and ``embeddings`` if included), one list per
query. :class:`ShapedFacade` builds it once, from a driver's :class:`~ctxemb_core.index.Hit` and
:class:`~ctxemb_core.index.Record` lists or its :class:`Found` columns (a driver's
``search_columns``: no object per hit), so a store without such a shape of its own
(PostgreSQL's ``GuardedTable``, the next store) gets it by subclassing and says only how it
searches and reads (:meth:`ShapedFacade._search`, :meth:`ShapedFacade._select`). A store
whose client answers in these shapes (Chroma's) reads them back into records and hits with
:func:`records_in` and :func:`hits_in`, asking for the parts :func:`named` names.

The query checks are :class:`~ctxemb_core.index.GuardedIndex`'s. A store whose search reads the
stamp's version in its own snapshot (one round trip) raises
:class:`~ctxemb_core.errors.StampMovedError` from :meth:`~ShapedFacade._search` when it moved:
the index is then verified again and the search runs again.

Example:
    >>> class GuardedThing(ShapedFacade[ThingDriver, Thing]):          # doctest: +SKIP
    ...     _driver_type, _terms = ThingDriver, THING_TERMS
    >>> things.query(["green tea"], n_results=3, include=["documents"])  # doctest: +SKIP
    {'ids': [['d1', ...]], 'documents': [['Green tea is steamed.', ...]]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypedDict

import numpy as np

from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError, StampError, StampMovedError
from ctxemb_core.index.driver import Hit, Record, Version
from ctxemb_core.index.driver_kit import records_of
from ctxemb_core.index.facade import DriverT, IndexFacade, StoredT, _worded
from ctxemb_core.records import refuse_vectorless
from ctxemb_core.validate import check_count, check_ids

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "INCLUDE",
    "NAMES",
    "SHOWN",
    "Found",
    "SearchOptions",
    "ShapedFacade",
    "check_include",
    "columns",
    "found_of",
    "hits_in",
    "hits_of",
    "named",
    "records_in",
]

#: What ``include`` may name, as in Chroma's ``get`` and ``query``.
INCLUDE = ("documents", "metadatas", "embeddings", "distances")
#: What a search returns unless ``include`` says otherwise.
SHOWN = ("documents", "metadatas", "distances")
#: What ``get`` returns unless ``include`` says otherwise.
GOT = ("documents", "metadatas")
#: The name of each part of a record (:class:`~ctxemb_core.index.Record`'s) in these shapes.
NAMES = {"vector": "embeddings", "text": "documents", "metadata": "metadatas"}
#: How often a search whose stamp moved under it is verified and run again.
_ATTEMPTS = 3


class SearchOptions(TypedDict, total=False):
    """A search's options in every store (a store's own extend them).

    - ``where``: keep records whose metadata holds every given key and value.
    - ``include``: the parts returned, of :data:`INCLUDE` (default :data:`SHOWN`).
    """

    where: Mapping[str, Any] | None
    include: Sequence[str]


def check_include(include: Any, *, get: bool = False) -> tuple[str, ...]:
    """``include`` as the parts to return (``distances`` only for a search), else named."""
    if include is (GOT if get else SHOWN):  # the default, as given: nothing to check
        return include
    if isinstance(include, str) or not isinstance(include, Sequence):
        raise InvalidInputError(f"include must be a list of {INCLUDE}, got {include!r}")
    allowed = INCLUDE[:3] if get else INCLUDE
    bad = [i for i in include if i not in allowed]
    if bad:
        raise InvalidInputError(f"include: {bad[0]!r} is not one of {allowed}")
    return tuple(include)


class Found(NamedTuple):
    """One query's results as columns, nearest first: what a driver's ``search_columns``
    returns (a search answered without a :class:`~ctxemb_core.index.Hit` and a
    :class:`~ctxemb_core.index.Record` per hit). A distance is ``None`` for a record stored
    without a vector; ``vectors`` is ``None`` when none were read."""

    ids: list[str]
    distances: list[float | None]
    texts: list[str | None]
    metadatas: list[Mapping[str, Any] | None]
    vectors: list[np.ndarray | None] | None = None


def found_of(hits: Sequence[Hit]) -> Found:
    """The columns of a driver's hits."""
    records = [h.record for h in hits]
    return Found(
        [r.id for r in records],
        [h.distance for h in hits],
        [r.text for r in records],
        [r.metadata for r in records],
        [r.vector for r in records],
    )


def hits_of(found: Found) -> list[Hit]:
    """The hits of a driver's columns (its protocol ``search`` over its ``search_columns``)."""
    vectors = found.vectors or [None] * len(found.ids)
    rows = zip(found.ids, vectors, found.texts, found.metadatas, found.distances, strict=True)
    return [Hit(Record(i, v, t, m), d) for i, v, t, m, d in rows]


def columns(hits: Sequence[Hit] | Found, shown: Sequence[str], width: int) -> dict[str, Any]:
    """One result's hits (or their columns) as Chroma's columns (a missing vector as zeros in
    ``embeddings``)."""
    found = hits if isinstance(hits, Found) else found_of(hits)
    out: dict[str, Any] = {"ids": found.ids}
    if "documents" in shown:
        out["documents"] = found.texts
    if "metadatas" in shown:
        out["metadatas"] = found.metadatas
    if "distances" in shown:
        out["distances"] = [float(d) for d in found.distances if d is not None]
    if "embeddings" in shown:
        zero = np.zeros(width, np.float32)
        rows = [zero if v is None else v for v in found.vectors or [None] * len(found.ids)]
        out["embeddings"] = np.stack(rows) if rows else np.zeros((0, width), np.float32)
    return out


def _parts(shown: Sequence[str]) -> frozenset[str]:
    return frozenset(part for part, name in NAMES.items() if name in shown)


def named(parts: frozenset[str]) -> list[str]:
    """The ``include`` that reads a record's ``parts`` (``vector``, ``text``, ``metadata``)."""
    return [NAMES[p] for p in sorted(parts)]


def records_in(got: Mapping[str, Any], parts: frozenset[str]) -> list[Record]:
    """The records of a ``get`` result in these shapes, with ``parts``."""
    columns = (got.get(NAMES[p]) if p in parts else None for p in ("vector", "text", "metadata"))
    return records_of(got["ids"], *columns)


def hits_in(found: Mapping[str, Any]) -> list[Hit]:
    """The hits of a search result's first query in these shapes (with its distances)."""
    ids, distances = found["ids"][0], found["distances"][0]
    texts = (found.get("documents") or [[None] * len(ids)])[0]
    metas = (found.get("metadatas") or [[None] * len(ids)])[0]
    records = records_of(ids, None, texts, metas)
    return [Hit(r, float(d)) for r, d in zip(records, distances, strict=True)]


class ShapedFacade(IndexFacade[DriverT, StoredT]):
    """An :class:`IndexFacade` whose reads return Chroma's shapes (see the module).

    A subclass may declare its store's search options (``_search_options``, a TypedDict
    extending :class:`SearchOptions`) and give :meth:`_search` and :meth:`_select`; by default
    a search is the driver's ``search`` after the head is checked, and ``get`` the driver's
    ``read`` or ``page``.
    """

    #: The keywords ``query`` and ``query_vectors`` take (a subclass's own, or these).
    _search_options: ClassVar[Any] = SearchOptions
    #: Whether ``query`` reads the head before embedding; ``False`` for a store whose
    #: :meth:`_search` compares the stamp version in its own snapshot.
    _head_before_search: ClassVar[bool] = True

    def _search(
        self,
        vectors: np.ndarray,
        k: int,
        shown: tuple[str, ...],
        search: Mapping[str, Any],
        stamp_version: Version,
    ) -> list[Found]:
        """The results of each query vector as columns, nearest first, while the stamp version
        is ``stamp_version`` (else :class:`StampMovedError`, nothing returned).

        A driver with ``search_columns(vectors, k, *, stamp_version, with_vectors, **options)``
        (answering in :class:`Found` columns) or ``search_many`` (the same, in hits) searches
        every vector itself, with the search's own options (the facade's defaults,
        :meth:`_search_defaults`, where a search gives none) and the stamp's version read in
        the search's own snapshot; any other is searched vector by vector after the head is
        checked."""
        many = getattr(self.driver, "search_columns", None)
        hits = not callable(many)
        if hits:
            many = getattr(self.driver, "search_many", None)
        if callable(many):
            options = {k: v for k, v in search.items() if k != "include"} if search else {}
            for key, value in self._search_defaults().items():
                if options.get(key) is None:
                    options[key] = value
            read = "embeddings" in shown
            found = many(vectors, k, stamp_version=stamp_version, with_vectors=read, **options)
            return [found_of(f) for f in found] if hits else list(found)
        where = search.get("where")
        self.index.check_filter(where)
        self.index.current()
        return [found_of(self.driver.search(v, k, where=where)) for v in vectors]

    def _search_defaults(self) -> dict[str, Any]:
        """The options a driver's ``search_many`` gets where a search gives none (a table's
        ``ef_search``, set when it was opened)."""
        return {}

    def _select(
        self,
        ids: list[str] | None,
        where: Mapping[str, Any] | None,
        limit: int | None,
        offset: int,
        parts: frozenset[str],
    ) -> list[Record]:
        """Stored records by id and/or filter, in the store's order (the head is checked): a
        driver's ``select(ids, where, limit, offset, parts)`` where it has one (a store that
        filters itself), else its ``read`` or ``page``, without a filter."""
        select = getattr(self.driver, "select", None)
        if callable(select):
            return list(select(ids, where, limit, offset, parts))
        if where is not None:
            raise InvalidInputError(f"{self._terms.kind} {self.name!r}: get takes no where here")
        if ids is not None:
            found = self.driver.read(ids, parts)
            return found[offset:] if limit is None else found[offset : offset + limit]
        return self.driver.page(offset, self.driver.count() if limit is None else limit, parts)

    def query(
        self,
        query_texts: Sequence[str] | str,
        n_results: int = 10,
        *,
        embedder: Embedder | None = None,
        **search: Unpack[SearchOptions],
    ) -> dict[str, Any]:
        """Embed queries under the contract (query role) and search; checked before it runs.

        Returns Chroma's shape: ``ids``, ``documents``, ``metadatas``, ``distances`` (and
        ``embeddings`` if included), one list per query; the distance is the store's, lower
        is nearer. ``search``: the store's options (``where``, ``include``, and its own).

        Raises:
            ContractMismatchError: ``embedder``'s contract is not the index's.
            ForeignVectorsError: the search met records stored without a usable vector.
        """
        check_count(n_results, "n_results")
        self._check_options(search, self._search_options, "query")
        check_include(search.get("include", SHOWN))
        vectors = self.index.query_vectors(
            query_texts, embedder=embedder, read_head=self._head_before_search
        )
        return self.query_vectors(vectors, n_results, **search)

    def query_vectors(
        self, vectors: Any, n_results: int = 10, **search: Unpack[SearchOptions]
    ) -> dict[str, Any]:
        """Search with query vectors already in the stored form (checked by the caller), with
        :meth:`query`'s options."""
        check_count(n_results, "n_results")
        self._check_options(search, self._search_options, "query_vectors")
        shown = check_include(search.get("include", SHOWN))
        rows = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        for _ in range(_ATTEMPTS):
            try:
                found = self._search(
                    rows, n_results, shown, search, self.index.verified_head.stamp_version
                )
                break
            except StampMovedError:
                self.index.current()  # verified again in full, or refused
        else:
            raise StampError(f"the stamp of {self.name!r} keeps changing while it is queried")
        out: dict[str, list[Any]] = {k: [] for k in ("ids", *shown)}
        for at in found:
            # A record without a vector (written around ctxemb, or emptied since the open) has
            # no distance: foreign, refused as an open refuses it.
            if None in at.distances:
                refuse_vectorless(
                    [i for i, d in zip(at.ids, at.distances, strict=True) if d is None],
                    len(at.ids),
                )
            for part, values in columns(at, shown, self.contract.output_dim).items():
                out[part].append(values)
        return out

    @_worded
    def delete(
        self, ids: list[str] | None = None, *, where: Mapping[str, Any] | None = None
    ) -> int:
        """Delete records by id, by metadata filter, or both (a record must match all that are
        given); returns how many were deleted. An empty filter is refused, never read as
        "everything"; a hybrid index deletes through it, both sides together."""
        return len(self.index.delete(ids, where=where))

    def get(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int | None = None,
        include: Sequence[str] = GOT,
    ) -> dict[str, Any]:
        """Records by id and/or metadata filter, oldest write first, after the stamp is
        checked, as Chroma's ``get`` returns them."""
        shown = check_include(include, get=True)
        checked = None if ids is None else check_ids(ids)
        for arg, value in (("limit", limit), ("offset", offset)):
            if value is not None:
                check_count(value, arg, minimum=0)
        self.index.current()
        records = self._select(checked, where, limit, offset or 0, _parts(shown))
        return columns([Hit(r, None) for r in records], shown, self.contract.output_dim)
