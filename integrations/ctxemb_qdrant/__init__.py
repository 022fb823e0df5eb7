"""ctxemb for Qdrant: collections that remember their whole embedding contract.

Install with ``pip install ctxemb[qdrant]`` (``qdrant-client``). Besides what every store
adapter offers (``ctxemb_core.store_tools.ADAPTER_API``, whose checks are core's
:class:`~ctxemb_core.index.GuardedIndex`'s): :func:`connect` (local mode in a folder, joined
within a process; memory; a server's URL), :class:`GuardedQdrantCollection` (what
:func:`open_collection` gives), :class:`StoredCollection` (unguarded), :class:`QdrantDriver`
and :func:`point_id`.

Example (local mode in ``./qdrant``; ``connect(url=...)`` for a server):
    >>> from ctxemb_core import contract_for
    >>> from ctxemb_qdrant import connect, open_collection
    >>> docs = open_collection(connect("./qdrant"), "docs", contract_for("all-MiniLM-L6-v2"))
    ... # doctest: +SKIP
    >>> docs.upsert(["tea"], ["Green tea is steamed."])                      # doctest: +SKIP
"""

from __future__ import annotations

from ctxemb_core.errors import MissingDependencyError
from ctxemb_core.lazy import lazy_package
from ctxemb_core.store_tools import ADAPTER_API

MissingDependencyError.require("ctxemb_qdrant", "qdrant", {"qdrant_client": "qdrant-client"})

#: What every store adapter offers (``store_tools.ADAPTER_API``), then this one's own: its
#: driver and index objects, then the point ids.
__all__ = [*ADAPTER_API, "QdrantDriver", "GuardedQdrantCollection", "StoredCollection"]
__all__ += ["POINT_NAMESPACE", "point_id"]
# The in-place upgrade through named vectors (``_named``; docs/qdrant-advanced.md).
__all__ += ["NamedVectorView", "add_named_vector", "backfill_named", "switch_named"]
__all__ += ["serving_vector", "vector_stamps"]

# Every name above, and the tools of store_tools.TOOL_NAMES, from ``_api`` on first use.
__getattr__ = lazy_package(__name__, "_api")
