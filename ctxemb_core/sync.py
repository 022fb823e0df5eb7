"""Indexing as a sync: re-embed what changed, add what is new, leave the rest alone.

Every record ctxemb writes carries :func:`~ctxemb_core.documents.text_digest` of the text its
vector was embedded from, under :data:`~ctxemb_core.documents.TEXT_KEY` in its metadata. Indexing
a corpus again compares each document's text with what the store holds for its id and decides,
here and for every adapter alike:

- not stored: **added**;
- stored with a digest, or (written before the digest existed) with a text, that is the corpus
  text's: **unchanged** — nothing is embedded or written;
- anything else: **updated** — re-embedded and replaced (an upsert, undone whole on failure).

The digest decides where there is one, so a sync reads the records' metadata and the texts
only of records without a digest. Records written before the digest existed (no
:data:`TEXT_KEY`) are decided by their stored text. Their digest is not backfilled: it would
certify a vector ctxemb never saw being embedded from that text, and a no-op re-index would then
write to every old record (Chroma stores the text, so the comparison costs little more). A
record with neither text nor digest cannot be compared and is re-embedded.

An interrupted sync loses nothing and resumes: each batch is one undoable write, the batches
before it are kept, and a re-run finds them unchanged. Ids the corpus no longer has are deleted
only when asked (``delete_missing``), and only after every batch was written.

Example:
    >>> from ctxemb_core.sync import plan_sync
    >>> stored = {"d1": ("Green tea is steamed.", None)}
    >>> plan_sync(["d1", "d2"], ["Green tea is steamed.", "Black tea is rolled."], stored)
    SyncReport(added=('d2',), updated=(), unchanged=1, deleted=(), dry_run=False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxemb_core._batches import reporting
from ctxemb_core.documents import TEXT_KEY, text_digest
from ctxemb_core.errors import InvalidInputError

__all__ = [
    "TEXT_KEY",
    "SyncReport",
    "digest_unchanged",
    "missing_ids",
    "plan_sync",
    "reporting",
    "sync_batch",
    "text_digest",
    "unchanged",
    "with_text_digest",
]

#: What a store holds for one id: its stored text (``None`` where none) and its metadata.
Stored = tuple[str | None, Mapping[str, Any] | None]


@dataclass(frozen=True)
class SyncReport:
    """What a sync did (or, with ``dry_run``, would do).

    Attributes:
        added: ids that were not stored, embedded and added.
        updated: ids whose text changed, re-embedded and replaced.
        unchanged: how many stored records already held their corpus text (left alone).
        deleted: ids the corpus no longer has, deleted (only with ``delete_missing``).
        dry_run: nothing was embedded or written; the counts are what a real run would do.
    """

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: int = 0
    deleted: tuple[str, ...] = ()
    dry_run: bool = False

    @property
    def embedded(self) -> int:
        """Documents embedded (or, in a dry run, to be embedded)."""
        return len(self.added) + len(self.updated)

    def __add__(self, other: SyncReport) -> SyncReport:
        return SyncReport(
            self.added + other.added,
            self.updated + other.updated,
            self.unchanged + other.unchanged,
            self.deleted + other.deleted,
            self.dry_run or other.dry_run,
        )

    def with_deleted(self, deleted: Sequence[str]) -> SyncReport:
        return replace(self, deleted=tuple(deleted))

    def __str__(self) -> str:
        text = f"{len(self.added)} added, {len(self.updated)} updated, {self.unchanged} unchanged"
        if self.deleted:
            text += f", {len(self.deleted)} deleted"
        return text


def unchanged(text: str, document: str | None, metadata: Mapping[str, Any] | None) -> bool:
    """Whether a stored record (``document``, ``metadata``) already holds ``text``'s vector.

    The stored text, where given, must be ``text`` (a query returns it); the stored digest,
    where there is one, must be ``text``'s (the vector was embedded from it). A record with
    neither cannot be compared: ``False``. An adapter may read the text only of records that
    carry no digest (what :class:`~ctxemb_chroma.GuardedCollection` does).
    """
    stored = None if document is None else text_digest(document)
    return digest_unchanged(text_digest(text), stored, metadata)


def digest_unchanged(
    digest: str, document_digest: str | None, metadata: Mapping[str, Any] | None
) -> bool:
    """:func:`unchanged` on digests: of the corpus text and of the stored text (``None`` where
    none is stored), for a driver that holds only the digests its shards were checked with."""
    stored = (metadata or {}).get(TEXT_KEY)
    if document_digest is None and stored is None:
        return False
    if document_digest is not None and document_digest != digest:
        return False
    return stored is None or stored == digest


def plan_sync(
    ids: Sequence[str],
    documents: Sequence[str],
    stored: Mapping[str, Stored],
    *,
    same: Callable[[str, str | None, Mapping[str, Any] | None], bool] = unchanged,
) -> SyncReport:
    """Which of ``ids`` are new, changed or unchanged against ``stored`` (id → text, metadata).

    ``same`` is the comparison of one document with what is stored for its id: by default
    :func:`unchanged` (corpus texts against stored texts). A driver that holds only the digests
    its shards were checked with passes those as ``documents``, the stored texts' digests in
    ``stored``, and ``same=digest_unchanged``: the one rule, decided on digests.
    """
    added: list[str] = []
    updated: list[str] = []
    kept = 0
    for i, text in zip(ids, documents, strict=True):
        if i not in stored:
            added.append(i)
        elif same(text, *stored[i]):
            kept += 1
        else:
            updated.append(i)
    return SyncReport(tuple(added), tuple(updated), kept)


def with_text_digest(
    metadata: Mapping[str, Any] | None, text: str, *, keep: bool = False
) -> dict[str, Any]:
    """``metadata`` plus ``text``'s digest under :data:`TEXT_KEY` (a new dict).

    ``keep``: a digest ``metadata`` already carries is kept — for vectors embedded elsewhere
    (a Haystack embedder that embedded metadata fields with the content knows its text best).
    """
    meta = dict(metadata or {})
    if not (keep and isinstance(meta.get(TEXT_KEY), str)):
        meta[TEXT_KEY] = text_digest(text)
    return meta


def sync_batch(
    read: Callable[[list[str]], Mapping[str, Stored]],
    upsert: Callable[[list[str], list[str], list[Any] | None], Any],
    ids: Sequence[str],
    documents: Sequence[str],
    metadatas: Sequence[Any] | None = None,
    *,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> SyncReport:
    """Sync one batch: embed and upsert the new and changed records, leave the others alone.

    Args:
        read: the stored text and metadata of those of the given ids the store holds.
        upsert: the adapter's guarded upsert (embeds, writes, undoes whole on failure).
        ids, documents, metadatas: the batch (checked by the caller).
        dry_run: decide only: nothing is embedded or written.
        progress: called with counts of documents as they are decided (unchanged ones at once,
            the others per embedded batch of the network), so a bar moves while it embeds.

    Returns:
        The batch's :class:`SyncReport` (``deleted`` is always empty here).
    """
    ids = list(ids)
    plan = plan_sync(ids, documents, read(ids))
    if progress is not None and plan.unchanged:
        progress(plan.unchanged)
    todo = set(plan.added) | set(plan.updated)
    if dry_run or not todo:
        if progress is not None and todo:
            progress(len(todo))
        return replace(plan, dry_run=dry_run)
    keep = [k for k, i in enumerate(ids) if i in todo]
    with reporting(progress, len(keep)):
        upsert(
            [ids[k] for k in keep],
            [documents[k] for k in keep],
            [metadatas[k] for k in keep] if metadatas else None,
        )
    return plan


def missing_ids(stored: Iterable[str], corpus: Iterable[str]) -> list[str]:
    """Stored ids the corpus does not have (what ``delete_missing`` deletes), in stored order.

    ``corpus`` (``delete_missing``'s ``keep``) is checked whole first: ``None``, a string
    (which would keep its characters) or anything but id strings is refused, and nothing is
    deleted.
    """
    what = "keep (the ids to keep: a list or set of ids, or a corpus keyed by id)"
    if corpus is None or isinstance(corpus, str | bytes) or not isinstance(corpus, Iterable):
        raise InvalidInputError(f"{what} got {type(corpus).__name__}; nothing was deleted")
    keep = set()
    for i in corpus:
        if not isinstance(i, str):
            raise InvalidInputError(f"{what} holds {i!r}, not an id string; nothing was deleted")
        keep.add(i)
    return [i for i in stored if i not in keep]
