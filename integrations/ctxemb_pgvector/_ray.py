"""Bulk indexing on a Ray cluster into a PostgreSQL table: :mod:`ctxemb_ray`'s job, with the
session every actor reopens the database with."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.redact import redact_dsn
from ctxemb_pgvector._connect import connect
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._sql import check_name
from ctxemb_ray import DriverSession, IndexSummary
from ctxemb_ray import index_with_ray as _index_with_ray


@dataclass(frozen=True)
class DatabaseTable(DriverSession):
    """Table ``schema.name`` in the database ``dsn``, as every actor reaches it; its ``repr``
    masks the DSN's password (the DSN itself travels to the actors)."""

    dsn: str
    name: str
    schema: str = "public"

    def __post_init__(self) -> None:
        check_name(self.name)
        check_name(self.schema, "schema")

    def __repr__(self) -> str:
        return f"DatabaseTable({redact_dsn(self.dsn)!r}, {self.schema}.{self.name})"

    def open(self, embedder: Embedder) -> tuple[Any, PgvectorDriver]:
        conn = connect(self.dsn)  # a table embeds nothing itself: no embedder
        return conn, PgvectorDriver(conn, self.name, schema=self.schema)


def index_with_ray(
    source: str | os.PathLike[str],
    contract: EmbeddingContract,
    *,
    table: str,
    dsn: str,
    schema: str = "public",
    **options: Any,
) -> IndexSummary:
    """Index a corpus into a stamped table (``dsn``: as every actor reaches it) with a pool of
    Ray actors; ``options``, what it returns and what it raises are those of
    :func:`ctxemb_ray.index_with_ray`."""
    return _index_with_ray(source, contract, store=DatabaseTable(dsn, table, schema), **options)
