"""ctxemb for Chroma: collections that remember their whole embedding contract.

Install with ``pip install ctxemb[chroma]``.

This package is also **the shared Chroma guard**: the Haystack and LangChain adapters and the
CLI use only its public names, every store adapter's (``ctxemb_core.store_tools.ADAPTER_API``,
whose checks are core's :class:`~ctxemb_core.index.GuardedIndex`'s), and Chroma's own:

- :func:`connect`: a client of a folder (joining one already open in this process, however its
  path is spelled) or of a server;
- :func:`open_collection` (``repair=True`` also writes Chroma's persisted embedding function
  back from the stamp), giving a :class:`GuardedCollection` (``raw``: Chroma's collection);
  :func:`stored_or_none`: the collection unguarded, or ``None``;
- :func:`check_metadatas`: Chroma's checks of a batch's metadata, before anything is written;
- :class:`ChromaDriver` (:func:`driver`) and :class:`ContractEmbeddingFunction` (the contract
  in Chroma's embedding-function registry);
- :func:`open_hybrid` and :func:`lexical_folder`: the lexical side in a folder beside an
  embedded store.

It imports neither framework adapter (``tests/core/test_adapter_surface.py``).

Example:
    >>> import chromadb
    >>> from ctxemb_core import contract_for
    >>> from ctxemb_chroma import open_collection
    >>> client = chromadb.PersistentClient("./index")                          # doctest: +SKIP
    >>> docs = open_collection(client, "docs", contract_for("all-MiniLM-L6-v2"))  # doctest: +SKIP
"""

from __future__ import annotations

from ctxemb_core.errors import MissingDependencyError

MissingDependencyError.require("ctxemb_chroma", "chroma", {"chromadb": "chromadb"})

# The names of ADAPTER_API are re-exported as such (``name as name``): __all__ lists them
# through it.
from ctxemb_chroma._aliases import catalog as catalog
from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._connect import connect as connect
from ctxemb_chroma._driver import ChromaDriver, check_metadatas
from ctxemb_chroma._function import ContractEmbeddingFunction
from ctxemb_chroma._ray import index_with_ray
from ctxemb_chroma._store import check_name as check_name
from ctxemb_chroma._store import stored_or_none as stored_or_none
from ctxemb_chroma._tools import TOOLS
from ctxemb_chroma._tools import restamp as restamp
from ctxemb_core.store_tools import ADAPTER_API
from ctxemb_ray import IndexSummary

#: The driver of a collection: ``driver(client, name, *, embedder=None)``.
driver = ChromaDriver
# Core's tools over a collection (their arguments and errors: StoreTools'): open_collection,
# verify, detect, migrate, search, ... under every adapter's names (store_tools.TOOL_NAMES).
__getattr__ = TOOLS.exported(__name__)

#: What every store adapter offers (``store_tools.ADAPTER_API``), then this one's own.
__all__ = [
    *ADAPTER_API,
    "ChromaDriver",
    "ContractEmbeddingFunction",
    "GuardedCollection",
    "IndexSummary",
    "check_metadatas",
    "index_with_ray",
]
