"""PostgreSQL's own in core's :class:`~ctxemb_core.store_tools.StoreTools`: a table's keywords,
``exact``, ``repair``, ``verify`` of a :class:`StoredTable`, the lexical side's tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.hybrid.pair import LexicalPlace, joint_place
from ctxemb_core.store_tools import StoreTools
from ctxemb_pgvector._connect import TERMS
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._hybrid_store import PgLexical
from ctxemb_pgvector._sql import check_name
from ctxemb_pgvector._store import StoredTable, repair
from ctxemb_pgvector._table import GuardedTable

__all__ = ["TOOLS", "stamped_contract"]


def place_for(dense: Any, folder: Path | None = None) -> LexicalPlace:
    """The lexical side of an opened table, owned by its oid (``folder``: an old one to convert)."""
    oid = int(dense.index.verified_head.identity)  # the driver's identity: the table's oid
    owner = f'table "{dense.schema}"."{dense.name}" (oid {oid})'
    return joint_place(PgLexical(dense.conn, dense.schema, dense.name), oid, owner, folder=folder)


TOOLS: StoreTools[GuardedTable] = StoreTools(
    TERMS,
    facade=GuardedTable,
    new_driver=PgvectorDriver,  # its keywords: schema, hnsw, ef_search
    held=(StoredTable, lambda table: PgvectorDriver(table.conn, table.name, schema=table.schema)),
    query_options=("exact",),
    pair_query={"exact": True},  # a pair's search is among one row: a scan, never the index
    repair=lambda driver, stamp: repair(
        TOOLS.stored(driver.conn, driver.name, schema=driver.schema), stamp
    ),
    check_name=check_name,
    lexical=(None, place_for),  # in the database: a lexical_path is an old folder to convert
    client_name="conn",
    catalog="ctxemb_pgvector._aliases:catalog",  # by name: that module opens its hybrid sides here
)


def stamped_contract(conn: Any, name: str, schema: str = "public") -> EmbeddingContract:
    """The contract a table's stamp holds (read, not verified: nothing is embedded)."""
    return TOOLS.stamped_contract(conn, name, schema=schema)
