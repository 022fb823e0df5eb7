"""ctxemb for PostgreSQL + pgvector: tables that remember their whole embedding contract.

Install with ``pip install ctxemb[pgvector]`` (psycopg 3 and pgvector's Python package; the
server needs the ``vector`` extension).

This package is also **the shared pgvector guard**: the Haystack and LangChain adapters and the
CLI use only its public names, every store adapter's (``ctxemb_core.store_tools.ADAPTER_API``)
and PostgreSQL's own: :func:`connect` (:func:`local_server`: a throwaway server);
:func:`open_table` (also ``open_collection``), giving a :class:`GuardedTable`;
:func:`stored_or_none`; :func:`check_name`; :func:`open_hybrid` (the lexical side in the same
database); :func:`driver` / :class:`PgvectorDriver`; :func:`index_with_ray`. It imports
neither framework adapter nor the Chroma guard. The table has Haystack's
``PgvectorDocumentStore`` columns (``docs/pgvector.md``).

Example:
    >>> import ctxemb_pgvector
    >>> from ctxemb_core import contract_for
    >>> conn = ctxemb_pgvector.connect("postgresql://localhost/rag")           # doctest: +SKIP
    >>> contract = contract_for("all-MiniLM-L6-v2")
    >>> docs = ctxemb_pgvector.open_table(conn, "docs", contract)          # doctest: +SKIP
"""

from __future__ import annotations

from ctxemb_core.errors import MissingDependencyError
from ctxemb_core.lazy import lazy_package
from ctxemb_core.store_tools import ADAPTER_API

MissingDependencyError.require(
    "ctxemb_pgvector", "pgvector", {"psycopg": "psycopg", "pgvector": "pgvector"}
)

#: What every store adapter offers (``store_tools.ADAPTER_API``), then this one's own.
__all__ = [
    *ADAPTER_API,
    "GuardedTable",
    "IndexSummary",
    "Layout",
    "PgvectorDriver",
    "StoredTable",
    "index_with_ray",
    "layout_for",
    "local_server",
    "open_table",
    "stored_table",
]

# Every name above, and the tools of store_tools.TOOL_NAMES, from ``_api`` on first use.
__getattr__ = lazy_package(__name__, "_api")
