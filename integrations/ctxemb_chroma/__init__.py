"""ctxemb for Chroma: collections that remember their whole embedding contract.

Install with ``pip install ctxemb[chroma]``.

Example:
    >>> import chromadb
    >>> from ctxemb_core import contract_for
    >>> from ctxemb_chroma import open_collection
    >>> client = chromadb.PersistentClient("./index")                          # doctest: +SKIP
    >>> docs = open_collection(client, "docs", contract_for("all-MiniLM-L6-v2"))  # doctest: +SKIP
"""

from __future__ import annotations

try:
    import chromadb  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from ctxemb_core.errors import MissingDependencyError

    raise MissingDependencyError(
        "ctxemb_chroma needs chromadb: pip install 'ctxemb[chroma]'"
    ) from exc

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._connect import connect
from ctxemb_chroma._detect import detect
from ctxemb_chroma._eval import eval_path
from ctxemb_chroma._function import ContractEmbeddingFunction
from ctxemb_chroma._migrate import migrate
from ctxemb_chroma._open import open_collection
from ctxemb_chroma._ray import IndexSummary, index_with_ray
from ctxemb_chroma._restamp import restamp
from ctxemb_chroma._search import search, shortlist
from ctxemb_chroma._store import (
    check_name,
    stamped_contract,
    stored_collection,
    stored_or_none,
)
from ctxemb_chroma._verify import verify
from ctxemb_chroma._write import check_metadatas

__all__ = [
    "ContractEmbeddingFunction",
    "GuardedCollection",
    "IndexSummary",
    "check_metadatas",
    "check_name",
    "connect",
    "detect",
    "eval_path",
    "index_with_ray",
    "migrate",
    "open_collection",
    "restamp",
    "search",
    "shortlist",
    "stamped_contract",
    "stored_collection",
    "stored_or_none",
    "verify",
]
