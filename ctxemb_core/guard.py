"""The guard: what an adapter asks of an index before it writes or returns, by concern.

Every decision about an index (stamped or not, which fields differ, whether the store's own
embedding setting agrees with the stamp, whether the vectors in the store are this contract's
vectors) is made once, in core, in one module per concern:

- :mod:`ctxemb_core.records`: the form a store keeps a contract's vectors in, its distances as
  the contract's similarity, stored records re-embedded and compared, and which records an open
  samples (the newest half and a random half; :func:`detection_probability`).
- :mod:`ctxemb_core.stamp_guard`: the stamp's life cycle (open, verify, adopt, re-stamp), the
  store's own embedding setting and vector form, the caller's embedder.
- :mod:`ctxemb_core.undo`: writes that are undone whole.
- :mod:`ctxemb_core.validate`: the arguments every adapter takes (flags, counts, ids, records,
  vectors embedded elsewhere).

:class:`~ctxemb_core.index.GuardedIndex` conducts them over any store driver. This module names
every function of the four, where adapters found them before the split.
"""

from __future__ import annotations

from ctxemb_core.records import (
    NO_TEXT,
    OPEN_SAMPLE,
    OTHER_VECTOR,
    OTHER_WIDTH,
    RecordCheck,
    check_stored,
    detection_probability,
    record_tolerance,
    records_progress,
    refuse_foreign,
    refuse_vectorless,
    sample_cosines,
    sample_ranges,
    similarity,
    storable,
    stored_form,
)
from ctxemb_core.stamp_guard import (
    RESTAMPABLE,
    RestampReport,
    VerifyReport,
    adopt_stamp,
    as_embedder,
    check_binding,
    check_configuration,
    check_querier,
    check_querier_canary,
    check_storage,
    open_stamp,
    restamp_stamp,
    verify_index,
)
from ctxemb_core.undo import add_missing, deferred_interrupts, undoable_write
from ctxemb_core.validate import (
    check_count,
    check_delete,
    check_embedded,
    check_flag,
    check_ids,
    check_paging,
    check_query_vector,
    check_records,
    check_sample_size,
)

__all__ = [
    "NO_TEXT",
    "OPEN_SAMPLE",
    "OTHER_VECTOR",
    "OTHER_WIDTH",
    "RESTAMPABLE",
    "RecordCheck",
    "RestampReport",
    "VerifyReport",
    "add_missing",
    "adopt_stamp",
    "as_embedder",
    "check_binding",
    "check_configuration",
    "check_count",
    "check_delete",
    "check_embedded",
    "check_flag",
    "check_ids",
    "check_paging",
    "check_querier",
    "check_querier_canary",
    "check_query_vector",
    "check_records",
    "check_sample_size",
    "check_storage",
    "check_stored",
    "deferred_interrupts",
    "detection_probability",
    "open_stamp",
    "record_tolerance",
    "records_progress",
    "refuse_foreign",
    "refuse_vectorless",
    "restamp_stamp",
    "sample_cosines",
    "sample_ranges",
    "similarity",
    "storable",
    "stored_form",
    "undoable_write",
    "verify_index",
]
