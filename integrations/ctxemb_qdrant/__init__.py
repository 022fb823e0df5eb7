"""ctxemb for Qdrant: collections that remember their whole embedding contract.

Install with ``pip install ctxemb[qdrant]`` (``qdrant-client``). Besides what every store
adapter offers (``ctxemb_core.store_tools.ADAPTER_API``, whose checks are core's
:class:`~ctxemb_core.index.GuardedIndex`'s): :func:`connect` (local mode in a folder, joined
within a process; memory; a server's URL), :class:`GuardedQdrantCollection` (what
:func:`open_collection` gives), :class:`StoredCollection` (unguarded), :class:`QdrantDriver`,
:class:`RawQdrant` (a user's own client around the guard, for tests) and :func:`point_id`.

Example:
    >>> import ctxemb_qdrant
    >>> from ctxemb_core import contract_for
    >>> client = ctxemb_qdrant.connect("./qdrant")                        # doctest: +SKIP
    >>> contract = contract_for("all-MiniLM-L6-v2")
    >>> docs = ctxemb_qdrant.open_collection(client, "docs", contract)    # doctest: +SKIP
"""

from __future__ import annotations

try:
    import qdrant_client  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from ctxemb_core.errors import MissingDependencyError

    raise MissingDependencyError(
        "ctxemb_qdrant needs qdrant-client: pip install 'ctxemb[qdrant]'"
    ) from exc

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.driver import Record
from ctxemb_core.index.shaped import SearchOptions, ShapedFacade
from ctxemb_core.remedy import StoreTerms
from ctxemb_core.store_tools import ADAPTER_API, StoreTools
from ctxemb_qdrant._aliases import catalog as _catalog
from ctxemb_qdrant._detect import detect_or as _detect_or
from ctxemb_qdrant._detect import open_or as _open_or
from ctxemb_qdrant._driver import QdrantDriver
from ctxemb_qdrant._hybrid import beside as _beside
from ctxemb_qdrant._hybrid import place_for as _place_for
from ctxemb_qdrant._raw import RawQdrant
from ctxemb_qdrant._store import POINT_NAMESPACE, point_id, translated
from ctxemb_qdrant._store import check_name as check_name
from ctxemb_qdrant._store import connect as connect

#: The adapter's words, in which its errors' advice names its calls and options.
TERMS = StoreTerms(
    module="ctxemb_qdrant",
    open="open_collection",
    kind="collection",
    records="points",
    cli_where="--store qdrant and the same --qdrant-path or --qdrant-url",
)


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
    what was verified). ``query``, ``query_vectors`` and ``get`` answer in the shapes of every
    ctxemb index object; ``client`` is Qdrant's own."""

    _driver_type = QdrantDriver
    _terms = TERMS
    _search_options = Search

    @staticmethod
    def _translated(what: str) -> AbstractContextManager[None]:
        return translated(what)

    @property
    def client(self) -> QdrantClient:
        return self.driver.client

    @classmethod
    def _stored_in(cls, driver: QdrantDriver) -> StoredCollection | None:
        info = driver._lookup()
        return None if info is None else StoredCollection(driver.client, driver.name, info)

    @classmethod
    def _missing(cls, driver: QdrantDriver, why: str) -> Exception:
        return driver._missing()

    def delete(
        self, ids: list[str] | None = None, *, where: Mapping[str, Any] | None = None
    ) -> int:
        """Delete points by id, by metadata filter, or both; returns how many were deleted (a
        hybrid index deletes through it, both sides together)."""
        return len(self.index.delete(ids, where=where))

    def _search(
        self,
        vectors: Any,
        k: int,
        shown: tuple[str, ...],
        search: Mapping[str, Any],
        stamp_version: Any,
    ) -> list[list[Any]]:
        where = search.get("where")
        self.index.check_filter(where)
        self.index.current()
        ids = search.get("ids")
        read = "embeddings" in shown
        return [self.driver.search(v, k, where=where, ids=ids, vectors=read) for v in vectors]

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


def _held(collection: Any) -> QdrantDriver:
    if isinstance(collection, GuardedQdrantCollection):
        return collection.driver
    if isinstance(collection, StoredCollection):
        return QdrantDriver(collection.client, collection.name)
    raise InvalidInputError(
        "collection must be a GuardedQdrantCollection or a StoredCollection, got "
        f"{type(collection).__name__}"
    )


def stored_or_none(client: Any, name: str) -> StoredCollection | None:
    """The collection as Qdrant describes it now, unguarded, or ``None``."""
    return GuardedQdrantCollection._stored_in(QdrantDriver(client, name))


TOOLS = StoreTools(
    TERMS,
    facade=GuardedQdrantCollection,
    new_driver=QdrantDriver,
    driver_of=_held,
    translated=translated,
    check_name=check_name,
    lexical=(_beside, _place_for),  # core's lexical store beside the collection (_hybrid)
    catalog="ctxemb_qdrant._aliases:catalog",  # by name: it opens its hybrid sides here
)

#: The driver of a collection: ``driver(client, name)``.
driver = QdrantDriver
#: The store's collections and aliases for upgrades (Qdrant's native alias; ``_aliases``).
catalog = _catalog
detect = _detect_or(TOOLS.detect)  # fastembed's collections too (_detect)
eval_path = TOOLS.eval_path
lexical_folder = TOOLS.lexical_folder
migrate = TOOLS.migrate
open_collection = _open_or(TOOLS.open)  # a fastembed collection: its vector, read-only
open_hybrid = TOOLS.open_hybrid
restamp = TOOLS.restamp
search = TOOLS.search
shortlist = TOOLS.shortlist
stamped_contract = TOOLS.stamped_contract
stored_collection = TOOLS.stored
verify = TOOLS.verify

#: What every store adapter offers (``store_tools.ADAPTER_API``), then this one's own.
__all__ = [
    *ADAPTER_API,
    "POINT_NAMESPACE",
    "GuardedQdrantCollection",
    "QdrantDriver",
    "RawQdrant",
    "StoredCollection",
    "point_id",
]
