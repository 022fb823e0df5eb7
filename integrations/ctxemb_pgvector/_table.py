"""A stamped PostgreSQL table bound to one contract: core's guarded index (every decision) and
its :class:`~ctxemb_core.index.shaped.ShapedFacade`, with PostgreSQL's search options."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from ctxemb_core.guard import check_count
from ctxemb_core.index import GuardedIndex
from ctxemb_core.index.shaped import SearchOptions, ShapedFacade
from ctxemb_pgvector._connect import TERMS, translated
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._sql import Layout, layout_for
from ctxemb_pgvector._store import StoredTable


class Search(SearchOptions, total=False):
    """A search's PostgreSQL options besides ``where`` and ``include``: ``exact`` (scan every
    row), ``ef_search`` (HNSW breadth, at least ``n_results``), ``ids`` (among these only)."""

    exact: bool
    ef_search: int | None
    ids: Sequence[str] | None


class GuardedTable(ShapedFacade[PgvectorDriver, StoredTable]):
    """A pgvector table bound to one contract; every call is checked before it runs, every
    write one transaction. Its own: ``query``'s and ``query_vectors``' options (:class:`Search`).

    Args:
        index: a guarded index over a :class:`~ctxemb_pgvector.PgvectorDriver`.
        ef_search: the HNSW search breadth of queries (default: the driver's).
    """

    _driver_type = PgvectorDriver
    _terms = TERMS
    _search_options = Search
    _translated = staticmethod(translated)
    _head_before_search = False  # the search reads the stamp's version in its own snapshot

    def __init__(self, index: GuardedIndex, *, ef_search: int | None = None) -> None:
        super().__init__(index)
        given = self.driver.ef_search if ef_search is None else ef_search
        self.ef_search = check_count(given, "ef_search")

    # -- what the table is ---------------------------------------------------------------

    @property
    def conn(self) -> psycopg.Connection[Any]:
        return self.driver.conn

    client = conn  # core's name for the index's client (IndexFacade.client)

    @property
    def schema(self) -> str:
        return str(self.driver.schema)

    @property
    def layout(self) -> Layout:
        return layout_for(self.stamp.contract)

    @property
    def table(self) -> sql.Composed:
        return self.driver.table

    def _search_defaults(self) -> dict[str, Any]:
        return {"ef_search": self.ef_search}
