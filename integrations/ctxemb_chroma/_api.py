"""What ``ctxemb_chroma`` exports, imported on first use (:func:`ctxemb_core.lazy.lazy_package`:
a command on another store never imports chromadb)."""

from __future__ import annotations

# Re-exported as such (``name as name``): the package's __all__ lists them.
from ctxemb_chroma._aliases import catalog as catalog
from ctxemb_chroma._collection import GuardedCollection as GuardedCollection
from ctxemb_chroma._connect import connect as connect
from ctxemb_chroma._driver import ChromaDriver as ChromaDriver
from ctxemb_chroma._driver import check_metadatas as check_metadatas
from ctxemb_chroma._function import ContractEmbeddingFunction as ContractEmbeddingFunction
from ctxemb_chroma._store import check_name as check_name
from ctxemb_chroma._store import stored_or_none as stored_or_none
from ctxemb_chroma._tools import TOOLS
from ctxemb_ray import IndexSummary as IndexSummary
from ctxemb_ray import index_with_ray_for

#: The driver of a collection: ``driver(client, name, *, embedder=None)``.
driver = ChromaDriver
# The Ray job, every actor reopening the server with connect(host=, port=).
index_with_ray = index_with_ray_for(
    "ctxemb_chroma", "collection", "collection on a Chroma server", {"host": str, "port": int}
)
# Core's tools over a collection, under every adapter's names (store_tools.TOOL_NAMES).
__getattr__ = TOOLS.exported("ctxemb_chroma")
