"""Moved to :mod:`ctxemb_core.validate` (public: adapters use it); kept for this release only.

Nothing new imports this module; it goes in the next release.
"""

from __future__ import annotations

from ctxemb_core.validate import (
    check_count,
    check_delete,
    check_flag,
    check_ids,
    check_paging,
    check_positive_int,
    check_records,
    check_sample_size,
    check_text,
    check_texts,
    texts_from_iterable,
)

__all__ = [
    "check_count",
    "check_delete",
    "check_flag",
    "check_ids",
    "check_paging",
    "check_positive_int",
    "check_records",
    "check_sample_size",
    "check_text",
    "check_texts",
    "texts_from_iterable",
]
