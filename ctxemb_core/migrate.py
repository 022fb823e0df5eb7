"""The resumable copy loop of a migration, for any store: pages in, missing records out.

A migration re-embeds every record of a source index into a new index under another contract.
The store-specific parts are two callables an adapter supplies: how to read the source one page
at a time, and how to write a batch into the target (through its guard). Everything else — which
records are still missing, refusing records that cannot be re-embedded, progress — is here, so
every adapter migrates alike and a migration stopped half-way continues where it stopped.

A copy under the same contract carries the stored vectors, and reads each page back from the
target to compare: PostgreSQL keeps a ``vector`` column's values as given (a float32 copy is
bit for bit), while Chroma changes them on write within float32 rounding (a cosine collection
stores each vector divided by its length: up to 1.5e-8 per component of a unit vector).
:data:`COPY_TOLERANCE` is the difference allowed, relative to the vector's length; a target
that changes a vector more was not given the source's vectors, and the copy stops there.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core.errors import InvalidInputError, StorageMismatchError

__all__ = ["COPY_TOLERANCE", "Page", "check_copied", "copy_missing", "source_pages"]

#: How far a copied vector may be from its source, per component, relative to the source
#: vector's length (float32 rounding is ~6e-8 of it; Chroma's re-normalisation stays below).
COPY_TOLERANCE = 1e-6


class Page(NamedTuple):
    """One page of source records: ids, texts (``None`` where none was stored), metadata, and
    the stored vectors when they are copied as they are (the same contract in another store)."""

    ids: Sequence[str]
    documents: Sequence[str | None]
    metadatas: Sequence[Mapping[str, Any] | None] | None = None
    vectors: Sequence[Any] | None = None


def source_pages(source: Any, size: int, *, vectors: bool = False) -> Iterator[Page]:
    """A guarded index's records one page at a time, in its stable order.

    ``source`` is any adapter's guarded index (a Chroma ``GuardedCollection``, a pgvector
    ``GuardedTable``): each ``get(offset=, limit=, include=)`` call is checked against its
    stamp. ``vectors``: the stored vectors too, for a copy into another store under the same
    contract.
    """
    include = ["documents", "metadatas", *(["embeddings"] if vectors else [])]
    offset = 0
    while True:
        got = source.get(offset=offset, limit=size, include=include)
        if not len(got["ids"]):
            return
        offset += len(got["ids"])
        texts: Any = got["documents"]
        stored = got.get("embeddings") if vectors else None
        yield Page(
            list(got["ids"]),
            texts or [None] * len(got["ids"]),
            got["metadatas"],
            list(stored) if stored is not None else None,
        )


def check_copied(
    ids: Sequence[str], sent: Sequence[Any], stored: Mapping[str, Any], target: str = "the target"
) -> float:
    """The largest difference between the vectors ``sent`` for ``ids`` and those the target
    ``stored`` (a guarded index's ``get`` result, any order), relative to each vector's length.

    Raises:
        StorageMismatchError: an id is missing, or a vector differs by more than
            :data:`COPY_TOLERANCE`.
    """
    got = dict(zip(stored["ids"], stored["embeddings"], strict=True))
    worst = 0.0
    for i, vector in zip(ids, sent, strict=True):
        a = np.asarray(vector, dtype=np.float64).ravel()
        b = np.asarray(got[i], dtype=np.float64).ravel() if i in got else None
        if b is None or a.shape != b.shape:
            worst = float("inf")
        else:
            scale = max(float(np.linalg.norm(a)), float(np.finfo(np.float32).tiny))
            worst = max(worst, float(np.abs(a - b).max(initial=0.0)) / scale)
        if worst > COPY_TOLERANCE:
            raise StorageMismatchError(
                target,
                {"copied vectors": f"record {i!r} differs by {worst:.3g} of its length"},
                {"copied vectors": f"within {COPY_TOLERANCE:g} of the source"},
                "Nothing after this page was copied; check the target's column or "
                "collection settings, or copy with re-embedding (reembed=True).",
                cli_advice="Nothing after this page was copied; check the target's column or "
                "collection settings, or copy with re-embedding (--reembed).",
            )
    return worst


def copy_missing(
    pages: Iterable[Page],
    write: Callable[[list[str], list[str], list[Any] | None], Any],
    done: Collection[str],
    *,
    total: int,
    progress: bool | None = None,
    desc: str = "migrating",
    write_vectors: Callable[[list[str], list[Any], list[str], list[Any] | None], Any] | None = None,
    read_back: Callable[[list[str]], Mapping[str, Any]] | None = None,
) -> int:
    """Write every source record whose id the target lacks; returns how many were written.

    Args:
        pages: the source, one :class:`Page` at a time (in a stable order, e.g. by offset).
        write: writes one batch ``(ids, documents, metadatas or None)`` into the target.
        done: ids the target holds already (skipped: this is what makes a re-run resume).
        total: how many records the source holds, for the progress bar.
        progress: show a progress bar (``None``: tqdm's choice; ``False``: never).
        write_vectors: writes one batch ``(ids, vectors, documents, metadatas or None)`` with
            the pages' stored vectors as they are (a copy under the same contract): used for
            every page that carries vectors.
        read_back: the target's ``get`` of a batch's ids with their vectors: each batch
            written by ``write_vectors`` is read back and compared (:func:`check_copied`).

    Raises:
        InvalidInputError: a record to copy has no stored text, so it cannot be re-embedded
            (nothing of that page is written; the pages before it are).

    Example:
        >>> n = copy_missing(pages, target.add, target.ids(), total=len(source))  # doctest: +SKIP
    """
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise InvalidInputError(f"total must be an integer >= 0, got {total!r}")
    from tqdm.auto import tqdm

    copied = 0
    with tqdm(
        total=total, initial=len(done), unit="doc", desc=desc, disable=progress is False
    ) as bar:
        for page in pages:
            metas = page.metadatas if page.metadatas is not None else [None] * len(page.ids)
            vecs = page.vectors if page.vectors is not None else [None] * len(page.ids)
            rows = [
                (i, d, m, v)
                for i, d, m, v in zip(page.ids, page.documents, metas, vecs, strict=True)
                if i not in done
            ]
            if not rows:
                continue
            missing = [i for i, d, _, _ in rows if not isinstance(d, str)]
            if missing:
                raise InvalidInputError(
                    f"source records {missing[:5]} have no stored text: they cannot be "
                    "re-embedded under the new contract (re-add them with their text first)"
                )
            ids = [i for i, _, _, _ in rows]
            docs: list[str] = [d for _, d, _, _ in rows]  # type: ignore[misc]
            kept = [m for _, _, m, _ in rows]
            metadatas = kept if any(m is not None for m in kept) else None
            if write_vectors is not None and page.vectors is not None:
                sent = [v for _, _, _, v in rows]
                write_vectors(ids, sent, docs, metadatas)
                if read_back is not None:
                    check_copied(ids, sent, read_back(ids))
            else:
                write(ids, docs, metadatas)
            copied += len(ids)
            bar.update(len(ids))
    return copied
