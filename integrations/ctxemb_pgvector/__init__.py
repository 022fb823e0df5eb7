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

MissingDependencyError.require(
    "ctxemb_pgvector", "pgvector", {"psycopg": "psycopg", "pgvector": "pgvector"}
)

# The names of ADAPTER_API are re-exported as such (``name as name``, or assigned below):
# __all__ lists them through it.
from ctxemb_core.store_tools import ADAPTER_API, worded_in
from ctxemb_pgvector import _ray
from ctxemb_pgvector._aliases import catalog as catalog
from ctxemb_pgvector._connect import TERMS, local_server
from ctxemb_pgvector._connect import connect as connect
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._driver import driver as driver
from ctxemb_pgvector._raw import RawTable
from ctxemb_pgvector._sql import Layout, layout_for
from ctxemb_pgvector._sql import check_name as check_name
from ctxemb_pgvector._store import StoredTable, stored_table
from ctxemb_pgvector._store import stored_or_none as stored_or_none
from ctxemb_pgvector._table import GuardedTable
from ctxemb_pgvector._tools import TOOLS
from ctxemb_pgvector._tools import stamped_contract as stamped_contract
from ctxemb_ray import IndexSummary

# The errors of the Ray job name this adapter's calls and options in their advice (the
# remedies are data; ctxemb_core.remedy words them in the adapter's terms; GuardedTable's
# calls and the tools word theirs so already).
index_with_ray = worded_in(TERMS, _ray.index_with_ray)

# Core's tools over a table (their arguments: StoreTools'; errors worded so too): verify,
# detect, migrate, search, ... under every adapter's names (store_tools.TOOL_NAMES); the opener
# and the stored table under PostgreSQL's names too, for the CLI's shared code.
open_table = open_collection = TOOLS.open
stored_collection = stored_table
__getattr__ = TOOLS.exported(__name__)

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
