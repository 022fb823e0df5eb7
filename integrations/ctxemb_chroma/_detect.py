"""Which contract wrote a Chroma collection of unknown provenance (``ctxemb detect``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._store import check_client, check_name, stored_collection, translated
from ctxemb_chroma._verify import sample_records
from ctxemb_core import EmbeddingContract, IndexStamp
from ctxemb_core.detect import DetectReport, detect_contract
from ctxemb_core.errors import StampError
from ctxemb_core.guard import check_count
from ctxemb_core.stamp import CANARY_TOLERANCE

__all__ = ["detect"]


def detect(
    client: ClientAPI,
    name: str,
    *models: Any,
    sample: int = 32,
    keep: Collection[str] = (),
    tolerance: float = CANARY_TOLERANCE,
    backend: str = "auto",
) -> DetectReport:
    """Find which contract wrote a collection's vectors; reads a sample, never writes.

    The newest half and a random half of ``sample`` records are re-embedded under the
    candidates of each model (see :func:`ctxemb_core.detect.detect_contract`). A stamped
    collection's own contract is tried too, and ``report.stamp_match`` says whether it is the
    best match. A conclusive report can be adopted with
    ``open_collection(client, name, report.best.contract, adopt=True)``.

    Args:
        client: a ``chromadb`` client.
        name: the collection, stamped or not (a raw ``chromadb`` one).
        *models: candidate models (contracts, embedders, folders or names); default: the
            stamp's contract, else the bundled all-MiniLM-L6-v2 (Chroma's own default model).
        sample: how many stored records to re-embed (at least 1).
        keep: contract fields held as each model's contract has them instead of varied.
        tolerance: the agreement each record must reach.
        backend: the embedder backend.

    Example:
        >>> report = detect(client, "legacy-docs")       # doctest: +SKIP
        >>> report.conclusive, report.best.label         # doctest: +SKIP
        (True, 'mean, normalised, no document prefix')
    """
    check_client(client)
    check_name(name)
    size = check_count(sample, "sample", 1)
    raw = stored_collection(client, name)
    with translated(f"sampling {name!r}"):
        records = raw.count()
        ids, documents, vectors = sample_records(raw, size)
    return detect_contract(
        documents,
        vectors,
        models,
        ids=ids,
        stamped=_stamped(raw.metadata),
        keep=keep,
        records=records,
        tolerance=tolerance,
        backend=backend,
    )


def _stamped(metadata: Any) -> EmbeddingContract | None:
    # A stamp one doubts may be damaged too: detection then treats the index as unstamped.
    try:
        return IndexStamp.from_metadata(metadata).contract
    except StampError:
        return None
