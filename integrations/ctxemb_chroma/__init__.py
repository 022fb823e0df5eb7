"""ctxemb for Chroma: collections that remember their whole embedding contract.

Install with ``pip install ctxemb[chroma]``.

This package is also **the shared Chroma guard**: the Haystack and LangChain adapters and the
CLI use only its public names, every store adapter's (``ctxemb_core.store_tools.ADAPTER_API``)
and Chroma's own: :func:`connect` (a folder, joined however its path is spelled, or a server);
:func:`open_collection`, giving a :class:`GuardedCollection`; :func:`stored_or_none`;
:func:`check_metadatas`; :class:`ChromaDriver` (:func:`driver`); :class:`ContractEmbeddingFunction`
(the contract in Chroma's embedding-function registry); :func:`open_hybrid` and
:func:`lexical_folder` (the lexical side beside an embedded store). It imports neither framework
adapter.

Example:
    >>> import chromadb
    >>> from ctxemb_core import contract_for
    >>> from ctxemb_chroma import open_collection
    >>> client = chromadb.PersistentClient("./index")                          # doctest: +SKIP
    >>> docs = open_collection(client, "docs", contract_for("all-MiniLM-L6-v2"))  # doctest: +SKIP
"""

from __future__ import annotations

from ctxemb_core.errors import MissingDependencyError
from ctxemb_core.lazy import lazy_package
from ctxemb_core.store_tools import ADAPTER_API

MissingDependencyError.require("ctxemb_chroma", "chroma", {"chromadb": "chromadb"})

#: What every store adapter offers (``store_tools.ADAPTER_API``), then this one's own: its
#: driver and index objects, then Chroma's embedding function and the Ray job.
__all__ = [*ADAPTER_API, "ChromaDriver", "GuardedCollection", "check_metadatas"]
__all__ += ["ContractEmbeddingFunction", "IndexSummary", "index_with_ray"]

# Every name above, and the tools of store_tools.TOOL_NAMES, from ``_api`` on first use.
__getattr__ = lazy_package(__name__, "_api")
