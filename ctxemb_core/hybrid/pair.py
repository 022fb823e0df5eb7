"""A hybrid index: a guarded dense index and its lexical side, kept in step, queried fused.

Store-agnostic: ``dense`` is any guarded index with the Chroma-shaped calls every ctxemb store
adapter gives (``ctxemb_chroma.GuardedCollection``, ``ctxemb_pgvector.GuardedTable``): ``name``,
``contract``, ``count``, ``get``, ``sync``, ``add``, ``upsert``, ``delete``, ``query``. The
adapters' ``open_hybrid`` open the dense side through their own guard, say where its lexical
side lives (a :class:`LexicalPlace`: a :class:`~ctxemb_core.hybrid.store.LexicalStore`, the
dense index's identity, and whether the dense index records the side), and hand both to
:func:`open_paired`, which opens the dense side and calls :func:`open_hybrid`.

The lexical side lives in a transactional store (:mod:`~ctxemb_core.hybrid.store`) and changes
by the documents written: no rebuild. Where the dense store shares the transaction (PostgreSQL:
``joint``), the dense write path writes the lexical rows in the dense rows' own transaction
(:meth:`HybridIndex.written`, :meth:`HybridIndex.deleted`). Elsewhere (Chroma beside SQLite)
every write goes to the dense side first; the lexical side then takes, holding its write lock,
the texts the dense side stores for the ids that differ, so concurrent writers converge on what
the dense side holds. An interruption between the two is found (:class:`~ctxemb_core.errors.
OutOfStepError`, naming the ids) on the next open or query, and mended by the next
``ctxemb index --hybrid`` (or :meth:`HybridIndex.refresh`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core.contract import same_contract
from ctxemb_core.documents import TEXT_KEY, text_digest
from ctxemb_core.errors import (
    ContractMismatchError,
    DamagedStampError,
    InvalidArgumentsError,
    InvalidInputError,
    OutOfStepError,
    StampError,
)
from ctxemb_core.hybrid.contract import HybridContract
from ctxemb_core.hybrid.fusion import Fusion, fuse
from ctxemb_core.hybrid.guard import (
    check_analyzer,
    check_caller,
    check_in_step,
    check_recipe,
    same_count,
    step_differences,
)
from ctxemb_core.hybrid.lexical import Analyzer, LexicalContract
from ctxemb_core.hybrid.store import (
    STORE_SCHEMA,
    HybridStamp,
    LexicalStore,
    NoLexicalSideError,
    ServerLexical,
    SQLiteLexical,
    has_file_set,
    read_file_set,
)
from ctxemb_core.remedy import BUILD_LEXICAL_SIDE, REBUILD_LEXICAL_SIDE, Said
from ctxemb_core.sync import SyncReport, sync_batch
from ctxemb_core.validate import check_positive_int

__all__ = [
    "LEXICAL_FOLDER",
    "MARK_KEY",
    "HybridHit",
    "HybridIndex",
    "LexicalPlace",
    "beside_store",
    "folder_place",
    "joint_place",
    "lexical_home",
    "open_hybrid",
    "open_paired",
    "recorded_mark",
    "stored_digest",
    "stored_records",
]

#: Dense records read per call when the whole dense side is read (open, refresh).
PAGE = 1000
#: Documents per lexical write when a whole dense side is taken in (build, mend).
BATCH = 512
#: The advice for a side lost or replaced around ctxemb.
#: How many times a query reads the lexical stamp and the dense count before it calls two
#: differing counts out of step (a writer between the reads makes them differ for a moment).
_READS = 3


@dataclass(frozen=True)
class LexicalPlace:
    """Where a dense index keeps its lexical side, as its store adapter says it.

    Attributes:
        store: the lexical side's store.
        owner: the dense index's name and identity (a collection's id, a table's oid): a side
            records it when built and refuses any other.
        remedy: what to do when the side belongs to another dense index, in the adapter's words
            (``remedy_cli``: in the command line's, where they differ).
        folder: the side's folder, where it has one (printed, and searched for an old file set).
        joint: the dense store writes the lexical rows in its own transactions.
        mark: reads the side's token as the dense index records it (``None``: none recorded),
            where the dense index can record one; ``set_mark`` records it. A dense index that
            records a side never has it rebuilt in silence when the side is lost or replaced.
    """

    store: LexicalStore
    owner: str
    remedy: str
    folder: Path | None = None
    joint: bool = False
    mark: Callable[[], str | None] | None = None
    set_mark: Callable[[str], None] | None = None
    remedy_cli: str | None = None


#: The folder of an embedded store that holds the lexical sides, one subfolder per index.
LEXICAL_FOLDER = "ctxemb-lexical"
#: The index metadata key that records its lexical side's token (not a stamp key: a restamp
#: keeps it, and it does not change the index's identity).
MARK_KEY = "ctxemb_lexical"


def lexical_home(store_folder: str | os.PathLike[str] | None, name: str, where: str) -> Path:
    """Where an embedded store in ``store_folder`` keeps the lexical side of index ``name``:
    ``<store_folder>/ctxemb-lexical/<name>``, the same for every store that keeps it in SQLite
    beside itself. ``None``: the store has no folder on this machine (``where``: what it is
    instead, ``"a Chroma server"``), whose side lives where its caller names it: refused."""
    if not store_folder:
        raise Said("lexical_path=", "--lexical-path").into(
            InvalidInputError,
            f"a hybrid index on {where} keeps its lexical side in a folder of this machine: "
            "give {do}",
        )
    return Path(store_folder) / LEXICAL_FOLDER / name


def recorded_mark(metadata: Mapping[str, Any] | None) -> str | None:
    """The lexical side's token that an index's metadata records (:data:`MARK_KEY`), if any."""
    value = (metadata or {}).get(MARK_KEY)
    return value if isinstance(value, str) else None


def folder_place(
    folder: Path,
    name: str,
    owner: str,
    metadata: Callable[[], Mapping[str, Any] | None],
    record: Callable[[str], None],
    *,
    kind: str = "collection",
) -> LexicalPlace:
    """The lexical side of an opened index ``name`` (a ``kind``) kept in SQLite in ``folder``,
    owned by ``owner`` (its name and identity), its token recorded in the index's metadata:
    ``metadata()`` reads that metadata, ``record(token)`` writes the token as :data:`MARK_KEY`.
    """
    return LexicalPlace(
        LexicalStore(SQLiteLexical(folder, name)),
        owner=owner,
        remedy=f"Give {kind} {name!r} a lexical folder of its own (lexical_path=); if the {kind} "
        f"it belongs to is gone, remove {folder} first.",
        remedy_cli=f"Give {kind} {name!r} a lexical folder of its own (--lexical-path); if the "
        f"{kind} it belongs to is gone, remove {folder} first.",
        folder=folder,
        mark=lambda: recorded_mark(metadata()),
        set_mark=record,
    )


def joint_place(
    db: ServerLexical,
    identity: Any,
    owner: str,
    *,
    kind: str = "table",
    records: str = "rows",
    folder: Path | None = None,
) -> LexicalPlace:
    """The lexical side of an opened index (a ``kind``, ``db.name``) kept in ``db``, the index's
    own database, and written in the index's transactions; owned by ``owner`` (its name and
    identity), its token recorded in ``db``'s marks under the index's ``identity``. A side
    of another owner is the index's own made again around ctxemb since: rebuilt from its
    ``records``, deliberately (``folder``: an old side to convert)."""
    gone = (
        f"{kind.capitalize()} {db.name!r} was dropped and created again around ctxemb since its "
        f"lexical side was built: rebuild the side from its {records} ("
    )
    return LexicalPlace(
        LexicalStore(db),
        owner=owner,
        remedy=f"{gone}{REBUILD_LEXICAL_SIDE.python}).",
        remedy_cli=f"{gone}{REBUILD_LEXICAL_SIDE.cli}).",
        folder=folder,
        joint=True,
        mark=lambda: db.mark(identity),
        set_mark=lambda token: db.set_mark(identity, token),
    )


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


def beside_store(
    store: Any,
    accepted: str,
    *,
    lexical_path: str | os.PathLike[str] | None = None,
    lexical: LexicalContract | None = None,
    fusion: Fusion | None = None,
    create: bool = True,
    refresh: bool = False,
) -> HybridIndex:
    """The hybrid index beside a framework's guarded store, opened by that store's adapter as
    the CLI opens it (the store's ``_open_hybrid``: the same lexical side and stamp); what a
    framework's ``ContractHybridRetriever.from_store`` builds on. ``accepted`` names the
    framework's stores that have one, for the refusal of any other object."""
    opener = getattr(store, "_open_hybrid", None)
    if opener is None:
        raise InvalidArgumentsError(
            f"ContractHybridRetriever.from_store needs {accepted}, got {type(store).__name__}"
        )
    options = {"lexical": lexical, "fusion": fusion, "create": create, "refresh": refresh}
    index: HybridIndex = opener(lexical_path=lexical_path, **options)
    return index


def open_hybrid(
    dense: Any,
    place: LexicalPlace,
    *,
    lexical: LexicalContract | None = None,
    fusion: Fusion | None = None,
    create: bool = True,
    refresh: bool = False,
    rebuild: bool = False,
    progress: Callable[[int], None] | None = None,
) -> HybridIndex:
    """The hybrid index of an opened guarded dense index and its lexical side.

    Args:
        dense: the dense side, opened (and so verified) through its store adapter.
        place: where its lexical side lives (the adapter's :class:`LexicalPlace`).
        lexical: the caller's lexical recipe; ``None`` takes the stamp's. A new side is built
            under it (the default recipe when ``None``).
        fusion: the caller's fusion; ``None`` takes the stamp's (new side: RRF, k = 60).
        create: build the lexical side from the dense side's stored texts if there is none
            (never when the dense index records one that is lost: that is refused).
        refresh: mend a lexical side found out of step (the counts differ) from the dense
            side's stored texts, instead of refusing.
        rebuild: drop the lexical side (lost, replaced, damaged, or another recipe wanted) and
            build it again from the dense side's stored texts under ``lexical``.
        progress: called with the number of documents analysed, while building.

    Raises:
        ContractMismatchError: the lexical side was built beside another dense contract.
        ForeignLexicalError: the lexical side belongs to another dense index.
        HybridMismatchError: ``lexical`` or ``fusion`` is not the stamp's (field named).
        AnalyzerDriftError: the analyzer here makes other terms than the stamp's canary.
        OutOfStepError: the sides hold different documents (without ``refresh``).
        MissingStampError: no lexical side and ``create=False``.
        DamagedStampError: a side whose rows are not what its stamp records, or a side the
            dense index records that is lost or replaced.
    """
    store = place.store
    name = repr(dense.name)
    if rebuild:
        store.drop()
    if not store.exists():
        if not rebuild and place.folder is not None and has_file_set(place.folder):
            _convert(dense, place)
        elif not rebuild and place.mark is not None and place.mark() is not None:
            # A side is committed before its mark is set: one found now was made by another
            # process between the two looks, not lost.
            if not store.exists():
                raise REBUILD_LEXICAL_SIDE.into(
                    DamagedStampError,
                    f"{name} records a lexical side (token {place.mark()}) that {store.where} "
                    "no longer holds: it was lost or moved. It is never rebuilt in silence under "
                    "a default recipe; restore it, or rebuild it deliberately under the recipe "
                    "you want: {do}",
                )
        elif not create:
            raise BUILD_LEXICAL_SIDE.into(
                NoLexicalSideError, f"{name} has no lexical side in {store.where}; build it: {{do}}"
            )
        else:
            _build(dense, place, lexical, fusion, progress)
    stamp = store.check()
    if not same_contract(stamp.contract.dense, dense.contract):
        raise ContractMismatchError(stamp.contract.dense, dense.contract, stamped=True)
    store.check_owner(stamp, place.owner, place.remedy, place.remedy_cli)
    if place.mark is not None:
        marked = place.mark()
        if marked is None and place.set_mark is not None:
            place.set_mark(stamp.token)
        elif marked is not None and marked != stamp.token:
            raise REBUILD_LEXICAL_SIDE.into(
                DamagedStampError,
                f"the lexical side in {store.where} is not the one {name} was built with (token "
                f"{stamp.token}, the dense index records {marked}): replaced around ctxemb. "
                "Restore it, or rebuild it deliberately: {do}",
            )
    caller = HybridContract(
        stamp.contract.dense,
        lexical if lexical is not None else stamp.contract.lexical,
        fusion if fusion is not None else stamp.contract.fusion,
    )
    check_caller(stamp.contract, caller, where=name)
    check_analyzer(stamp, store.analyzer(stamp))
    hybrid = HybridIndex(dense, place, stamp, (lexical, fusion))
    if stamp.schema != STORE_SCHEMA:
        hybrid._upgrade(progress)
    if refresh and not place.joint:
        left = store.pending()
        if left:  # a writer stopped between the two stores (or is between them now)
            hybrid.take(left)
    if int(dense.count()) != hybrid.stamp.documents:
        digests = _dense_digests(dense)
        if refresh:
            hybrid._mend(digests, progress)
        else:
            check_in_step(store.digests(), digests, where=name)
    return hybrid


def open_paired(
    open_dense: Callable[..., Any],
    place_for: Callable[[Any], LexicalPlace],
    *,
    lexical: LexicalContract | None = None,
    fusion: Fusion | None = None,
    create: bool = True,
    refresh: bool = False,
    rebuild: bool = False,
    progress: Callable[[int], None] | None = None,
    **open_options: Any,
) -> HybridIndex:
    """A store adapter's ``open_hybrid``: the dense side opened as the adapter opens it, its
    lexical side where the adapter keeps it, the two paired by :func:`open_hybrid`.

    Args:
        open_dense: the adapter's open of its guarded dense index (its client, name and
            contract bound), called as ``open_dense(create=create, **open_options)``.
        place_for: where the opened dense index keeps its lexical side.
        open_options: the options of ``open_dense`` (``sample``, ``adopt``, a schema...).
        lexical, fusion, create, refresh, rebuild, progress: as :func:`open_hybrid`'s.

    Where the place is ``joint``, the hybrid index becomes the ``companion`` of the dense
    index's driver: its write path then calls :meth:`HybridIndex.lock`,
    :meth:`HybridIndex.written` and :meth:`HybridIndex.deleted` in its own transactions.

    Raises:
        what ``open_dense`` and :func:`open_hybrid` raise.
    """
    dense = open_dense(create=create, **open_options)
    place = place_for(dense)
    hybrid = open_hybrid(
        dense,
        place,
        lexical=lexical,
        fusion=fusion,
        create=create,
        refresh=refresh,
        rebuild=rebuild,
        progress=progress,
    )
    if place.joint:
        dense.driver.companion = hybrid
    return hybrid


def _build(
    dense: Any,
    place: LexicalPlace,
    lexical: LexicalContract | None,
    fusion: Fusion | None,
    progress: Callable[[int], None] | None,
) -> None:
    """A new side under the caller's recipe, filled from the dense side's stored texts."""
    recipe = (lexical or LexicalContract()).recipe()
    contract = HybridContract(dense.contract, recipe, fusion or Fusion())
    try:
        place.store.create(contract, place.owner, Analyzer(recipe).canary())
    except StampError:
        if not place.store.exists():
            raise
        return  # another process built it first: it is opened and checked as found
    stamp = place.store.stamp()
    if place.set_mark is not None:
        place.set_mark(stamp.token)
    batch: list[tuple[str, str, str]] = []
    for got in _pages(dense, ["documents"]):
        for i, text in zip(got["ids"], got["documents"], strict=True):
            text = text if isinstance(text, str) else ""
            batch.append((i, stored_digest(text), text))
        if len(batch) >= BATCH:
            place.store.apply(batch)
            if progress is not None:
                progress(len(batch))
            batch = []
    if batch:
        place.store.apply(batch)
        if progress is not None:
            progress(len(batch))


def _convert(dense: Any, place: LexicalPlace) -> None:
    """An old file-set side, read once (every file checked) and written into the store."""
    assert place.folder is not None
    index, contract, canary = read_file_set(place.folder)
    if not same_contract(contract.dense, dense.contract):
        raise ContractMismatchError(contract.dense, dense.contract, stamped=True)
    try:  # its digests are the ones records carried: brought to the store's form on open
        place.store.create(contract, place.owner, canary, index, schema=2)
    except StampError:
        if not place.store.exists():
            raise


class HybridIndex:
    """A dense index and its lexical side (see the module docstring); built by
    :func:`open_hybrid` or an adapter's ``open_hybrid``."""

    def __init__(
        self,
        dense: Any,
        place: LexicalPlace,
        stamp: HybridStamp,
        asked: tuple[LexicalContract | None, Fusion | None] = (None, None),
    ) -> None:
        self.dense = dense
        self.place = place
        self.lexical: LexicalStore = place.store
        self.stamp = stamp
        # The recipe the caller stated on open (None: whatever the stamp says): a stamp changed
        # by another process must still be it.
        self._asked = asked

    @property
    def name(self) -> str:
        return str(self.dense.name)

    @property
    def folder(self) -> Any:
        """Where the lexical side is: its folder, or the database tables it lives in."""
        return self.place.folder if self.place.folder is not None else self.lexical.where

    @property
    def contract(self) -> HybridContract:
        """The stamp's hybrid contract (the lexical side fitted)."""
        return self.stamp.contract

    def count(self) -> int:
        return int(self.dense.count())

    # -- staying current -------------------------------------------------------------------

    def _follow(self, stamp: HybridStamp) -> HybridStamp:
        """Take a stamp read from the store: one whose recipe or fusion another process
        changed is checked against what this index states first."""
        if not same_contract(self.stamp.contract.recipe(), stamp.contract.recipe(), exact=True):
            check_caller(stamp.contract, self._stated(stamp.contract), where=repr(self.name))
            check_analyzer(stamp, self.lexical.analyzer(stamp))
        self.stamp = stamp
        return stamp

    def current(self) -> HybridStamp:
        """The stamp as stored now (one row read), checked against what this index states."""
        return self._follow(self.lexical.stamp())

    def _stated(self, stamp: HybridContract) -> HybridContract:
        """What this index states against a stamp: its dense side's contract, and the recipe
        asked for on open (the stamp's where none was)."""
        lexical, fusion = self._asked
        return stamp.with_(
            dense=self.dense.contract,
            lexical=lexical or stamp.lexical,
            fusion=fusion or stamp.fusion,
        )

    def _mend(
        self, digests: dict[str, str], progress: Callable[[int], None] | None = None
    ) -> tuple[list[str], list[str], list[str]]:
        only_dense, only_lexical, changed = step_differences(self.lexical.digests(), digests)
        todo = only_dense + changed + only_lexical
        for start in range(0, len(todo), BATCH):
            part = todo[start : start + BATCH]
            self.take(part)
            if progress is not None:
                progress(len(part))
        return only_dense, only_lexical, changed

    def _upgrade(self, progress: Callable[[int], None] | None = None) -> None:
        """A side of schema 2 brought to the store's (:data:`~ctxemb_core.hybrid.store.
        STORE_SCHEMA`): its rows kept the digest a dense record's metadata carries, which names
        the text that made the vector; that text may differ from the stored one (a title joined
        in), and a raw client that rewrote the stored text alone left it as it was. Each row
        whose digest is its record's carried one, not its stored text's, is analysed again from
        the stored text; rows that differ otherwise are left to be found out of step."""
        with self.lexical.db.writing():
            now = self.lexical.stamp(lock=True)
            if now.schema == STORE_SCHEMA:  # another process brought it first
                self.stamp = now
                return
            held = self.lexical.digests()
            again = []
            for got in _pages(self.dense, ["metadatas", "documents"]):
                for i, meta, text in zip(
                    got["ids"], got["metadatas"], got["documents"], strict=True
                ):
                    carried = (meta or {}).get(TEXT_KEY)
                    if held.get(i) == carried and carried != stored_digest(text):
                        again.append(i)
            for start in range(0, len(again), BATCH):
                self.take(again[start : start + BATCH])
                if progress is not None:
                    progress(len(again[start : start + BATCH]))
            self.stamp = self.lexical.set_schema()

    def refresh(self) -> tuple[list[str], list[str], list[str]]:
        """Bring the lexical side in step with the dense side's stored texts (every document
        compared); returns the ids ``(added, removed, changed)`` on the lexical side."""
        self.current()
        return self._mend(_dense_digests(self.dense))

    def set_fusion(self, fusion: Fusion) -> HybridContract:
        """Stamp ``fusion`` as the index's (a query-side change: nothing else is rewritten);
        returns the new contract."""
        if not isinstance(fusion, Fusion):
            raise InvalidInputError(f"fusion must be a Fusion, got {type(fusion).__name__}")
        stamp = self.current()
        self.stamp = self.lexical.set_contract(stamp.contract.with_(fusion=fusion))
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
        """The dense side's ``sync`` of the batch; the documents it writes are written to the
        lexical side too (a batch with nothing new costs the lexical side nothing)."""
        if self.place.joint:
            report: SyncReport = self.dense.sync(
                ids, documents, metadatas, dry_run=dry_run, progress=progress
            )
            return report
        return sync_batch(
            self._stored,
            self.upsert,
            list(ids),
            documents,
            metadatas,
            dry_run=dry_run,
            progress=progress,
        )

    def _stored(self, ids: list[str]) -> dict[str, tuple[str | None, Any]]:
        """What a sync compares: each stored id's metadata, and the text of those that carry
        no text digest."""
        got = self.dense.get(ids=ids, include=["metadatas"])
        metas = dict(zip(got["ids"], got["metadatas"] or [], strict=True))
        legacy = [i for i, m in metas.items() if not isinstance((m or {}).get(TEXT_KEY), str)]
        texts: dict[str, Any] = {}
        if legacy:
            old = self.dense.get(ids=legacy, include=["documents"])
            texts = dict(zip(old["ids"], old["documents"] or [], strict=True))
        return {i: (texts.get(i), m) for i, m in metas.items()}

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        self._both(ids, lambda: self.dense.add(ids, documents, metadatas))

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        self._both(ids, lambda: self.dense.upsert(ids, documents, metadatas))

    def add_missing(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        added: list[int] = []
        self._both(
            ids, lambda: added.append(int(self.dense.add_missing(ids, documents, metadatas)))
        )
        return added[0]

    def delete_missing(self, keep: Any, *, dry_run: bool = False) -> list[str]:
        """The dense side's ``delete_missing``, then the same ids off the lexical side."""
        gone: list[str] = self.dense.delete_missing(keep, dry_run=dry_run)
        if gone and not dry_run and not self.place.joint:
            self.take(gone)
        return gone

    def delete(self, ids: Sequence[str]) -> None:
        self._both(ids, lambda: self.dense.delete(list(ids)))

    def _both(self, ids: Sequence[str], write: Callable[[], Any]) -> None:
        """A dense write, and the lexical side brought to what it stored. Where the dense store
        writes the lexical rows in its own transaction, that is all; elsewhere the ids are
        recorded first (:meth:`LexicalStore.intend`), so that a writer stopped between the two
        stores leaves the next one the ids to take, not a silent difference."""
        if self.place.joint:
            write()
            return
        self.current()
        self.lexical.intend(list(ids))
        try:
            write()
        except BaseException:
            # Nothing (or not all) written: the lexical side is made what the dense side holds
            # now, where it can be, and the ids are no longer left pending.
            with contextlib.suppress(Exception):
                self.take(list(ids))
            raise
        self.take(list(ids))

    def keep_in_step(self, ids: Sequence[str], write: Callable[[], Any]) -> None:
        """Run ``write``, a write of ``ids`` through the dense side's own guard (an alias's,
        which writes the guarded index itself), and keep the lexical side in step with it, as
        this index's own writes do."""
        self._both(ids, write)

    def deleted_through(self, ids: Sequence[str]) -> None:
        """``ids`` were deleted through the dense side's own guard (ids known only once
        deleted: a filter's): the lexical side drops them too."""
        if ids and not self.place.joint:
            self.take(list(ids))

    def take(self, ids: Sequence[str]) -> None:
        """Make the lexical side hold what the dense side stores for ``ids`` (read while the
        side's write lock is held, so that the last writer's texts are the ones kept): after a
        write through the dense store alone (a framework's writer)."""
        expect = self.stamp.contract.lexical.recipe().fingerprint
        with self.lexical.db.writing():
            stored = stored_records(self.dense, ids)
            upserts = [(i, stored[i][1], stored[i][0]) for i in ids if i in stored]
            deletes = [i for i in ids if i not in stored]
            self.stamp = self.lexical.apply(upserts, deletes, expect=expect)

    # -- the dense store's transaction (joint places) ----------------------------------------

    def lock(self) -> None:
        """Called by the dense store at the start of a write transaction, before its rows:
        the lexical side's row is held from here to the commit, so writers of the two sides
        take turns and never wait on each other's rows in a circle."""
        self.lexical.stamp(lock=True)

    def written(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any] | None],
    ) -> None:
        """Called by the dense store inside the transaction that writes these rows."""
        del metadatas  # the side keeps the digest of the text it analyses
        rows = [(i, stored_digest(d), d) for i, d in zip(ids, documents, strict=True)]
        expect = self.stamp.contract.lexical.recipe().fingerprint
        self.stamp = self.lexical.apply(rows, expect=expect)

    def deleted(self, ids: Sequence[str]) -> None:
        """Called by the dense store inside the transaction that deletes these rows."""
        if ids:
            self.stamp = self.lexical.apply([], list(ids))

    # -- querying --------------------------------------------------------------------------

    def lexical_search(
        self,
        text: str,
        k: int,
        *,
        lexical: LexicalContract | None = None,
        fusion: Fusion | None = None,
    ) -> tuple[list[tuple[str, float]], HybridStamp]:
        """The lexical side's ``k`` best ``(id, score)`` for ``text`` and the stamp they were
        scored under, after the recipe stated (``lexical`` / ``fusion``; ``None``: the
        stamp's) is checked against that stamp and the two sides are found to hold as many
        documents.

        The stamp and the dense side's count are read in one snapshot where both sides live
        in one database (PostgreSQL). Elsewhere they are two reads, and a writer between them
        (another thread or process, its write whole on both sides) makes them differ for a
        moment, so they are read again before the sides are called out of step.
        """
        for attempt in range(_READS):
            with self.lexical.db.reading():
                hits, stamp = self.lexical.search(text, k, self.stamp)
                dense = self.count()
            self._follow(stamp)
            check_recipe(stamp.contract, lexical, fusion, where=repr(self.name))
            if stamp.documents == dense or attempt == _READS - 1:
                break
        same_count(stamp.documents, dense, where=repr(self.name))
        return hits, stamp

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
                either side ranked for the fusion is on one side only or has another text on
                each side (a write around the index that kept the count: an upsert through the
                store), whether or not it would be returned: it changes what is.
        """
        check_positive_int(n_results, "n_results")
        if not isinstance(text, str):
            raise InvalidInputError(f"a query must be a string, got {type(text).__name__}")
        contract = check_recipe(self.current().contract, lexical, fusion, where=repr(self.name))
        depth = max(contract.fusion.depth, n_results)
        # Checked again against the stamp the lexical side is scored under: a writer may have
        # refitted its statistics since (the recipe stated is what must still be the stamp's).
        lexical_hits, stamp = self.lexical_search(text, depth, lexical=lexical, fusion=fusion)
        contract = stamp.contract
        found = self.dense.query([text], n_results=min(depth, max(1, stamp.documents)))
        dense = [
            (i, 1.0 - float(d)) for i, d in zip(found["ids"][0], found["distances"][0], strict=True)
        ]
        documents = dict(zip(found["ids"][0], found.get("documents", [[]])[0] or [], strict=False))
        fused = fuse(contract.fusion, dense, lexical_hits, n_results)
        dense_at = {i: (r, s) for r, (i, s) in enumerate(dense[: contract.fusion.depth], 1)}
        top = lexical_hits[: contract.fusion.depth]
        lexical_at = {i: (r, s) for r, (i, s) in enumerate(top, 1)}
        # Every candidate of either ranking is checked, not only the ones returned: a document
        # whose text was rewritten around the index moves the others' lexical ranks (and is
        # ranked itself on old terms) without being returned, and the order served is wrong.
        candidates = [i for i, _ in fused]
        candidates += [i for i, _ in (*dense[: contract.fusion.depth], *top)]
        candidates = list(dict.fromkeys(candidates))
        missing = [i for i in candidates if i not in documents]
        if missing:
            got = self.dense.get(ids=missing, include=["documents"])
            documents.update(zip(got["ids"], got["documents"], strict=True))
        self._check_hits(candidates, documents)
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

    def check_found(self, ids: Sequence[str]) -> None:
        """The documents of ``ids``, found and ranked elsewhere (a framework's own join of the
        two sides' rankings), hold the same text on both sides now, as :meth:`query` checks
        the ones it returns: a document whose stored text was rewritten around the index was
        ranked by the dense side on its new text and by the lexical side on its old terms.

        Raises:
            OutOfStepError: ids named, on one side only or with another text on each side.
        """
        if not ids:
            return
        got = self.dense.get(ids=list(ids), include=["documents"])
        self._check_hits(ids, dict(zip(got["ids"], got["documents"], strict=True)))

    def _check_hits(self, ids: Sequence[str], documents: dict[str, Any]) -> None:
        """The documents to be returned hold the same text on both sides (the per-call count
        check cannot see a text changed around the index)."""
        lexical = self.lexical.digests(list(ids))
        only_dense, only_lexical, changed = [], [], []
        for i in ids:
            if i not in documents:
                only_lexical.append(i)
                continue
            digest = stored_digest(documents[i])
            if i not in lexical:
                only_dense.append(i)
            elif lexical[i] != digest:
                changed.append(i)
        if only_dense or only_lexical or changed:
            raise OutOfStepError(repr(self.name), only_dense, only_lexical, changed)

    def verify(self) -> dict[str, Any]:
        """Every document on both sides compared (ids and text digests), the lexical rows
        against the stamp's statistics, each document's length against its postings, and the
        analyzer canary: a report, ``ok`` when all agree."""
        report: dict[str, Any] = {}
        try:
            stamp = self.lexical.check(full=True)
            report["statistics"] = "match"
        except DamagedStampError as exc:
            stamp = self.lexical.stamp()
            report["statistics"] = str(exc)
        report.update(fingerprint=stamp.fingerprint, documents=stamp.documents)
        try:
            check_analyzer(stamp, self.lexical.analyzer(stamp))
            report["analyzer"] = "match"
        except Exception as exc:  # reported, not raised: verify says what it found
            report["analyzer"] = str(exc)
        report["lengths_differ"] = self.lexical.lengths_agree()
        only_dense, only_lexical, changed = step_differences(
            self.lexical.digests(), _dense_digests(self.dense)
        )
        report.update(only_dense=only_dense, only_lexical=only_lexical, changed=changed)
        report["ok"] = (
            report["analyzer"] == "match"
            and report["statistics"] == "match"
            and not report["lengths_differ"]
            and not (only_dense or only_lexical or changed)
        )
        return report


def _pages(dense: Any, include: list[str]) -> Any:
    offset = 0
    while True:
        got = dense.get(include=include, limit=PAGE, offset=offset)
        if not got["ids"]:
            return
        yield got
        offset += len(got["ids"])


def _dense_digests(dense: Any) -> dict[str, str]:
    """Each dense id's stored text's digest."""
    out: dict[str, str] = {}
    for got in _pages(dense, ["documents"]):
        for i, doc in zip(got["ids"], got["documents"], strict=True):
            out[i] = stored_digest(doc)
    return out


def stored_digest(text: Any) -> str:
    """The digest the two sides are compared by: of the text the dense side stores, which is
    the text the lexical side analyses. Not the digest a record's metadata carries: that names
    the text its vector was made from (a title joined in, perhaps), and stays as it was when a
    raw client rewrites the stored text alone, which would leave the side scoring old terms."""
    return text_digest(text if isinstance(text, str) else "")


def stored_records(dense: Any, ids: Sequence[str]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """``id -> (text, digest, metadata)`` of the stored ones of ``ids`` on a guarded dense side;
    the digest is the stored text's (as the two sides are compared)."""
    got = dense.get(ids=list(ids), include=["documents", "metadatas"])
    out: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for i, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
        text = text if isinstance(text, str) else ""
        out[i] = (text, stored_digest(text), dict(meta or {}))
    return out
