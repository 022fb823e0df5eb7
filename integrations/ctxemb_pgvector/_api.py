"""What ``ctxemb_pgvector`` exports, imported on first use (:func:`ctxemb_core.lazy.lazy_package`:
a command on another store never imports psycopg)."""

from __future__ import annotations

# Re-exported as such (``name as name``): the package's __all__ lists them.
from ctxemb_core.store_tools import worded_in
from ctxemb_pgvector._aliases import catalog as catalog
from ctxemb_pgvector._connect import TERMS
from ctxemb_pgvector._connect import connect as connect
from ctxemb_pgvector._connect import local_server as local_server
from ctxemb_pgvector._driver import PgvectorDriver as PgvectorDriver
from ctxemb_pgvector._driver import driver as driver
from ctxemb_pgvector._sql import Layout as Layout
from ctxemb_pgvector._sql import check_name as check_name
from ctxemb_pgvector._sql import layout_for as layout_for
from ctxemb_pgvector._store import StoredTable as StoredTable
from ctxemb_pgvector._store import stored_or_none as stored_or_none
from ctxemb_pgvector._table import GuardedTable as GuardedTable
from ctxemb_pgvector._tools import TOOLS
from ctxemb_pgvector._tools import stamped_contract as stamped_contract
from ctxemb_ray import IndexSummary as IndexSummary
from ctxemb_ray import index_with_ray_for

# The Ray job (keywords: connect's dsn, driver's schema), its errors worded in this adapter's
# terms (as GuardedTable's and the tools' are).
_where = "table in a PostgreSQL database"
_ray = index_with_ray_for("ctxemb_pgvector", "table", _where, {"dsn": str}, {"schema": "public"})
index_with_ray = worded_in(TERMS, _ray)

# Core's tools (store_tools.TOOL_NAMES); the opener and stored table under PostgreSQL's names.
open_table = open_collection = TOOLS.open
stored_table = stored_collection = TOOLS.stored
__getattr__ = TOOLS.exported("ctxemb_pgvector")
