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

from ctxemb_core.scaleout import IndexSummary
from ctxemb_pgvector import _eval, _hybrid, _migrate, _open, _ray, _report, _search, _store
from ctxemb_pgvector._connect import advised, connect, local_server
from ctxemb_pgvector._driver import PgvectorDriver, RawTable, driver
from ctxemb_pgvector._sql import Layout, check_name, layout_for
from ctxemb_pgvector._store import StoredTable, stored_or_none, stored_table
from ctxemb_pgvector._table import GuardedTable

# The errors of these calls name this adapter's calls and options in their advice (the
# advice is written once, in the Chroma adapter's terms, in ctxemb_core.errors).
advised(GuardedTable)
detect = advised(_report.detect)
eval_path = advised(_eval.eval_path)
index_with_ray = advised(_ray.index_with_ray)
migrate = advised(_migrate.migrate)
open_table = advised(_open.open_table)
open_hybrid = advised(_hybrid.open_hybrid)
lexical_folder = _hybrid.lexical_folder
verify = advised(_report.verify)
restamp = advised(_report.restamp)
search = advised(_search.search)
shortlist = advised(_search.shortlist)
stamped_contract = advised(_store.stamped_contract)

#: The name every store adapter's opener has for the CLI's shared code.
open_collection = open_table
#: ``stored_collection`` as the CLI calls it for every store.
stored_collection = stored_table

__all__ = [
    "GuardedTable",
    "IndexSummary",
    "Layout",
    "PgvectorDriver",
    "RawTable",
    "StoredTable",
    "check_name",
    "connect",
    "detect",
    "driver",
    "eval_path",
    "index_with_ray",
    "layout_for",
    "lexical_folder",
    "local_server",
    "migrate",
    "open_collection",
    "open_hybrid",
    "open_table",
    "restamp",
    "search",
    "shortlist",
    "stamped_contract",
    "stored_collection",
    "stored_or_none",
    "stored_table",
    "verify",
]
