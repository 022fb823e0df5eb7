"""Finding which contract wrote a table's vectors (``ctxemb detect --store pgvector``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ctxemb_core import EmbeddingContract, IndexStamp
from ctxemb_core.detect import DetectReport, detect_contract
from ctxemb_core.errors import StampError
from ctxemb_core.guard import check_count
from ctxemb_core.stamp import CANARY_TOLERANCE
from ctxemb_pgvector._connect import check_connection
from ctxemb_pgvector._store import stored_table
from ctxemb_pgvector._verify import sample_rows

__all__ = ["detect"]


def detect(
    conn: Any,
    name: str,
    *models: Any,
    sample: int = 32,
    keep: Collection[str] = (),
    tolerance: float = CANARY_TOLERANCE,
    backend: str = "auto",
    schema: str = "public",
) -> DetectReport:
    """Find which contract wrote a table's vectors; reads a sample, never writes.

    As :func:`ctxemb_chroma.detect`: the newest half (by last write) and a random half of
    ``sample`` rows are re-embedded under each model's candidate contracts. A conclusive report
    can be adopted with ``open_table(conn, name, report.best.contract, adopt=True)``.
    """
    check_connection(conn)
    size = check_count(sample, "sample", 1)
    stored = stored_table(conn, name, schema)
    records = stored.count()
    ids, documents, vectors = sample_rows(stored, size)
    return detect_contract(
        documents,
        vectors,
        models,
        ids=ids,
        stamped=_stamped(stored.metadata),
        keep=keep,
        records=records,
        tolerance=tolerance,
        backend=backend,
    )


def _stamped(metadata: Any) -> EmbeddingContract | None:
    try:
        return IndexStamp.from_metadata(metadata).contract
    except StampError:
        return None
