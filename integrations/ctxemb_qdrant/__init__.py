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

from ctxemb_core.errors import MissingDependencyError

MissingDependencyError.require("ctxemb_qdrant", "qdrant", {"qdrant_client": "qdrant-client"})

from ctxemb_core.store_tools import ADAPTER_API
from ctxemb_qdrant._aliases import catalog as _catalog
from ctxemb_qdrant._detect import detect_or as _detect_or
from ctxemb_qdrant._detect import open_or as _open_or
from ctxemb_qdrant._driver import QdrantDriver
from ctxemb_qdrant._raw import RawQdrant
from ctxemb_qdrant._store import POINT_NAMESPACE, point_id
from ctxemb_qdrant._store import check_name as check_name
from ctxemb_qdrant._store import connect as connect
from ctxemb_qdrant._tools import TERMS as TERMS
from ctxemb_qdrant._tools import TOOLS as TOOLS
from ctxemb_qdrant._tools import GuardedQdrantCollection, StoredCollection
from ctxemb_qdrant._tools import stored_or_none as stored_or_none

#: The driver of a collection: ``driver(client, name)``.
driver = QdrantDriver
#: The store's collections and aliases for upgrades (Qdrant's native alias; ``_aliases``).
catalog = _catalog
detect = _detect_or(TOOLS.detect)  # fastembed's collections too (_detect)
open_collection = _open_or(TOOLS.open)  # a fastembed collection: its vector, read-only
# Core's other tools over a collection, under every adapter's names (store_tools.TOOL_NAMES).
__getattr__ = TOOLS.exported(__name__)

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
