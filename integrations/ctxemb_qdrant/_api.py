"""What ``ctxemb_qdrant`` exports, imported on first use of any of its names
(:func:`ctxemb_core.lazy.lazy_package`): the package itself imports no qdrant-client, so a
``ctxemb`` command that builds its parser with this store's options, or runs on another
store, never pays for it.
"""

from __future__ import annotations

from ctxemb_qdrant._aliases import catalog as _catalog
from ctxemb_qdrant._detect import detect_or as _detect_or
from ctxemb_qdrant._driver import QdrantDriver as QdrantDriver
from ctxemb_qdrant._named import NamedVectorView as NamedVectorView
from ctxemb_qdrant._named import add_named_vector as add_named_vector
from ctxemb_qdrant._named import backfill_named as backfill_named
from ctxemb_qdrant._named import serving_vector as serving_vector
from ctxemb_qdrant._named import switch_named as switch_named
from ctxemb_qdrant._named import vector_stamps as vector_stamps
from ctxemb_qdrant._store import POINT_NAMESPACE as POINT_NAMESPACE
from ctxemb_qdrant._store import check_name as check_name
from ctxemb_qdrant._store import connect as connect
from ctxemb_qdrant._store import point_id as point_id
from ctxemb_qdrant._tools import TERMS as TERMS
from ctxemb_qdrant._tools import TOOLS as TOOLS
from ctxemb_qdrant._tools import GuardedQdrantCollection as GuardedQdrantCollection
from ctxemb_qdrant._tools import StoredCollection as StoredCollection
from ctxemb_qdrant._tools import stored_or_none as stored_or_none

#: The driver of a collection: ``driver(client, name)``.
driver = QdrantDriver
#: The store's collections and aliases for upgrades (Qdrant's native alias; ``_aliases``).
catalog = _catalog
detect = _detect_or(TOOLS.detect)  # fastembed's collections too (_detect)
# Core's other tools over a collection, under every adapter's names (store_tools.TOOL_NAMES).
__getattr__ = TOOLS.exported("ctxemb_qdrant")
