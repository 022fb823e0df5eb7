"""A hybrid index: a guarded dense index and its lexical side, kept in step, queried fused.

Store-agnostic: ``dense`` is any guarded index with the Chroma-shaped calls every ctxemb store
adapter gives (``ctxemb_chroma.GuardedCollection``, ``ctxemb_pgvector.GuardedTable``): ``name``,
``contract``, ``count``, ``get``, ``sync``, ``add``, ``upsert``, ``delete``, ``query``. The
adapters' ``open_hybrid`` open the dense side through their own guard, then this.

The lexical side is fitted on the dense side's stored texts, so the two hold the same
documents by construction; every write goes to the dense side first and then to the lexical
side, and an interruption between the two is found (:class:`~ctxemb_core.errors.OutOfStepError`,
naming the ids) on the next open or call, and mended by :meth:`HybridIndex.refresh` (which
``ctxemb index --hybrid`` runs).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core.documents import TEXT_KEY, text_digest
from ctxemb_core.errors import (
    ContractMismatchError,
    InvalidInputError,
    MissingStampError,
    OutOfStepError,
)
from ctxemb_core.hybrid.contract import HybridContract
from ctxemb_core.hybrid.fusion import Fusion, fuse
from ctxemb_core.hybrid.guard import (
    check_analyzer,
    check_caller,
    check_in_step,
    reload_if_moved,
    same_count,
    step_differences,
)
from ctxemb_core.hybrid.index import LexicalIndex
from ctxemb_core.hybrid.lexical import LexicalContract
from ctxemb_core.hybrid.store import (
    HybridStamp,
    lexical_exists,
    load_lexical,
    save_lexical,
)
from ctxemb_core.sync import SyncReport
from ctxemb_core.validate import check_positive_int

__all__ = ["HybridHit", "HybridIndex", "open_hybrid", "stored_records"]

#: Dense records read per call when the whole dense side is read (open, refresh).
PAGE = 1000


@dataclass(frozen=True)
class HybridHit:
    """One fused result: the fused score and each side's rank (1-based; ``None``: not in that
    side's candidates) and score."""

    id: str
    score: float
    document: str | None
    dense_rank: int | None
    dense_score: float | None
    lexical_rank: int | None
    lexical_score: float | None


def open_hybrid(
    dense: Any,
    folder: str | os.PathLike[str],
    *,
    lexical: LexicalContract | None = None,
    fusion: Fusion | None = None,
    create: bool = True,
    refresh: bool = False,
    progress: Callable[[int], None] | None = None,
) -> HybridIndex:
    """The hybrid index of an opened guarded dense index and its lexical folder.

    Args:
        dense: the dense side, opened (and so verified) through its store adapter.
        folder: the lexical side's folder (:mod:`ctxemb_core.hybrid.store`).
        lexical: the caller's lexical recipe; ``None`` takes the stamp's. A new index is
            built under it (the default recipe when ``None``).
        fusion: the caller's fusion; ``None`` takes the stamp's (new index: RRF, k = 60).
        create: build the lexical side from the dense side's stored texts if there is none.
        refresh: bring the lexical side in step with the dense side (rebuild what differs)
            instead of refusing when they differ.
        progress: called with the number of documents analysed, while building.

    Raises:
        ContractMismatchError: the lexical folder was built beside another dense contract.
        HybridMismatchError: ``lexical`` or ``fusion`` is not the stamp's (field named).
        EncoderDriftError: the analyzer here makes other terms than the stamp's canary.
        OutOfStepError: the sides hold different documents (without ``refresh``).
        MissingStampError: no lexical side and ``create=False``.
        DamagedStampError: a lexical file is not what its manifest records.
    """
    folder = Path(folder)
    name = f"{dense.name!r}"
    if not lexical_exists(folder):
        if not create:
            raise MissingStampError(
                f"{name} has no lexical side in {folder}; build it with ctxemb index --hybrid "
                "(or open_hybrid with create=True)"
            )
        ids, texts = _dense_texts(dense)
        index = LexicalIndex.fit(ids, texts, lexical, progress=progress)
        contract = HybridContract(dense.contract, index.contract, fusion or Fusion())
        save_lexical(folder, index, contract)
        return HybridIndex(dense, folder, index, _stamp_of(folder), (lexical, fusion))
    index, stamp = load_lexical(folder)
    if stamp.contract.dense != dense.contract and (
        stamp.contract.dense.diff(dense.contract).kind.value != "label"
    ):
        raise ContractMismatchError(stamp.contract.dense, dense.contract, stamped=True)
    caller = HybridContract(
        stamp.contract.dense,
        lexical if lexical is not None else stamp.contract.lexical,
        fusion if fusion is not None else stamp.contract.fusion,
    )
    check_caller(stamp.contract, caller, where=name)
    check_analyzer(stamp, index)
    hybrid = HybridIndex(dense, folder, index, stamp, (lexical, fusion))
    digests = _dense_digests(dense)
    if refresh:
        hybrid._mend(digests)
    else:
        check_in_step(index, digests, where=name)
    return hybrid


class HybridIndex:
    """A dense index and its lexical side (see the module docstring); built by
    :func:`open_hybrid` or an adapter's ``open_hybrid``."""

    def __init__(
        self,
        dense: Any,
        folder: Path,
        index: LexicalIndex,
        stamp: HybridStamp,
        asked: tuple[LexicalContract | None, Fusion | None] = (None, None),
    ) -> None:
        self.dense = dense
        self.folder = folder
        self.lexical = index
        self.stamp = stamp
        # The recipe the caller stated on open (None: whatever the stamp says): a stamp changed
        # by another process must still be it.
        self._asked = asked
        # Each lexical document's text digest by id, for the index it was read from.
        self._digests: tuple[LexicalIndex, dict[str, str]] | None = None

    @property
    def name(self) -> str:
        return str(self.dense.name)

    @property
    def contract(self) -> HybridContract:
        """The stamp's hybrid contract (the lexical side fitted)."""
        return self.stamp.contract

    def count(self) -> int:
        return int(self.dense.count())

    # -- staying current -------------------------------------------------------------------

    def _current(self) -> LexicalIndex:
        """The lexical side as stored now: another process's write is loaded and checked (a
        read of the pointer when nothing changed)."""
        moved = reload_if_moved(self.folder, self.stamp, self._stated, where=repr(self.name))
        if moved is not None:
            self.lexical, self.stamp = moved
        return self.lexical

    def _stated(self, stamp: HybridContract) -> HybridContract:
        """What this index states against a stamp: its dense side's contract, and the recipe
        asked for on open (the stamp's where none was)."""
        lexical, fusion = self._asked
        return stamp.with_(
            dense=self.dense.contract,
            lexical=lexical or stamp.lexical,
            fusion=fusion or stamp.fusion,
        )

    def _save(self, index: LexicalIndex) -> None:
        contract = self.stamp.contract.with_(lexical=index.contract)
        save_lexical(self.folder, index, contract)
        self.lexical, self.stamp = index, _stamp_of(self.folder)

    def _mend(self, digests: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
        only_dense, only_lexical, changed = step_differences(self.lexical, digests)
        if only_dense or only_lexical or changed:
            ids = only_dense + changed
            texts = _texts_of(self.dense, ids)
            self._save(self.lexical.updated(ids, texts, delete=only_lexical))
        return only_dense, only_lexical, changed

    def refresh(self) -> tuple[list[str], list[str], list[str]]:
        """Bring the lexical side in step with the dense side's stored texts; returns the ids
        ``(added, removed, changed)`` on the lexical side."""
        self._current()
        return self._mend(_dense_digests(self.dense))

    def set_fusion(self, fusion: Fusion) -> HybridContract:
        """Stamp ``fusion`` as the index's (a query-side change: nothing else is rewritten);
        returns the new contract."""
        if not isinstance(fusion, Fusion):
            raise InvalidInputError(f"fusion must be a Fusion, got {type(fusion).__name__}")
        index = self._current()
        save_lexical(self.folder, index, self.stamp.contract.with_(fusion=fusion))
        self.stamp = _stamp_of(self.folder)
        return self.stamp.contract

    # -- writing ---------------------------------------------------------------------------

    def sync(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> SyncReport:
        """The dense side's ``sync`` of the batch, then the same documents on the lexical side."""
        report: SyncReport = self.dense.sync(
            ids, documents, metadatas, dry_run=dry_run, progress=progress
        )
        if not dry_run:
            self._lexical_write(ids, documents)
        return report

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        self.dense.add(ids, documents, metadatas)
        self._lexical_write(ids, documents)

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        self.dense.upsert(ids, documents, metadatas)
        self._lexical_write(ids, documents)

    def add_missing(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        added = int(self.dense.add_missing(ids, documents, metadatas))
        self._lexical_write(ids, documents)
        return added

    def delete_missing(self, keep: Any, *, dry_run: bool = False) -> list[str]:
        """The dense side's ``delete_missing``, then the same ids off the lexical side."""
        gone: list[str] = self.dense.delete_missing(keep, dry_run=dry_run)
        if gone and not dry_run:
            self._save(self._current().updated(delete=gone))
        return gone

    def delete(self, ids: Sequence[str]) -> None:
        self.dense.delete(list(ids))
        index = self._current()
        self._save(index.updated(delete=ids))

    def _lexical_write(self, ids: Sequence[str], documents: Sequence[str]) -> None:
        index = self._current()
        have = dict(zip(index.ids, index.digests, strict=True))
        pairs = zip(ids, documents, strict=True)
        todo = [(i, d) for i, d in pairs if have.get(i) != text_digest(d)]
        if todo:
            self._save(index.updated([i for i, _ in todo], [d for _, d in todo]))

    # -- querying --------------------------------------------------------------------------

    def query(
        self,
        text: str,
        n_results: int = 10,
        *,
        lexical: LexicalContract | None = None,
        fusion: Fusion | None = None,
    ) -> list[HybridHit]:
        """The fused top ``n_results`` for one query text, best first.

        ``lexical`` / ``fusion`` state the caller's recipe; each must be the stamp's
        (:class:`~ctxemb_core.errors.HybridMismatchError` names the field otherwise). The
        dense side is queried through its guard (which checks the dense contract).

        Raises:
            OutOfStepError: the sides hold different numbers of documents now, or a document
                to be returned is on one side only or has another text on each side (a write
                around the index that kept the count: an upsert through the store).
        """
        check_positive_int(n_results, "n_results")
        if not isinstance(text, str):
            raise InvalidInputError(f"a query must be a string, got {type(text).__name__}")
        index = self._current()
        contract = self.stamp.contract
        caller = contract.with_(
            lexical=lexical if lexical is not None else contract.lexical,
            fusion=fusion if fusion is not None else contract.fusion,
        )
        check_caller(contract, caller, where=repr(self.name))
        same_count(index, self.count(), where=repr(self.name))
        depth = max(contract.fusion.depth, n_results)
        found = self.dense.query([text], n_results=min(depth, max(1, len(index))))
        dense = [
            (i, 1.0 - float(d)) for i, d in zip(found["ids"][0], found["distances"][0], strict=True)
        ]
        documents = dict(zip(found["ids"][0], found.get("documents", [[]])[0] or [], strict=False))
        metas = dict(zip(found["ids"][0], found.get("metadatas", [[]])[0] or [], strict=False))
        lexical_hits = index.search(text, depth)
        fused = fuse(contract.fusion, dense, lexical_hits, n_results)
        dense_at = {i: (r, s) for r, (i, s) in enumerate(dense[: contract.fusion.depth], 1)}
        top = lexical_hits[: contract.fusion.depth]
        lexical_at = {i: (r, s) for r, (i, s) in enumerate(top, 1)}
        missing = [i for i, _ in fused if i not in documents]
        if missing:
            got = self.dense.get(ids=missing, include=["documents", "metadatas"])
            documents.update(zip(got["ids"], got["documents"], strict=True))
            metas.update(zip(got["ids"], got["metadatas"], strict=True))
        self._check_hits(index, [i for i, _ in fused], documents, metas)
        return [
            HybridHit(
                i,
                s,
                documents.get(i),
                dense_at.get(i, (None, None))[0],
                dense_at.get(i, (None, None))[1],
                lexical_at.get(i, (None, None))[0],
                lexical_at.get(i, (None, None))[1],
            )
            for i, s in fused
        ]

    def _check_hits(
        self,
        index: LexicalIndex,
        ids: Sequence[str],
        documents: dict[str, Any],
        metas: dict[str, Any],
    ) -> None:
        """The documents to be returned hold the same text on both sides (the per-call count
        check cannot see a text changed around the index)."""
        if self._digests is None or self._digests[0] is not index:
            self._digests = (index, dict(zip(index.ids, index.digests, strict=True)))
        lexical = self._digests[1]
        only_dense, only_lexical, changed = [], [], []
        for i in ids:
            if i not in documents:
                only_lexical.append(i)
                continue
            stored = (metas.get(i) or {}).get(TEXT_KEY)
            digest = stored if isinstance(stored, str) else text_digest(documents[i] or "")
            if i not in lexical:
                only_dense.append(i)
            elif lexical[i] != digest:
                changed.append(i)
        if only_dense or only_lexical or changed:
            raise OutOfStepError(repr(self.name), only_dense, only_lexical, changed)

    def verify(self) -> dict[str, Any]:
        """Every document on both sides compared (ids and text digests), the lexical files'
        digests and the analyzer canary: a report, ``ok`` when all agree."""
        index, stamp = load_lexical(self.folder)
        report: dict[str, Any] = {"fingerprint": stamp.fingerprint, "documents": len(index)}
        try:
            check_analyzer(stamp, index)
            report["analyzer"] = "match"
        except Exception as exc:  # reported, not raised: verify says what it found
            report["analyzer"] = str(exc)
        only_dense, only_lexical, changed = step_differences(index, _dense_digests(self.dense))
        report.update(only_dense=only_dense, only_lexical=only_lexical, changed=changed)
        report["ok"] = report["analyzer"] == "match" and not (only_dense or only_lexical or changed)
        return report


def _stamp_of(folder: Path) -> HybridStamp:
    from ctxemb_core.hybrid.store import read_stamp

    return read_stamp(folder)[0]


def _pages(dense: Any, include: list[str]) -> Any:
    offset = 0
    while True:
        got = dense.get(include=include, limit=PAGE, offset=offset)
        if not got["ids"]:
            return
        yield got
        offset += len(got["ids"])


def _dense_texts(dense: Any) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    texts: list[str] = []
    for got in _pages(dense, ["documents"]):
        ids += got["ids"]
        texts += [d if isinstance(d, str) else "" for d in got["documents"]]
    return ids, texts


def _dense_digests(dense: Any) -> dict[str, str]:
    """Each dense id's stored text digest (the text itself where no digest was stored)."""
    out: dict[str, str] = {}
    for got in _pages(dense, ["metadatas", "documents"]):
        for i, meta, doc in zip(got["ids"], got["metadatas"], got["documents"], strict=True):
            out[i] = _record_digest(meta, doc if isinstance(doc, str) else "")
    return out


def _record_digest(meta: dict[str, Any] | None, text: str) -> str:
    """A stored record's text digest: the one its metadata carries, else its text's."""
    digest = (meta or {}).get(TEXT_KEY)
    return digest if isinstance(digest, str) else text_digest(text)


def stored_records(dense: Any, ids: Sequence[str]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """``id -> (text, digest, metadata)`` of the stored ones of ``ids`` on a guarded dense side;
    the digest is the one a record carries, or its text's (as the two sides are compared)."""
    got = dense.get(ids=list(ids), include=["documents", "metadatas"])
    out: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for i, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
        text = text if isinstance(text, str) else ""
        out[i] = (text, _record_digest(meta, text), dict(meta or {}))
    return out


def _texts_of(dense: Any, ids: Sequence[str]) -> list[str]:
    got = dense.get(ids=list(ids), include=["documents"])
    texts = dict(zip(got["ids"], got["documents"], strict=True))
    return [texts.get(i) or "" for i in ids]
