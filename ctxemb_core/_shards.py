"""Moved to :mod:`ctxemb_core.shards` (public: adapters use it); kept for this release only.

Nothing new imports this module; it goes in the next release.
"""

from __future__ import annotations

from ctxemb_core.shards import (
    PARQUET_COLUMNS,
    Shards,
    checked_ids,
    corpus_shards,
    read_rows,
    work_items,
)

__all__ = [
    "PARQUET_COLUMNS",
    "Shards",
    "checked_ids",
    "corpus_shards",
    "read_rows",
    "work_items",
]
