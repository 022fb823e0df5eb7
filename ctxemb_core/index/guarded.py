"""One guarded index over any store driver: every call checked before it runs.

:class:`GuardedIndex` conducts the guard once, for every store: open (create stamped, verify,
adopt), the open-time sample and the verified-open record, writes that are all-or-nothing
(by the store's transaction or by undo), sync, the query checks, verify and re-stamp. A store
brings only its :class:`~ctxemb_core.index.driver.StoreDriver`; the decisions are the ones in
:mod:`ctxemb_core.guard`, :mod:`ctxemb_core.stamp`, :mod:`ctxemb_core.verified` and
:mod:`ctxemb_core.sync`, called from here.

What an open re-embeds of the stored records:

- a driver with a write mark (``capabilities.marks``): the records written since the last
  open that passed under this contract (``driver.changes(mark)``: O(those), whatever the index
  holds), then random others up to ``sample``; nothing when nothing was written. A record
  rewritten in place around ctxemb takes a fresh mark, so it is among them. The record of the
  verified state is one number (:func:`ctxemb_core.verified.save_mark`), kept at any size.
- without a mark: every id is listed and compared with the ids of the verified state
  (:func:`ctxemb_core.verified.plan_sample`), as the adapters did. A driver that seals its
  records (``capabilities.seals``, Qdrant's) names the records whose seal does not hold too:
  each is checked on every open, whatever its place, and sealed once it passed; an adoption
  seals every record it accepted.
- without any record: the newest half and a random half of ``sample``.

Example:
    >>> from ctxemb_core.index import GuardedIndex, MemoryStore
    >>> docs = GuardedIndex.open(MemoryStore().driver("docs"), embedder)   # doctest: +SKIP
    >>> docs.add(["d1", "d2"], ["Green tea is steamed.", "Black tea is rolled."])  # doctest: +SKIP
    >>> docs.query(["how is green tea made"], 1)[0][0].id                  # doctest: +SKIP
    'd1'
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import numpy as np

from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.documents import TEXT_KEY, check_fingerprint
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    ConfigurationMismatchError,
    ContractMismatchError,
    CtxembError,
    DamagedStampError,
    ExistingIdsError,
    InvalidInputError,
    MissingStampError,
    StampError,
    StorageMismatchError,
    UnfinishedCopyError,
    unstamped_remedies,
    worded,
)
from ctxemb_core.index.driver import (
    INCLUDE,
    Filter,
    Head,
    Record,
    SealingDriver,
    SeekingDriver,
    StampMovedError,
    StampRead,
    StoreDriver,
    Version,
)
from ctxemb_core.index.driver_kit import unstamped_refusal
from ctxemb_core.index.embedded import OWN_PREFIX
from ctxemb_core.records import (
    OPEN_SAMPLE,
    RecordCheck,
    check_stored,
    records_progress,
    refuse_foreign,
    refuse_vectorless,
    sample_ranges,
    similarity,
    storable,
)
from ctxemb_core.remedy import StoreTerms
from ctxemb_core.stamp import IndexStamp
from ctxemb_core.stamp_guard import (
    RestampReport,
    VerifyReport,
    adopt_stamp,
    as_embedder,
    check_configuration,
    check_querier,
    check_querier_canary,
    check_storage,
    restamp_stamp,
    verify_index,
)
from ctxemb_core.sync import SyncReport, missing_ids, sync_batch, with_text_digest
from ctxemb_core.undo import add_missing, undoable_write
from ctxemb_core.validate import (
    check_count,
    check_delete,
    check_embedded,
    check_flag,
    check_ids,
    check_query_vector,
    check_records,
    check_sample_size,
)
from ctxemb_core.verified import (
    MAX_RECORDED,
    OpenCheck,
    load_mark,
    load_verified,
    plan_sample,
    record_key,
    save_mark,
    save_verified,
)

__all__ = [
    "GuardedIndex",
    "Match",
    "check_driver",
    "restamp_index",
    "sample_records",
    "stamped_contract",
    "verify_driver",
]

#: Records read per page when every record is listed or checked.
PAGE = 1000
_ONLY_TEXT = frozenset({"text"})
_ONLY_META = frozenset({"metadata"})
_ID_ONLY: frozenset[str] = frozenset()
_FOR_CHECK = frozenset({"vector", "text"})


@dataclass(frozen=True)
class Match:
    """One query result: the record's id, its similarity under the contract (higher is nearer,
    :func:`ctxemb_core.guard.similarity`), its text and metadata."""

    id: str
    score: float
    text: str | None
    metadata: Mapping[str, Any] | None


#: The members a driver must have (the protocol's methods, ``name`` and ``capabilities``).
_MEMBERS = tuple(
    sorted({*StoreDriver.__annotations__, *(n for n in vars(StoreDriver) if n[0] != "_")})
)


def check_driver(driver: Any) -> StoreDriver:
    """``driver`` if it implements the :class:`StoreDriver` protocol, else refused naming the
    members it lacks."""
    if not isinstance(driver, StoreDriver):
        lacking = [m for m in _MEMBERS if not hasattr(driver, m)]
        which = f", which lacks {', '.join(lacking)}" if lacking else ""
        raise InvalidInputError(
            "driver must implement ctxemb_core.index.StoreDriver, got "
            f"{type(driver).__name__}{which}"
        )
    return driver


def _include(include: Any) -> frozenset[str]:
    if isinstance(include, str) or not isinstance(include, Iterable):
        raise InvalidInputError(f"include must be a list of parts, got {include!r}")
    parts = frozenset(include)
    if not parts <= INCLUDE:
        raise InvalidInputError(
            f"include names {sorted(parts - INCLUDE)}; the parts are {sorted(INCLUDE)}"
        )
    return parts


def _unstamped(driver: StoreDriver) -> MissingStampError:
    # A driver may word the refusal in its store's terms (what wrote around ctxemb there).
    worded = getattr(driver, "unstamped_error", None)
    if callable(worded):
        error = worded()
        if isinstance(error, MissingStampError):
            return error
    return unstamped_refusal("index", driver.name, where=f" in {driver.describe()}")


def stamped_contract(driver: StoreDriver) -> EmbeddingContract:
    """The contract the stamp of ``driver``'s index holds: read, not verified (nothing is
    embedded); an unstamped index refused in the driver's words where it has them.

    Raises:
        InvalidInputError: no such index.
        MissingStampError: the index carries no stamp.
        DamagedStampError: a stamp that cannot be read.
    """
    with _store_words(driver):
        read = driver.read_stamp()
        if read is None:
            raise _missing(driver)
        if not IndexStamp.is_stamped(read.metadata):
            raise _unstamped(driver)
        return _stamp_of(driver, read).contract


def terms_of(driver: Any) -> StoreTerms | None:
    """The words of ``driver``'s store adapter (its ``terms``), or ``None`` where it declares
    none: what every refusal that reaches a driver through core is worded in."""
    terms = getattr(driver, "terms", None)
    return terms if isinstance(terms, StoreTerms) else None


@contextlib.contextmanager
def _store_words(driver: StoreDriver) -> Iterator[None]:
    """Errors advise in the words of the driver's store adapter (its ``terms``, where it
    declares them), whichever path reached the driver: an alias, a migration, a framework."""
    with worded(terms_of(driver)):
        yield


_Call = TypeVar("_Call", bound=Callable[..., Any])


def _worded_by(driver_of: Callable[[Any], Any]) -> Callable[[_Call], _Call]:
    """A decorator: the call's refusals worded as :func:`_store_words` words an open's, in the
    terms of the driver ``driver_of(first argument)`` gives; they are read only when a ctxemb
    error passes (a query costs no more than its ``try``)."""

    def decorate(function: _Call) -> _Call:
        @functools.wraps(function)
        def call(first: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return function(first, *args, **kwargs)
            except CtxembError as exc:
                terms = terms_of(driver_of(first))
                if terms is not None:
                    exc.in_terms_of(terms)
                raise

        return cast(_Call, call)

    return decorate


#: A public call of an open :class:`GuardedIndex`; a function whose first argument is the driver.
_in_store_words = _worded_by(lambda index: index.driver)
_by_store_words = _worded_by(lambda driver: driver)


def _missing(driver: StoreDriver, why: str = "") -> InvalidInputError:
    # A driver may word the refusal in its store's terms (near names, the schema it looked in).
    worded = getattr(driver, "missing_error", None)
    error = worded(why) if callable(worded) else None
    if isinstance(error, InvalidInputError):
        return error
    return InvalidInputError(f"index {driver.name!r} does not exist in {driver.describe()}{why}")


def _gone(driver: StoreDriver) -> InvalidInputError:
    """An index dropped since it was opened (by another client, or around ctxemb)."""
    return InvalidInputError(f"index {driver.name!r} no longer exists in {driver.describe()}")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _key(driver: StoreDriver, read: StampRead, embedder: Embedder) -> dict[str, str]:
    # Identities, not names: the index's identity, the stamp and setting as stored, the
    # caller's contract and encoder files (ctxemb_core.verified.record_key).
    return record_key(
        driver.describe(),
        read.head.identity,
        embedder,
        stamp=_digest(IndexStamp.metadata_items(read.metadata)),
        storage=_digest(read.storage),
    )


#: The key of a store setting that says how the store embeds queries itself (a persisted
#: embedding function, as Chroma keeps one): ``{EMBEDDING_FUNCTION: name, "contract": dict}``.
EMBEDDING_FUNCTION = "embedding_function"


def _embeds_queries(driver: StoreDriver, stamp: IndexStamp) -> bool:
    return EMBEDDING_FUNCTION in (driver.storage_for(stamp) or {})


def _check_setting(driver: StoreDriver, read: StampRead, stamp: IndexStamp) -> None:
    """The store's own setting must be the one the stamp's contract needs: for a setting of how
    the store embeds queries itself (:data:`EMBEDDING_FUNCTION`) a
    :class:`~ctxemb_core.errors.ConfigurationMismatchError` naming the differing fields, for
    one of how it keeps vectors (a column's type, a space) a ``StorageMismatchError``."""
    expected = driver.storage_for(stamp)
    if expected is not None and EMBEDDING_FUNCTION in expected:
        stored = read.storage or {}
        check_configuration(stamp, stored.get(EMBEDDING_FUNCTION), stored.get("contract"))
    elif expected is not None:
        check_storage(
            f"index {driver.name!r}",
            dict(read.storage or {}),
            dict(expected),
            None,
            "Records written into it are not the contract's vectors: migrate the documents "
            "into a new index, or restore the store's setting.",
        )


def sample_records(driver: StoreDriver, size: int, count: int | None = None) -> list[Record]:
    """The newest half and a random half of ``size`` records, with vector and text
    (:func:`~ctxemb_core.guard.sample_ranges`): what an open, a verify and a detection read."""
    total = driver.count() if count is None else count
    out: list[Record] = []
    for start, stop in sample_ranges(total, size):
        out += driver.page(start, stop - start, _FOR_CHECK)
    return out


def _refuse(embedder: Embedder, records: Sequence[Record]) -> RecordCheck:
    return refuse_foreign(
        embedder, [r.id for r in records], [r.text for r in records], [r.vector for r in records]
    )


def _check_marked(
    driver: StoreDriver, read: StampRead, embedder: Embedder, sample: int
) -> OpenCheck:
    """The open-time check of a driver with a write mark: what was written since the last
    verified open, then random others (nothing when nothing was written).

    What it reads grows with what was written, never with the index: no id is listed, and the
    records are counted only for a sample (where a store counts by a scan, as PostgreSQL does).
    """
    mark = read.head.mark
    assert mark is not None
    key = _key(driver, read, embedder)
    verified = load_mark(key)
    count: int | None = None
    if verified is None or verified > mark:  # no record, or a store whose marks went back
        count = driver.count()
        records = sample_records(driver, sample, count)
        changed = None
        if verified is not None and mark == 0:
            # No mark now (a write in flight, or a store whose writes are no longer numbered,
            # which records none): what was written since the record still comes first, the
            # records the store always lists among it (PostgreSQL's rows without a vector).
            seen = {r.id for r in records}
            written = [i for i in driver.changes(verified) if i not in seen]
            if len(written) > sample:
                written = [i for a, b in sample_ranges(len(written), sample) for i in written[a:b]]
            records = driver.read(written, _FOR_CHECK) + records if written else records
    else:
        written = driver.changes(verified)  # after the head was read: nothing slips between
        changed = len(written)
        if not written:
            records = []
        elif len(written) > sample:
            chosen = [i for a, b in sample_ranges(len(written), sample) for i in written[a:b]]
            records = driver.read(chosen, _FOR_CHECK)
        else:
            records = driver.read(written, _FOR_CHECK)
            # Then random others, as one run of the store's order at a random place: of
            # ``sample`` neighbours at most len(written) were read already, so the sample is
            # full whenever the index has enough records.
            if sample > len(written):
                seen = set(written)
                run, count = _run_at_random(driver, sample)
                others = [r for r in run if r.id not in seen]
                records += others[: sample - len(written)]
    _refuse(embedder, records)
    if mark > 0:  # 0: a write in flight, or none yet; nothing to take up from (changes(0))
        save_mark(key, mark)  # only after every check passed
    return OpenCheck(count, len(records), changed)


def _run_at_random(driver: StoreDriver, size: int) -> tuple[list[Record], int | None]:
    """``size`` records in a row of the store's order from a random place (fewer only when the
    index holds fewer), and the count where one was needed. A driver that seeks
    (``capabilities.seeks``) goes to the place directly, the run continued from the start
    where it reaches the end; elsewhere the records are counted (a scan in PostgreSQL) and a
    page read at a random offset (a walk)."""
    if not driver.capabilities.seeks:
        count = driver.count()
        run = min(count, size)
        return driver.page(random.randrange(count - run + 1), run, _FOR_CHECK), count
    got = list(cast(SeekingDriver, driver).page_near(random.random(), size, _FOR_CHECK))
    if len(got) < size:
        have = {r.id for r in got}
        got += [r for r in driver.page(0, size - len(got), _FOR_CHECK) if r.id not in have]
    return got, None


def _check_listed(
    driver: StoreDriver, read: StampRead, embedder: Embedder, sample: int
) -> OpenCheck:
    """The open-time check of a driver without a mark: every id listed and compared with the
    verified state's (:func:`ctxemb_core.verified.plan_sample`). A driver that seals
    (``capabilities.seals``) lists its unproven records in the same read: they count as
    changed, and those that pass are sealed (after every check passed)."""
    sealing = cast(SealingDriver, driver) if driver.capabilities.seals else None
    if sealing is not None:
        ids, unproven = sealing.listed()
    else:
        ids, unproven = _all_ids(driver), []
    key = _key(driver, read, embedder)
    verified = load_verified(key) if len(ids) <= MAX_RECORDED else None
    chosen, changed = plan_sample(ids, verified, sample, unproven)
    records = driver.read(chosen, _FOR_CHECK) if chosen else []
    _refuse(embedder, records)
    if sealing is not None and unproven:
        pending = set(unproven)
        sealing.seal([r.id for r in records if r.id in pending])
    save_verified(key, ids)
    return OpenCheck(len(ids), len(chosen), changed)


def _all_ids(driver: StoreDriver) -> list[str]:
    out: list[str] = []
    before: list[str] = []  # a driver that ignores offset gives the same page again
    while True:
        got = driver.ids(len(out), PAGE)
        if got and got == before:
            raise InvalidInputError(
                f"driver {driver!r}: ids({len(out)}, {PAGE}) gave the page before again; "
                "a driver's ids must honour offset"
            )
        before = got
        out += got
        if len(got) < PAGE:
            return out


def _noted(driver: StoreDriver, exc: ContractMismatchError) -> None:
    """Add to ``exc`` what a driver knows of why its index is another contract's (its optional
    ``mismatch_note(caller)``: a Qdrant collection switched to another named vector, and the
    switch back), so a caller of the old contract learns the way back, not only the diff."""
    noting = getattr(driver, "mismatch_note", None)
    note = noting(exc.caller) if noting is not None and exc.caller is not None else None
    if note:
        exc.args = (f"{exc.problem.rstrip()}\n{note}. ", *exc.args[1:])


def _stamp_of(driver: StoreDriver, read: StampRead) -> IndexStamp:
    """The index's stamp, read; a damaged one refused naming the index, with the way back."""
    try:
        return IndexStamp.from_metadata(read.metadata)
    except DamagedStampError as exc:
        terms = terms_of(driver)
        kind = terms.kind if terms is not None else "index"
        raise DamagedStampError(
            f"{kind} {driver.name!r} in {driver.describe()}: {exc}. Nothing proves which "
            "contract made its vectors, so ctxemb neither reads nor writes it. An adoption "
            "replaces a damaged stamp as it stamps an index without one. ",
            remedies=unstamped_remedies(driver.name),
        ) from None


def _damaged(metadata: Any) -> bool:
    try:
        IndexStamp.from_metadata(metadata)
    except DamagedStampError:
        return True
    return False


def _unfinished(driver: StoreDriver, stamp: IndexStamp) -> UnfinishedCopyError:
    words = terms_of(driver)
    return UnfinishedCopyError(
        driver.name,
        stamp.copying or "",
        kind=words.kind if words else "index",
        call=f"{words.module}.migrate" if words else "ctxemb_core.index.migrate_index",
    )


def _verify_open(
    driver: StoreDriver,
    read: StampRead,
    embedder: Embedder,
    sample: int,
    repair: bool = False,
    finishing: str | None = None,
) -> tuple[IndexStamp, OpenCheck, StampRead]:
    """Every check of an existing index; its stamp, what was checked of its records and the
    read they were checked under. ``repair``: a query-embedding setting that disagrees with the
    stamp (:class:`~ctxemb_core.errors.ConfigurationMismatchError`) is written back from the
    stamp once the stamp and canary pass; a setting of how vectors are kept never is.
    ``finishing``: the copy (:attr:`IndexStamp.copying`) the caller is writing, which opens;
    any other unfinished copy is refused."""
    if not IndexStamp.is_stamped(read.metadata):
        raise _unstamped(driver)
    stamp = _stamp_of(driver, read)
    if stamp.copying is not None and stamp.copying != finishing:
        raise _unfinished(driver, stamp)
    try:
        stamp.verify(embedder)
    except ContractMismatchError as exc:
        _noted(driver, exc)
        raise
    try:
        _check_setting(driver, read, stamp)
    except ConfigurationMismatchError:
        if not repair:
            raise
        if not driver.write_stamp(stamp, stamp_version=read.head.stamp_version):
            raise StampMovedError(
                f"index {driver.name!r} changed while it was repaired; open it again"
            ) from None
        again = driver.read_stamp()
        if again is None:
            raise _missing(driver, ": it was dropped while it was repaired") from None
        read = again
        _check_setting(driver, read, stamp)
    if not sample:
        return stamp, OpenCheck(None, 0), read
    if driver.capabilities.marks and read.head.mark is not None:
        return stamp, _check_marked(driver, read, embedder, sample), read
    return stamp, _check_listed(driver, read, embedder, sample), read


def _adopt(driver: StoreDriver, read: StampRead, embedder: Embedder, sample: int) -> IndexStamp:
    """Stamp an unstamped index once a sample of its records proves it is this contract's."""
    count = driver.count()
    records = sample_records(driver, max(sample, 1), count)
    sampled = ([r.id for r in records], [r.text for r in records], [r.vector for r in records])
    stamp = adopt_stamp(embedder, sampled, count, driver.name)
    # A setting of how the store keeps vectors must already be the contract's; one of how it
    # embeds queries is written with the stamp.
    if read.storage is not None and not _embeds_queries(driver, stamp):
        _check_setting(driver, read, stamp)
    if not driver.write_stamp(stamp, stamp_version=read.head.stamp_version):
        raise StampMovedError(f"index {driver.name!r} changed while it was adopted; open it again")
    if driver.capabilities.seals:
        # What the adoption accepted, sealed as it is: a later write around ctxemb breaks a
        # seal, where it would not move a record that never had one.
        sealing = cast(SealingDriver, driver)
        sealing.seal(sealing.listed()[1])
    return stamp


class GuardedIndex:
    """An index in any store, bound to one contract; every call is checked before it runs.

    Every call reads the driver's head (one cheap read) and compares the index's identity and
    stamp version with what was verified: a change (a stamp replaced or removed, the store's
    setting changed, the index made again under its name) is verified again in full, or the
    call refused. Writes are all-or-nothing: the store's transaction where it has one, else a
    snapshot of the records put back exactly on failure or interrupt.

    Example:
        >>> from ctxemb_core.index import GuardedIndex, MemoryStore
        >>> docs = GuardedIndex.open(MemoryStore().driver("docs"), embedder)  # doctest: +SKIP
        >>> docs.sync(["d1"], ["Green tea is steamed."])                      # doctest: +SKIP
        SyncReport(added=('d1',), updated=(), unchanged=0, deleted=(), dry_run=False)
    """

    def __init__(
        self,
        driver: StoreDriver,
        embedder: Embedder,
        stamp: IndexStamp,
        head: Head,
        *,
        sample: int = OPEN_SAMPLE,
        open_check: OpenCheck | None = None,
        created: bool = False,
    ) -> None:
        self.driver = driver
        self.embedder = embedder
        self.stamp = stamp
        self.sample = sample
        #: What the last verification checked of the stored records (``None`` when this open
        #: created or adopted the index).
        self.open_check = open_check
        #: Whether this open made the index.
        self.created = created
        self._head = head
        self._queriers: list[Embedder] = [embedder]  # embedders whose canary this stamp passed
        #: The copy this object writes (its stamp's ``copying``), which it may open unfinished.
        self._finishing = stamp.copying

    # -- open ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        driver: StoreDriver,
        contract: EmbeddingContract | Embedder,
        *,
        create: bool = True,
        adopt: bool = False,
        repair: bool = False,
        sample: int = OPEN_SAMPLE,
        stamp: IndexStamp | None = None,
    ) -> GuardedIndex:
        """Create a stamped index, or open one and verify its stamp, setting and records.

        Args:
            driver: the store's driver for the index.
            contract: the caller's contract (or an :class:`~ctxemb_core.Embedder` of it).
            create: create the index (stamped in the same step) when it does not exist. Of two
                creators at once one makes it; the other opens it with every check.
            adopt: stamp an existing unstamped index, or one whose stamp is damaged, once a
                sample of its records re-embeds to their stored vectors.
            repair: write the store's query-embedding setting back from the stamp when it
                disagrees (a ``ConfigurationMismatchError`` otherwise), once stamp and canary
                pass; a setting of how vectors are kept is never repaired.
            sample: stored records re-embedded on open (0: stamp, canary and setting only).
            stamp: the stamp a new index gets instead of one made now (another index's of the
                same contract, carried with its vectors); it must pass its canary here. One that
                marks a copy being written (:meth:`IndexStamp.copy_of`, as a migration makes)
                also opens that copy unfinished, to take it up: every other open refuses it.

        Raises:
            ContractMismatchError: the index was written under another contract.
            EncoderDriftError: same contract, but the canary re-embeds to other vectors.
            ForeignVectorsError: sampled records this contract did not make.
            StorageMismatchError: the store's own setting is not the stamp's contract's.
            MissingStampError: an unstamped index, without ``adopt=True``.
            DamagedStampError: a stamp that cannot be read or contradicts itself.
            UnfinishedCopyError: a copy whose migration stopped before its last record.
            InvalidInputError: a bad argument, or no index with ``create=False``.
        """
        with _store_words(driver):
            check_driver(driver)
            embedder = as_embedder(contract)
            check_sample_size(sample)
            check_flag(create, "create")
            check_flag(adopt, "adopt")
            check_flag(repair, "repair")
            read = driver.read_stamp()
            if read is None:
                if not create:
                    raise _missing(driver, " (create=False)")
                if driver.name.startswith(OWN_PREFIX):  # where a store keeps alias records
                    raise InvalidInputError(
                        f"{driver.name!r}: names beginning {OWN_PREFIX!r} are ctxemb's own (the "
                        "records of aliases, in stores that keep them as indexes); give another"
                    )
                if stamp is None:
                    stamp = IndexStamp.from_embedder(embedder)
                else:
                    stamp.verify(embedder)
                if driver.create(stamp):
                    made = driver.head()
                    if made is None:
                        raise _missing(driver, ": it was dropped as soon as it was made")
                    return cls(driver, embedder, stamp, made, sample=sample, created=True)
                read = driver.read_stamp()  # another creator was first: open what it made
                if read is None:
                    raise _missing(driver, ": another client made and dropped it meanwhile")
            # A damaged stamp proves nothing either: adopting replaces it (sample first).
            if adopt and (not IndexStamp.is_stamped(read.metadata) or _damaged(read.metadata)):
                adopted = _adopt(driver, read, embedder, sample)
                head = driver.head() or read.head
                return cls(driver, embedder, adopted, head, sample=sample)
            finishing = None if stamp is None else stamp.copying
            verified, check, read = _verify_open(driver, read, embedder, sample, repair, finishing)
            return cls(driver, embedder, verified, read.head, sample=sample, open_check=check)

    # -- what the index is --------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.driver.name

    @property
    def contract(self) -> EmbeddingContract:
        return self.embedder.contract

    @property
    def verified_head(self) -> Head:
        """The head as last verified (a store's own one-statement check of a call compares its
        identity and stamp version, and calls :meth:`current` when they differ)."""
        return self._head

    @_in_store_words
    def current(self) -> Head:
        """The head now, proven to carry the stamp this object verified (or re-verified)."""
        head = self.driver.head()
        if head is None:
            raise _gone(self.driver)
        if (head.identity, head.stamp_version) == (
            self._head.identity,
            self._head.stamp_version,
        ):
            return head
        # Changed since it was verified (another client, a raw write to the stamp): whole.
        read = self.driver.read_stamp()
        if read is None:
            raise _gone(self.driver)
        self.stamp, self.open_check, read = _verify_open(
            self.driver, read, self.embedder, self.sample, finishing=self._finishing
        )
        self._head, self._queriers = read.head, [self.embedder]
        return read.head

    @_in_store_words
    def count(self) -> int:
        self.current()
        return self.driver.count()

    @_in_store_words
    def ids(self) -> list[str]:
        """Every id, in the store's order (oldest write first)."""
        self.current()
        return _all_ids(self.driver)

    @_in_store_words
    def finish_copy(self) -> None:
        """Stamp a copy this object wrote as whole (:func:`ctxemb_core.index.migrate_index`
        calls it after the last record): its stamp loses :attr:`IndexStamp.copying`, and the
        index opens for every caller. Nothing happens to an index that is no copy.

        Raises:
            StampMovedError: another client changed the stamp meanwhile (nothing written).
        """
        if self.stamp.copying is None:
            return
        head = self.current()
        done = self.stamp.finished()
        if not self.driver.write_stamp(done, stamp_version=head.stamp_version):
            raise StampMovedError(f"index {self.name!r} changed while its copy was finished")
        self.stamp, self._finishing = done, None

    # -- writing ------------------------------------------------------------------------

    def _checked(
        self, ids: Sequence[str], documents: Sequence[str], metadatas: Sequence[Any] | None
    ) -> tuple[list[str], list[Any] | None]:
        """The batch checked (:func:`~ctxemb_core.validate.check_records`), then by the store's
        own rules where its driver has them (``check_batch``: what the store would refuse only
        while writing), before anything is embedded or read."""
        checked, metas = check_records(ids, documents, metadatas)
        store_rules = getattr(self.driver, "check_batch", None)
        if callable(store_rules):
            store_rules(checked, documents, metas)
        return checked, metas

    @_in_store_words
    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Embed documents under the contract and write them, all or nothing.

        Raises:
            InvalidInputError: a bad batch (named); ExistingIdsError for ids already stored.
            IncompleteWriteError: a store without transactions failed, and so did the undo.
        """
        self._write(ids, documents, metadatas, replace=False)

    @_in_store_words
    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Like :meth:`add`, replacing the records of ids already stored (restored on error)."""
        self._write(ids, documents, metadatas, replace=True)

    @_in_store_words
    def add_embedded(
        self,
        ids: Sequence[str],
        vectors: Any,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        *,
        fingerprint: str,
        upsert: bool = False,
    ) -> None:
        """Write records a ctxemb embedder elsewhere embedded, refused unless ``fingerprint``
        is the stamp's contract's (for frameworks whose embedder and writer are two steps).

        Raises:
            ContractMismatchError: the vectors were made under another contract.
        """
        check_flag(upsert, "upsert")
        self._write(ids, documents, metadatas, replace=upsert, embedded=(vectors, fingerprint))

    def _write(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Any] | None,
        *,
        replace: bool,
        embedded: tuple[Any, str] | None = None,
    ) -> None:
        ids, metas_in = self._checked(ids, documents, metadatas)
        # Each record carries the digest of the text its vector is of (what a sync compares).
        metas = [
            with_text_digest(m, d, keep=embedded is not None)
            for m, d in zip(metas_in or [None] * len(ids), documents, strict=True)
        ]
        self.current()
        vectors = None
        if embedded is not None:
            check_fingerprint(embedded[1], self.stamp.contract)
            vectors = check_embedded(embedded[0], self.contract, ids)
        # Refused before anything is embedded; vectors given and written in one part, the
        # driver's write refuses them itself before writing anything (the protocol's add).
        one_part = len(ids) <= (self.driver.capabilities.max_batch or len(ids))
        if not replace and (vectors is None or not one_part):
            present = {r.id for r in self.driver.read(ids, _ID_ONLY)}
            if present:
                raise ExistingIdsError(tuple(i for i in ids if i in present))
        if vectors is None:
            vectors = storable(
                self.embedder.embed_documents(list(documents)), self.contract.precision
            )
        records = [
            Record(i, np.asarray(v, dtype=np.float32), d, m)
            for i, v, d, m in zip(ids, vectors, documents, metas, strict=True)
        ]
        self._guarded(lambda version: self._write_records(records, replace, version))

    def _guarded(self, call: Callable[[Version], Any]) -> Any:
        """Run a write under the stamp version verified; once more after a re-verification
        when the stamp moved in between (the new stamp must pass, or the write is refused)."""
        for attempt in range(2):
            try:
                return call(self._head.stamp_version)
            except StampMovedError:
                if attempt:
                    raise StampError(
                        f"the stamp of index {self.name!r} keeps changing while it is written to"
                    ) from None
                self.current()
        raise AssertionError("unreachable")

    def _parts(self, records: Sequence[Record]) -> list[Sequence[Record]]:
        step = self.driver.capabilities.max_batch or max(1, len(records))
        return [records[k : k + step] for k in range(0, len(records), step)]

    def _write_records(self, records: list[Record], replace: bool, version: Version) -> None:
        parts = self._parts(records)
        if self.driver.capabilities.transactions and len(parts) == 1:
            self.driver.write(records, replace=replace, stamp_version=version)
            return
        ids = [r.id for r in records]
        # An add needs no read to be undone: the driver writes a part only when it holds none
        # of its ids (ExistingIdsError otherwise), so undoing it is deleting what was written.
        before = self.driver.read(ids, INCLUDE) if replace else []
        # The ids a failed write may have changed: the parts written, and the part that failed
        # unless the driver refused it whole (ids stored meanwhile, the stamp moved). Only those
        # are put back: an id another writer stored meanwhile in a later part stays its.
        touched: list[str] = []

        def write() -> None:
            for part in parts:
                try:
                    self.driver.write(part, replace=replace, stamp_version=version)
                except (ExistingIdsError, StampMovedError):
                    raise
                except BaseException:
                    touched.extend(r.id for r in part)
                    raise
                touched.extend(r.id for r in part)

        undoable_write(write, lambda: self._restore(touched, before), ids)

    def _restore(self, ids: list[str], before: list[Record]) -> None:
        """Put the records of ``ids`` back as ``before`` holds them (new ids deleted)."""
        chosen = set(ids)
        old = [r for r in before if r.id in chosen]
        kept = {r.id for r in old}
        new = [i for i in ids if i not in kept]
        if new:
            self.driver.delete(new)
        for part in self._parts(old):
            self.driver.write(part, replace=True)

    @_in_store_words
    def add_missing(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> int:
        """Add the records whose ids the index lacks; returns how many this call added."""
        ids, metas = self._checked(ids, documents, metadatas)
        return add_missing(self._present, self.add, ids, documents, metas)

    def _present(self, ids: list[str]) -> set[str]:
        self.current()
        return {r.id for r in self.driver.read(ids, _ID_ONLY)}

    @_in_store_words
    def sync(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> SyncReport:
        """Index a batch as a sync: embed and write only what is new or whose text changed
        (the rules: :mod:`ctxemb_core.sync`); ``dry_run`` embeds and writes nothing."""
        check_flag(dry_run, "dry_run")
        ids, metas = self._checked(ids, documents, metadatas)
        return sync_batch(
            self._stored, self.upsert, ids, documents, metas, dry_run=dry_run, progress=progress
        )

    def _stored(self, ids: list[str]) -> dict[str, tuple[str | None, Any]]:
        # The metadata of the stored ones; the text only of those without a text digest.
        self.current()
        metas = {r.id: r.metadata for r in self.driver.read(ids, _ONLY_META)}
        legacy = [i for i, m in metas.items() if not (m or {}).get(TEXT_KEY)]
        texts = {r.id: r.text for r in self.driver.read(legacy, _ONLY_TEXT)} if legacy else {}
        return {i: (texts.get(i), m) for i, m in metas.items()}

    @_in_store_words
    def delete(self, ids: Sequence[str] | None = None, *, where: Filter | None = None) -> list[str]:
        """Delete records by id, by filter, or both (a record must match both); returns the ids
        deleted. An empty filter is refused, never read as "everything"."""
        checked, given = check_delete(ids, {"where": where})
        self.check_filter(given.get("where"))
        self.current()
        return list(
            self._guarded(
                lambda version: self.driver.delete(
                    checked, where=given.get("where"), stamp_version=version
                )
            )
        )

    @_in_store_words
    def delete_missing(self, keep: Iterable[str], *, dry_run: bool = False) -> list[str]:
        """Delete the records whose ids are not in ``keep`` (a corpus's ids); returns them."""
        check_flag(dry_run, "dry_run")
        gone = missing_ids(self.ids(), keep)
        if not dry_run:
            step = self.driver.capabilities.max_batch or PAGE
            for start in range(0, len(gone), step):
                self.delete(gone[start : start + step])
        return gone

    # -- reading ------------------------------------------------------------------------

    @_in_store_words
    def check_filter(self, where: Any) -> None:
        """``where`` if this index's driver can filter by it (``None``: no filter), else named."""
        if where is None:
            return
        if not isinstance(where, Mapping) or not where:
            raise InvalidInputError(f"where must be a non-empty filter mapping, got {where!r}")
        if not self.driver.capabilities.filters:
            raise InvalidInputError(
                f"index {self.name!r}: its store cannot filter (capabilities.filters); "
                "query without where="
            )

    @_in_store_words
    def get(
        self, ids: Sequence[str], include: Iterable[str] = ("text", "metadata")
    ) -> list[Record]:
        """The stored ones of ``ids`` (in the order given), after the stamp is checked;
        ``include`` names the parts: ``vector``, ``text``, ``metadata``."""
        checked = check_ids(ids)
        parts = _include(include)
        self.current()
        return self.driver.read(checked, parts)

    @_in_store_words
    def page(
        self, offset: int = 0, limit: int = PAGE, include: Iterable[str] = ("text", "metadata")
    ) -> list[Record]:
        """Records in the store's order (oldest write first), after the stamp is checked."""
        check_count(offset, "offset", 0)
        check_count(limit, "limit", 0)
        parts = _include(include)
        self.current()
        return self.driver.page(offset, limit, parts)

    @_in_store_words
    def query(
        self,
        query_texts: Sequence[str] | str,
        n_results: int = 10,
        *,
        embedder: Embedder | None = None,
        where: Filter | None = None,
    ) -> list[list[Match]]:
        """Embed queries under the contract (query role) and search; checked before it runs.

        ``embedder``: a caller's own embedder, whose contract must be the index's (its canary
        is re-embedded once). Returns one list of :class:`Match` per query, nearest first.

        Raises:
            ContractMismatchError: ``embedder``'s contract is not the index's.
            ForeignVectorsError: the search met records stored without a usable vector.
        """
        check_count(n_results, "n_results")
        self.check_filter(where)
        vectors, head = self._query_vectors(query_texts, embedder)
        return [self._search(v, n_results, where, head) for v in vectors]

    @_in_store_words
    def query_vectors(
        self,
        query_texts: Sequence[str] | str,
        *,
        embedder: Embedder | None = None,
        read_head: bool = True,
    ) -> np.ndarray:
        """The query vectors :meth:`query` searches with, after the same checks: for a search
        in the store's own terms (its filter language, its result shape) by an adapter.

        ``read_head=False`` leaves out the head read before embedding, for a store whose search
        reads the stamp version in the search's own snapshot and compares it with
        :attr:`verified_head` (on a change it calls :meth:`current` and searches again), so
        that a query costs one round trip; the embedder's contract and canary are checked
        against the verified stamp either way.

        Raises:
            ContractMismatchError: ``embedder``'s contract is not the index's.
        """
        return self._query_vectors(query_texts, embedder, read_head=read_head)[0]

    def _query_vectors(
        self, query_texts: Sequence[str] | str, embedder: Embedder | None, read_head: bool = True
    ) -> tuple[np.ndarray, Head]:
        querier = check_querier(embedder) or self.embedder
        if isinstance(query_texts, str):
            query_texts = [query_texts]
        elif not isinstance(query_texts, Sequence):
            raise InvalidInputError(
                f"query_texts must be a list of texts, got {type(query_texts).__name__}"
            )
        head = self.current() if check_flag(read_head, "read_head") else self._head
        check_querier_canary(self.stamp, querier, self._queriers)
        vectors = storable(querier.embed_queries(list(query_texts)), querier.contract.precision)
        return vectors, head

    @_in_store_words
    def query_vector(
        self,
        vector: Any,
        n_results: int = 10,
        *,
        fingerprint: str,
        where: Filter | None = None,
    ) -> list[Match]:
        """Search with a query vector embedded elsewhere under ``fingerprint``'s contract,
        checked first: the fingerprint must be the stamp's, the vector one finite row of the
        contract's width."""
        check_count(n_results, "n_results")
        self.check_filter(where)
        head = self.current()
        check_fingerprint(fingerprint, self.stamp.contract)
        row = check_query_vector(vector, self.contract.output_dim, contract=self.contract)
        return self._search(np.asarray(row, dtype=np.float32), n_results, where, head)

    def _search(self, vector: np.ndarray, k: int, where: Filter | None, head: Head) -> list[Match]:
        hits = self.driver.search(vector, k, where=where)[:k]  # at most k, whatever it gave
        refuse_vectorless([h.id for h in hits if h.distance is None], len(hits))
        scores = similarity([h.distance for h in hits], head.space, self.contract)
        return [
            Match(h.id, float(s), h.record.text, h.record.metadata)
            for h, s in zip(hits, scores, strict=True)
        ]

    # -- verify -------------------------------------------------------------------------

    @_in_store_words
    def verify(
        self, *, all: bool = False, sample: int | None = None, progress: bool | None = None
    ) -> VerifyReport:
        """Every check, reported instead of raised: the stamp, the canary, the store's setting
        and stored records (a sample, or ``all`` of them page by page)."""
        return verify_driver(
            self.driver,
            self.embedder,
            all=all,
            sample=self.sample if sample is None else sample,
            progress=progress,
        )


@_by_store_words
def verify_driver(
    driver: StoreDriver,
    contract: EmbeddingContract | Embedder,
    *,
    all: bool = False,
    sample: int = OPEN_SAMPLE,
    progress: bool | None = None,
) -> VerifyReport:
    """:meth:`GuardedIndex.verify` for an index not opened (it may be damaged or unstamped);
    ``progress``: draw a bar while ``all`` records are checked (``None``: as the embedder's
    ``show_progress`` says); ``sample=0`` checks the stamp, canary and setting only."""
    check_driver(driver)
    embedder = as_embedder(contract)
    check_flag(all, "all")
    check_sample_size(sample)
    if progress is not None:
        check_flag(progress, "progress")
    read = driver.read_stamp()
    if read is None:
        raise _missing(driver)
    count = driver.count()
    result: RecordCheck | None = None  # sample=0: stamp, canary and setting only
    if all:
        result = RecordCheck()
        with records_progress(count, progress, embedder) as bar:
            for start in range(0, count, PAGE):
                page = driver.page(start, PAGE, _FOR_CHECK)
                result = result.merge(
                    check_stored(
                        embedder,
                        [r.id for r in page],
                        [r.text for r in page],
                        [r.vector for r in page],
                    )
                )
                bar.update(len(page))
    elif sample:
        page = sample_records(driver, sample, count)
        result = check_stored(
            embedder, [r.id for r in page], [r.text for r in page], [r.vector for r in page]
        )
    mode = "all" if all else ("sample" if sample else "none")
    report = verify_index(read.metadata, embedder, result, records=count, mode=mode)
    setting = None
    if report.stamped and report.damaged is None:
        try:
            stamp = IndexStamp.from_metadata(read.metadata)
            if driver.storage_for(stamp) is not None:
                _check_setting(driver, read, stamp)
                setting = "match"
        except ConfigurationMismatchError as exc:
            setting = exc.detail
        except StorageMismatchError as exc:
            setting = str(exc)
    return replace(report, configuration=setting)


@_by_store_words
def restamp_index(
    driver: StoreDriver,
    contract: EmbeddingContract | Embedder,
    *,
    embedder: Embedder | None = None,
) -> RestampReport:
    """Let an index accept ``contract`` where its stored document vectors stay valid (a query
    side change, the model's name over the same weights): :func:`ctxemb_core.guard.restamp_stamp`
    decides, the driver writes the new stamp. A re-embed is refused, nothing written.

    ``embedder``: the one that computes the new canary (another backend, say); its contract
    must be ``contract``.

    Raises:
        ContractMismatchError: the change needs the documents re-embedded.
        EncoderDriftError: the embedder does not reproduce the stored canary.
        InvalidInputError: an ``embedder`` of another contract.
    """
    check_driver(driver)
    chosen = as_embedder(contract)
    given = check_querier(embedder)
    if given is not None and not same_contract(chosen.contract, given.contract, exact=True):
        raise InvalidInputError(
            "embedder must embed under the contract being stamped; its contract differs in "
            f"{chosen.contract.diff(given.contract)}"
        )
    read = driver.read_stamp()
    if read is None:
        raise _missing(driver)
    if not IndexStamp.is_stamped(read.metadata):
        raise _unstamped(driver)
    stamped = _stamp_of(driver, read)
    if stamped.copying is not None:  # a new stamp would pass the half copy off as whole
        raise _unfinished(driver, stamped)
    new, report = restamp_stamp(stamped, given or chosen)
    if report.changed and not driver.write_stamp(new, stamp_version=read.head.stamp_version):
        raise StampMovedError(f"index {driver.name!r} changed while it was re-stamped; try again")
    return report
