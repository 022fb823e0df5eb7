"""An evaluation path through a guarded table (``ctxemb eval --via pgvector``)."""

from __future__ import annotations

from typing import Any

from ctxemb_core import Embedder
from ctxemb_core.eval.guarded import GuardedPath
from ctxemb_pgvector._open import open_table
from ctxemb_pgvector._table import GuardedTable

__all__ = ["PgvectorPath", "eval_path"]


def eval_path(
    conn: Any,
    name: str,
    embedder: Embedder,
    *,
    sample: int | None = None,
    via: str = "pgvector",
    progress: bool = False,
    exact: bool = False,
    ef_search: int = 200,
    schema: str = "public",
) -> PgvectorPath:
    """A :class:`~ctxemb_core.eval.paths.SearchPath` over the guarded table ``name``.

    The table is opened as any user opens it (:func:`open_table`), documents are written only
    when missing or changed, and queries go through :meth:`GuardedTable.query`: through the
    HNSW index (``ef_search``), or by a scan of every row with ``exact``; ``schema`` is the
    table's.
    """
    options: dict[str, Any] = {"ef_search": ef_search, "schema": schema}
    if sample is not None:
        options["sample"] = sample
    table = open_table(conn, name, embedder, **options)
    return PgvectorPath(table, via, progress, exact)


class PgvectorPath(GuardedPath):
    """Index, search and pair scoring through one guarded table (see :func:`eval_path`); the
    loop is core's, the table's own are its layout's space and HNSW or exact search."""

    noun = "table"

    def __init__(
        self, table: GuardedTable, via: str, progress: bool = False, exact: bool = False
    ) -> None:
        super().__init__(table, via, progress)
        self.table = table
        self.exact = exact

    def __repr__(self) -> str:
        return f"PgvectorPath(via={self.via!r}, table={self.table.name!r}, exact={self.exact})"

    def space(self) -> str:
        return self.table.layout.space_for_similarity

    def query_options(self, pairs: bool) -> dict[str, Any]:
        # A pair's search is among one row: a scan of it, never the HNSW index.
        return {"exact": True if pairs else self.exact}
