"""The adapter's index object and tools: :class:`GuardedQdrantCollection` (what
``open_collection`` gives), :class:`StoredCollection` and :data:`TOOLS`, core's
:class:`~ctxemb_core.store_tools.StoreTools` over the Qdrant driver (a module of its own, so
that the alias book and the hybrid side reach them without importing the package)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ctxemb_core.index.driver import Record
from ctxemb_core.index.shaped import SearchOptions, ShapedFacade
from ctxemb_core.store_tools import StoreTools
from ctxemb_qdrant._driver import QdrantDriver
from ctxemb_qdrant._hybrid import beside as _beside
from ctxemb_qdrant._hybrid import place_for as _place_for
from ctxemb_qdrant._store import TERMS, check_name, translated

__all__ = ["TERMS", "TOOLS", "GuardedQdrantCollection", "StoredCollection", "stored_or_none"]


@dataclass(frozen=True)
class StoredCollection:
    """A collection as Qdrant describes it (``info``), unguarded, with where it is."""

    client: QdrantClient
    name: str
    info: qm.CollectionInfo


class Search(SearchOptions, total=False):
    """A search's options besides every store's ``where`` and ``include``: ``ids``, among
    these records only."""

    ids: Sequence[str] | None


class GuardedQdrantCollection(ShapedFacade[QdrantDriver, StoredCollection]):
    """A Qdrant collection bound to one contract; every call is checked before it runs
    (``get_collection`` read back: identity, stamp and vector configuration compared with
    what was verified; a search compares them in the same hold of the client as it searches:
    :meth:`QdrantDriver.search_columns`). ``query``, ``query_vectors`` and ``get`` answer in the
    shapes of every ctxemb index object; ``client`` is Qdrant's own."""

    _driver_type = QdrantDriver
    _terms = TERMS
    _search_options = Search
    #: The driver's ``search_columns`` compares the stamp version under the client's hold.
    _translated = staticmethod(translated)
    _head_before_search = False

    @classmethod
    def _stored_in(cls, driver: QdrantDriver) -> StoredCollection | None:
        info = driver._lookup()
        return None if info is None else StoredCollection(driver.client, driver.name, info)

    def _select(
        self,
        ids: list[str] | None,
        where: Mapping[str, Any] | None,
        limit: int | None,
        offset: int,
        parts: frozenset[str],
    ) -> list[Record]:
        if where is None:
            return super()._select(ids, where, limit, offset, parts)
        self.index.check_filter(where)
        chosen = self.driver._selected(None, ids, where)
        return self.driver.read(chosen[offset:][:limit], parts)


def stored_or_none(client: Any, name: str) -> StoredCollection | None:
    """The collection as Qdrant describes it now, unguarded, or ``None``."""
    return GuardedQdrantCollection._stored_in(QdrantDriver(client, name))


TOOLS = StoreTools(
    TERMS,
    facade=GuardedQdrantCollection,
    new_driver=QdrantDriver,
    held=(StoredCollection, lambda stored: QdrantDriver(stored.client, stored.name)),
    translated=translated,
    check_name=check_name,
    lexical=(_beside, _place_for),  # core's lexical store beside the collection (_hybrid)
    catalog="ctxemb_qdrant._aliases:catalog",  # by name: it opens its hybrid sides here
    resolves_aliases=True,  # Qdrant finds a collection by its native alias's name
)
