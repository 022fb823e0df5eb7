"""ctxemb for Qdrant: collections that remember their whole embedding contract.

Install with ``pip install ctxemb[qdrant]`` (``qdrant-client``: local mode in a folder or in
memory, and a server's client).

The adapter offers what every store adapter does (``ctxemb_core.store_tools.ADAPTER_API``,
whose checks are core's :class:`~ctxemb_core.index.GuardedIndex`'s) and Qdrant's own:

- :func:`connect`: a client of a folder (local mode; one per folder in a process, joined),
  of memory, or of a server's URL (its API key never shown);
- :func:`open_collection`, giving a :class:`GuardedQdrantCollection` (``client``: Qdrant's);
  :func:`stored_or_none`: the collection unguarded, or ``None``;
- :class:`QdrantDriver` (:func:`driver`), :class:`RawQdrant` (a user's own client around the
  guard, for the conformance suite), :func:`point_id` (how a ctxemb id becomes a point id).

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

from typing import Any

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.store_tools import ADAPTER_API, StoreTools
from ctxemb_qdrant._collection import TERMS, GuardedQdrantCollection, StoredCollection
from ctxemb_qdrant._driver import QdrantDriver
from ctxemb_qdrant._raw import RawQdrant
from ctxemb_qdrant._store import POINT_NAMESPACE, point_id, translated
from ctxemb_qdrant._store import check_name as check_name
from ctxemb_qdrant._store import connect as connect


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
)

#: The driver of a collection: ``driver(client, name)``.
driver = QdrantDriver
#: Qdrant's native aliases are not wired yet: the CLI's alias commands say this store keeps none.
catalog = None
detect = TOOLS.detect
eval_path = TOOLS.eval_path
lexical_folder = TOOLS.lexical_folder
migrate = TOOLS.migrate
open_collection = TOOLS.open
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
