"""ctxemb for PostgreSQL + pgvector: tables that remember their whole embedding contract.

Install with ``pip install ctxemb[pgvector]`` (psycopg 3 and pgvector's Python package; the
server needs the ``vector`` extension).

This package is also **the shared pgvector guard**: the Haystack and LangChain adapters and the
CLI use only its public names, every store adapter's (``ctxemb_core.store_tools.ADAPTER_API``,
whose checks are core's :class:`~ctxemb_core.index.GuardedIndex`'s), and PostgreSQL's own:

- :func:`connect`: a psycopg connection with pgvector's types (:func:`local_server` starts a
  throwaway server for trying things out);
- :func:`open_table` (also ``open_collection``): the table, its trigger, HNSW index and stamp
  row made in one transaction, giving a :class:`GuardedTable`; :func:`stored_or_none`: the
  table unguarded, or ``None``; :func:`check_name`, checked before connecting;
- :func:`open_hybrid`: the lexical side in tables of the same database;
- :func:`driver` / :class:`PgvectorDriver`: the same table and stamp row (made through either,
  it opens through the other); :class:`RawTable`: a user's SQL around the guard, for the
  conformance suite; :func:`index_with_ray`; :func:`migrate` also copies from Chroma.

It imports neither framework adapter nor the Chroma guard (``tests/core/test_adapter_surface.py``).

The table has Haystack's ``PgvectorDocumentStore`` columns, so a table written through any
of the three (the CLI, Haystack, LangChain) opens through the others under the same contract.

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
    "RawTable",
    "StoredTable",
    "index_with_ray",
    "layout_for",
    "local_server",
    "open_table",
    "stored_table",
]

# Every name above, and the tools of store_tools.TOOL_NAMES, from ``_api`` on first use.
__getattr__ = lazy_package(__name__, "_api")
