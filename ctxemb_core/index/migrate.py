"""Copying a guarded index into another driver's store: the vectors as they are under the same
contract (bit for bit where the target keeps float32 as given), re-embedded under another one.

The loop is :func:`ctxemb_core.migrate.copy_missing` (resumable: ids the target holds are
skipped, so a copy stopped half-way continues where it stopped); this module gives it pages from
a driver and writes through the target's :class:`~ctxemb_core.index.guarded.GuardedIndex`, so
any two drivers migrate alike.

Example:
    >>> from ctxemb_core.index import GuardedIndex, MemoryStore
    >>> copy = migrate_index(docs, MemoryStore().driver("docs"))           # doctest: +SKIP
    >>> copy.stamp.fingerprint == docs.stamp.fingerprint                   # doctest: +SKIP
    True
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import ContractMismatchError, InvalidInputError
from ctxemb_core.index.driver import INCLUDE, StoreDriver
from ctxemb_core.index.guarded import PAGE, GuardedIndex, check_driver, terms_of
from ctxemb_core.migrate import Page, copy_missing
from ctxemb_core.stamp import IndexStamp
from ctxemb_core.stamp_guard import as_embedder
from ctxemb_core.validate import check_count, check_flag, check_positive_int

__all__ = ["Migration", "check_not_itself", "migrate_index", "migration"]

_VECTOR = frozenset({"vector"})
_TEXT_META = frozenset({"text", "metadata"})


def _pages(source: GuardedIndex, size: int, vectors: bool) -> Iterator[Page]:
    offset = 0
    while True:
        source.current()  # each page is read under the verified stamp
        records = source.driver.page(offset, size, INCLUDE)
        if not records:
            return
        offset += len(records)
        yield Page(
            [r.id for r in records],
            [r.text for r in records],
            [r.metadata for r in records],
            [r.vector for r in records] if vectors else None,
        )


def migrate_index(
    source: GuardedIndex,
    target: StoreDriver,
    contract: EmbeddingContract | Embedder | None = None,
    *,
    reembed: bool = False,
    batch: int = PAGE,
    progress: bool | None = False,
) -> GuardedIndex:
    """Copy every record of ``source`` into ``target`` (created when absent); returns the target.

    Under the source's contract (``contract`` ``None`` or the same, without ``reembed``) the
    target carries the source's stamp and its stored vectors, each page read back and compared
    (:func:`ctxemb_core.migrate.check_copied`); the vectors are what the source's open verified
    of them (``verify(all=True)`` first proves every one). Under another contract every text
    is re-embedded. A target that exists must carry the contract the copy writes; ids it holds
    with the source's text and metadata are skipped, so a copy stopped half-way resumes when
    run again and ends with exactly the source's records (one the source changed meanwhile is
    written again, one it deleted is deleted). Until its last record is in, a new target's
    stamp marks it a copy being written (:attr:`~ctxemb_core.stamp.IndexStamp.copying`): every
    other open refuses it (:class:`~ctxemb_core.errors.UnfinishedCopyError`), so a copy
    stopped half-way is never served as the whole; a migration of the same source takes it
    up. The source is only read.

    Raises:
        ContractMismatchError: the target is another contract's index.
        UnfinishedCopyError: the target is an unfinished copy of another index.
        InvalidInputError: the target is the source itself, or a source record without
            text, where re-embedding (nothing of its page is written).
        StorageMismatchError: the target changed a copied vector beyond float32 rounding.
    """
    if not isinstance(source, GuardedIndex):
        raise InvalidInputError(f"source must be a GuardedIndex, got {type(source).__name__}")
    check_driver(target)
    check_flag(reembed, "reembed")
    if progress is not None:  # None: tqdm's choice
        check_flag(progress, "progress")
    check_count(batch, "batch")
    embedder = source.embedder if contract is None else as_embedder(contract)
    check_not_itself(source, target)
    # The stored vectors copy as they are only under the very contract that made them.
    same = not reembed and same_contract(source.stamp, embedder.contract, exact=True)
    # A new target is stamped as a copy still being written (refused by every other open,
    # taken up by a migration of the same source) until its last record is in.
    stamp = source.stamp if same else IndexStamp.from_embedder(embedder)
    copying = f"{source.name!r} in {source.driver.describe()}"
    try:
        dest = GuardedIndex.open(target, embedder, stamp=stamp.copy_of(copying))
    except ContractMismatchError as exc:  # another contract's index under the target's name
        if exc.index is None or exc.caller is None:
            raise
        raise ContractMismatchError(exc.index, exc.caller, target=target.name) from None
    fingerprint = source.stamp.fingerprint

    def write_vectors(ids: list[str], vectors: list[Any], docs: list[str], metas: Any) -> None:
        dest.add_embedded(ids, np.stack(vectors), docs, metas, fingerprint=fingerprint)

    def read_back(ids: list[str]) -> dict[str, Any]:
        got = target.read(ids, _VECTOR)
        return {"ids": [r.id for r in got], "embeddings": [r.vector for r in got]}

    held = set(dest.ids())
    seen: set[str] = set()
    copy_missing(
        _taken_up(_pages(source, batch, same), dest, held, seen),
        dest.add,
        held,
        total=source.count(),
        progress=progress,
        desc="copying" if same else "migrating",
        write_vectors=write_vectors if same else None,
        read_back=read_back if same else None,
    )
    gone = sorted(held - seen)  # records the source no longer holds
    for start in range(0, len(gone), batch):
        dest.delete(gone[start : start + batch])
    dest.finish_copy()
    return dest


def check_not_itself(source: GuardedIndex, target: StoreDriver, kind: str | None = None) -> None:
    """Refuse a ``target`` that is ``source`` itself (the same index of the same store, by
    whatever client or name it was reached): a migration writes a new index and never
    modifies its source. ``kind``: the store's word for an index (else its driver's terms')."""
    head = target.head()
    if (
        head is not None
        and head.identity == source.verified_head.identity
        and target.describe() == source.driver.describe()
    ):
        terms = terms_of(target)
        kind = kind or (terms.kind if terms is not None else "index")
        raise InvalidInputError(
            f"the target must be a new {kind}: {kind} {target.name!r} in {target.describe()} "
            "is the source, and a migration never modifies the source; give another name"
        )


def _own(metadata: Any) -> dict[str, Any]:
    """A record's metadata without ctxemb's own keys (which each index writes itself)."""
    return {k: v for k, v in (metadata or {}).items() if not str(k).startswith("ctxemb")}


def _taken_up(
    pages: Iterator[Page], dest: GuardedIndex, held: set[str], seen: set[str]
) -> Iterator[Page]:
    """The source's pages for a target that already holds ``held`` (a copy taken up again):
    a held record whose text or metadata the source has since changed is deleted from the
    target, and from ``held``, so that the copy writes it again; every id is added to
    ``seen``."""
    for page in pages:
        seen.update(page.ids)
        present = [i for i in page.ids if i in held]
        if present:
            stored = {r.id: r for r in dest.driver.read(present, _TEXT_META)}
            metas = page.metadatas or [None] * len(page.ids)
            stale = [
                i
                for i, text, meta in zip(page.ids, page.documents, metas, strict=True)
                if i in held
                and (
                    i not in stored
                    or stored[i].text != text
                    or _own(stored[i].metadata) != _own(meta)
                )
            ]
            if stale:
                dest.delete(stale)
                held.difference_update(stale)
        yield page


@dataclass(frozen=True)
class Migration:
    """A store adapter's ``migrate`` call with its arguments checked (:func:`migration`): the
    source's guarded index and how to copy it; the adapter names the target."""

    source: GuardedIndex
    batch: int
    reembed: bool
    progress: bool | None

    def into(
        self,
        target: StoreDriver,
        contract: EmbeddingContract | Embedder,
        *,
        rebuild: bool = False,
    ) -> GuardedIndex:
        """:func:`migrate_index` of the source into ``target`` under ``contract``.

        ``rebuild``: the target is in the source's own store, where a copy under the same
        contract is a rebuild (every text re-embedded, records written around ctxemb
        included), never a copy of the stored vectors.
        """
        return migrate_index(
            self.source,
            target,
            contract,
            reembed=self.reembed or rebuild,
            batch=self.batch,
            progress=self.progress,
        )


def migration(
    source: Any, batch_size: int, reembed: bool, progress: bool | None, *, opened_by: str
) -> Migration:
    """A store adapter's ``migrate`` of ``source``, a guarded index of any store's adapter
    (its wrapper holds it as ``source.index``), after the copy's arguments are checked.

    ``opened_by`` names the opens that give one (``"ctxemb_pgvector.open_table, ..."``).

    Raises:
        InvalidInputError: ``batch_size`` is not a positive integer, ``reembed`` not a flag,
            or ``source`` holds no guarded index.
    """
    check_positive_int(batch_size, "batch_size")
    check_flag(reembed, "reembed")
    index = getattr(source, "index", None)
    if not isinstance(index, GuardedIndex):
        raise InvalidInputError(
            f"source must be a guarded index ({opened_by}), got {type(source).__name__}"
        )
    return Migration(index, batch_size, reembed, progress)
