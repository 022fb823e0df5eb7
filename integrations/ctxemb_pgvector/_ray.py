"""Bulk indexing on a Ray cluster into a stamped PostgreSQL table: core's job
(:mod:`ctxemb_core.scaleout`) with a connection every actor opens to the database.

Example:
    >>> from ctxemb_core import contract_for                            # doctest: +SKIP
    >>> from ctxemb_pgvector import index_with_ray                      # doctest: +SKIP
    >>> summary = index_with_ray("scifact/corpus.jsonl", contract_for(MODEL), table="scifact",
    ...                          dsn="postgresql://app@db.internal/rag", actors=8)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.redact import redact_dsn
from ctxemb_core.scaleout import IndexSummary
from ctxemb_core.scaleout import index_with_ray as _index_with_ray
from ctxemb_pgvector._connect import connect
from ctxemb_pgvector._driver import PgvectorDriver
from ctxemb_pgvector._sql import check_name

__all__ = ["index_with_ray"]


@dataclass(frozen=True)
class DatabaseTable:
    """A table in a PostgreSQL database, as each Ray node reaches it (a ``StoreSession``).
    Its ``repr`` masks the DSN's password; the DSN itself travels to the actors."""

    dsn: str = field(repr=False)
    name: str
    schema: str = "public"

    def __repr__(self) -> str:
        return f"DatabaseTable({redact_dsn(self.dsn)!r}, {self.schema}.{self.name})"

    @contextmanager
    def __call__(self, embedder: Embedder) -> Iterator[PgvectorDriver]:
        del embedder  # a table embeds nothing itself
        conn = connect(self.dsn)
        try:
            yield PgvectorDriver(conn, self.name, schema=self.schema)
        finally:
            conn.close()


def index_with_ray(
    source: str | os.PathLike[str],
    contract: EmbeddingContract,
    *,
    table: str,
    dsn: str,
    schema: str = "public",
    **options: Any,
) -> IndexSummary:
    """Index a corpus into a stamped table with a pool of Ray actors.

    ``dsn`` is the database as every actor reaches it (:func:`ctxemb_pgvector.connect`);
    ``table`` and ``schema`` name the table. ``options`` are those of
    :func:`ctxemb_core.scaleout.index_with_ray` (``address``, ``actors``, ``batch_size``,
    ``model_path``, ``cache``, ``num_cpus``, ``progress``, ``delete_missing``, ``dry_run``,
    ``url``, ``api``, ``api_key_env``), which says what it returns and raises.
    """
    check_name(table)
    check_name(schema, "schema")
    return _index_with_ray(source, contract, store=DatabaseTable(dsn, table, schema), **options)
