"""ctxemb for PostgreSQL + pgvector: tables that remember their whole embedding contract.

Install with ``pip install ctxemb[pgvector]`` (psycopg 3 and pgvector's Python package; the
server needs the ``vector`` extension).

This package is also **the shared pgvector guard**: the Haystack and LangChain adapters open,
write and read PostgreSQL tables through it, with exactly these names of it, nothing private:

- :func:`connect`: a psycopg connection with pgvector's types (:func:`local_server` starts a
  throwaway server for trying things out);
- :func:`open_table` (also ``open_collection``, the name the CLI uses for every store):
  create a table stamped in one transaction, or open and verify it (stamp row, canary, column
  type, the rows written or changed since it last passed), adopting or repairing on request;
- :class:`GuardedTable`: the opened table, every call checked (``add``, ``upsert``,
  ``add_missing``, ``sync``, ``add_embedded``, ``query``, ``query_vectors``, ``get``,
  ``delete``, ``count``, ``ids``);
- :func:`stored_or_none`: the table as the database has it, unguarded, or ``None``;
- :func:`check_name`: the names a guarded table may have, checked before connecting.
- :func:`open_hybrid`: a table and its lexical (BM25) side in the same database, a
  hybrid index under one stamped recipe.
- :func:`driver` / :class:`PgvectorDriver`: the same table as a store driver for core's
  :class:`~ctxemb_core.index.GuardedIndex` (same layout and stamp row: a table made through
  either opens through the other); :class:`RawTable`: a user's SQL around the guard, for
  the driver conformance suite.

Its own tools: :func:`verify`, :func:`migrate` (also from a Chroma collection),
:func:`restamp`, :func:`detect`, :func:`search`, :func:`shortlist`, :func:`eval_path`,
:func:`index_with_ray` (Ray actors writing one table). The guard
imports neither framework adapter nor the Chroma guard (``tests/core/test_adapter_surface.py``).

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

try:
    import pgvector  # noqa: F401
    import psycopg  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from ctxemb_core.errors import MissingDependencyError

    raise MissingDependencyError(
        "ctxemb_pgvector needs psycopg and pgvector: pip install 'ctxemb[pgvector]'"
    ) from exc

# The names of ADAPTER_API are re-exported as such (``name as name``, or assigned below):
# __all__ lists them through it.
from ctxemb_core.store_tools import ADAPTER_API
from ctxemb_pgvector import _ray
from ctxemb_pgvector._aliases import catalog as catalog
from ctxemb_pgvector._connect import advised, local_server
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

# The errors of these calls name this adapter's calls and options in their advice (the
# remedies are data; ctxemb_core.remedy words them in the adapter's terms).
advised(GuardedTable)
index_with_ray = advised(_ray.index_with_ray)

# Core's tools over a table (their arguments: StoreTools'; errors worded so too), in API order,
# with the names every store adapter's opener and stored index have for the CLI's shared code.
detect = TOOLS.detect
eval_path = TOOLS.eval_path
lexical_folder = TOOLS.lexical_folder
migrate = TOOLS.migrate
open_table = TOOLS.open
open_collection = open_table
open_hybrid = TOOLS.open_hybrid
restamp = TOOLS.restamp
search = TOOLS.search
shortlist = TOOLS.shortlist
stored_collection = stored_table
verify = TOOLS.verify

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
