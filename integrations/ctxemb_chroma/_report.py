"""Checking a Chroma collection against a contract on demand: every finding reported, none raised.

Apart from the checks on open (:mod:`._verify`), which :class:`GuardedCollection` makes: this
check takes a guarded collection as well as a raw one, so it sits above both.
"""

from __future__ import annotations

from typing import Any

from chromadb.api.models.Collection import Collection

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._store import configured_function, read_settled, translated
from ctxemb_chroma._verify import sample_records
from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import (
    RecordCheck,
    VerifyReport,
    as_embedder,
    check_flag,
    check_sample_size,
    check_stored,
    records_progress,
    verify_index,
)

PAGE = 256  # records per read when every record is checked


def check_every_record(raw: Collection, embedder: Embedder, progress: bool | None) -> RecordCheck:
    """Re-embed every stored record, one page at a time, with a progress bar."""
    total = read_settled(raw.count)
    result = RecordCheck()
    with records_progress(total, progress, embedder) as bar:
        for offset in range(0, total, PAGE):
            got = read_settled(
                raw.get, offset=offset, limit=PAGE, include=["documents", "embeddings"]
            )
            if not got["ids"]:
                break
            texts: Any = got["documents"]
            docs = list(texts) if texts else [None] * len(got["ids"])
            result = result.merge(check_stored(embedder, got["ids"], docs, got["embeddings"]))
            bar.update(len(got["ids"]))
    return result


def verify(
    collection: Any,
    contract: EmbeddingContract | Embedder,
    sample: int = 32,
    *,
    all: bool = False,
    progress: bool | None = None,
) -> VerifyReport:
    """Check a collection against a contract and report every finding (never raises for them).

    Args:
        collection: a :class:`GuardedCollection` or a raw Chroma collection.
        contract: the caller's contract (or embedder).
        sample: how many stored records to re-embed (the newest half and a random half).
        all: re-embed every stored record instead, page by page, with a progress bar.
        progress: show the progress bar (``None``: as the embedder's ``show_progress`` says).

    The report's ``checked()`` / ``not_checked()`` (and ``to_dict()``) say what was proven and
    what was not, with the probability that a sample finds one altered older record.
    """
    raw = collection.stored() if isinstance(collection, GuardedCollection) else collection
    if not isinstance(raw, Collection):
        raise InvalidInputError(f"collection must be a Chroma collection, got {type(raw).__name__}")
    embedder = as_embedder(contract)
    size = check_sample_size(sample)
    check_flag(all, "all")
    if progress is not None:
        check_flag(progress, "progress")
    with translated(f"verifying {raw.name!r}"):
        records = raw.count()
        if all:
            found: Any = check_every_record(raw, embedder, progress)
        else:
            found = sample_records(raw, size) if size else None
        return verify_index(
            raw.metadata,
            embedder,
            found,
            records=records,
            mode="all" if all else ("sample" if size else "none"),
            configuration=configured_function(raw),
        )
