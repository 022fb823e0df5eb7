"""The store driver protocol: the few primitives a vector store offers the guard.

A store becomes one ctxemb guards by implementing :class:`StoreDriver` for one index (a Chroma
collection, a PostgreSQL table, an in-memory dict). The driver moves records and metadata; it
decides nothing. Every decision — stamped or not, which contract, whether the stored vectors are
this contract's, what a sync writes — is made once, by
:class:`~ctxemb_core.index.guarded.GuardedIndex`, over any driver.

What a driver promises, primitive by primitive (the conformance suite,
:mod:`ctxemb_core.testing.conformance`, checks each one):

- **create with the stamp, atomically** (:meth:`StoreDriver.create`): the index and its stamp
  appear together, no unstamped window; of two creators at once, one makes the index and the
  other is told it exists (``False``), never a second index.
- **the head** (:meth:`StoreDriver.head`): one cheap read of what the index *is* (an identity
  that a drop and a create under the same name changes: a creation nonce, an oid, a collection
  id), the stamp's version (changes whenever the stamp or the store's own setting does, by
  any client) and the write mark (below). The guard reads it on every call.
- **the write mark** (``Head.mark`` and :meth:`StoreDriver.changes`, capability ``marks``): a
  number the store raises on every record written, by ctxemb or around it (a trigger, a
  sequence): ``changes(mark)`` lists the ids written after ``mark``, in O(those) and not
  O(index). An open then re-checks only what was written since the last verified open, at any
  size. A driver must never let a write committed after it returned a mark be missing from
  ``changes(mark)`` (a transaction that took its number earlier and committed later included).
  Without marks, the guard lists every id on open, as before (:mod:`ctxemb_core.verified`).
- **records** by id (:meth:`~StoreDriver.read`) or by page (:meth:`~StoreDriver.page`) in the
  store's order, *oldest write first*: the newest records (where writes around ctxemb land) are
  the last page, which the open-time sample always draws. A store that keeps a record where it
  was when it is updated in place (Chroma) gives its own order; without a write mark, such an
  update around ctxemb is then found by the random half of the sample only
  (:func:`ctxemb_core.guard.detection_probability`), as :mod:`ctxemb_core.verified` says.
- **write a batch all-or-nothing** (:meth:`~StoreDriver.write`): with capability
  ``transactions`` the driver guarantees it; without, the guard snapshots the records first
  and undoes a failed write through :meth:`~StoreDriver.write` and :meth:`~StoreDriver.delete`
  (:func:`ctxemb_core.guard.undoable_write`). ``replace=False`` refuses ids already stored.
  ``stamp_version``: the write (or delete) is refused with :class:`StampMovedError` if the
  stamp changed since the guard checked it (in the same transaction, where there is one).
- **search by vector with a filter** (:meth:`~StoreDriver.search`): nearest first, each hit's
  distance in the driver's space (``Head.space``: ``cosine`` 1 - cos, ``ip`` 1 - dot, ``l2``
  squared Euclidean), as :func:`ctxemb_core.guard.similarity` reads it. A record met without a
  stored vector is returned with ``distance=None``: the guard refuses it, never ranks it.
- **filters** are one neutral form: ``{metadata key: value}``, every pair must hold. A driver
  without capability ``filters`` is never given one (the guard refuses the call).

Example:
    >>> from ctxemb_core.index import GuardedIndex, MemoryStore
    >>> docs = GuardedIndex.open(MemoryStore().driver("docs"), embedder)  # doctest: +SKIP
    >>> docs.add(["d1"], ["Green tea is steamed."])                       # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

# StampMovedError lives in the error tree; named here too, where drivers import it.
from ctxemb_core.errors import StampMovedError

if TYPE_CHECKING:
    from ctxemb_core.stamp import IndexStamp

__all__ = [
    "INCLUDE",
    "SPACES",
    "Capabilities",
    "Filter",
    "Head",
    "Hit",
    "Record",
    "SealingDriver",
    "SeekingDriver",
    "StampMovedError",
    "StampRead",
    "StoreDriver",
    "Version",
    "default_space",
]

#: What a read may include besides the id.
INCLUDE = frozenset({"vector", "text", "metadata"})
#: The distance spaces a driver may search in (see :func:`ctxemb_core.guard.similarity`).
SPACES = ("cosine", "ip", "l2")

#: A filter: ``{metadata key: value}``, a record matches when every pair holds.
Filter = Mapping[str, Any]
#: A stamp version: any value that changes when the stamp or the store's setting does (a
#: counter a trigger raises, or a digest of what the store returns with the index).
Version = int | str


@dataclass(frozen=True)
class Capabilities:
    """What a driver offers beyond the primitives every driver has.

    Attributes:
        transactions: :meth:`StoreDriver.write` and :meth:`StoreDriver.delete` are
            all-or-nothing by themselves (a failure or an interrupt leaves nothing written).
            Without, the guard snapshots the records and undoes a failed write.
        marks: the store keeps a write mark (``Head.mark``, :meth:`StoreDriver.changes`);
            opens cost O(records written since the last verified open).
        filters: :meth:`StoreDriver.search` and :meth:`StoreDriver.delete` take ``where``.
        aliases: the store can bind a stable name to an index and switch it atomically
            (for a model upgrade without downtime; nothing uses it yet).
        max_batch: the most records one :meth:`StoreDriver.write` takes (``None``: no limit);
            the guard splits larger batches (each part all-or-nothing).
        seeks: the driver has ``page_near(fraction, limit, include) -> list[Record]``: up to
            ``limit`` records in the store's order from about ``fraction`` (0 to 1) of the way
            through it, found without walking the order to get there (an index's seek), so
            the random records an open reads beside what was written cost the same at any
            size; ``page_near(0.0, n, ...)`` is ``page(0, n, ...)``. Without, the guard counts
            the records and reads a page at a random offset (a walk in stores that page by
            offset, PostgreSQL's and SQLite's).
        seals: the store keeps no write mark and no order of its own, but a seal in each record
            (:func:`~ctxemb_core.index.driver_kit.sealed`), and the driver has ``listed() ->
            tuple[list[str], list[str]]``: every id in the store's order and those whose seal
            does not hold (written around the driver: each is checked on every open until it
            is proven), in one read; and ``seal(ids) -> list[str]``: those records sealed as
            they are now (once an open proved them, or an adoption accepted them), the ids it
            sealed (a record it cannot seal stays unproven).
    """

    transactions: bool = False
    marks: bool = False
    filters: bool = False
    aliases: bool = False
    max_batch: int | None = None
    seeks: bool = False
    seals: bool = False


@dataclass(frozen=True)
class Head:
    """The cheap read the guard makes on every call.

    Attributes:
        identity: what the index *is* in the store (a creation nonce, an oid, a collection's
            id): an index dropped and made again under its name has another.
        stamp_version: changes whenever the index's metadata (its stamp) or the store's own
            setting (``StampRead.storage``) changes, whoever changes it.
        mark: the write mark: raised by every record written (``None``: the driver keeps none).
        space: the distance :meth:`StoreDriver.search` reports.
    """

    identity: str
    stamp_version: Version
    mark: int | None = None
    space: str = "cosine"


@dataclass(frozen=True)
class StampRead:
    """The index's metadata and the store's own setting, read together with the head.

    Attributes:
        head: the head at the time of this read.
        metadata: the index's metadata: the stamp's ``ctxemb:*`` keys and any others
            (``None``/empty: unstamped).
        storage: the store's own persisted setting that must agree with the stamp (a
            column's type, an embedding function's name and contract), or ``None`` where the
            store has none; compared with :meth:`StoreDriver.storage_for`. A store that embeds
            queries itself with a persisted function (Chroma) gives ``{"embedding_function":
            name, "contract": dict}``: a disagreement is then a ``ConfigurationMismatchError``
            (what its raw clients would embed queries with), which ``repair=True`` writes back
            and an adoption writes with the stamp; any other setting (how vectors are kept) a
            ``StorageMismatchError``, never repaired.
    """

    head: Head
    metadata: Mapping[str, Any] | None
    storage: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Record:
    """One stored record: id, vector, text and metadata (absent parts are ``None``).

    The text digest a sync compares travels in ``metadata`` under
    :data:`ctxemb_core.documents.TEXT_KEY`.
    """

    id: str
    vector: np.ndarray | None = None
    text: str | None = None
    metadata: Mapping[str, Any] | None = None

    def __init__(
        self,
        id: str,
        vector: np.ndarray | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        # The fields written straight into the instance: what the frozen dataclass's own
        # __init__ does through object.__setattr__ once a field, at half the cost (a search
        # builds a record per hit). Still frozen: assigning a field raises as before.
        fields = self.__dict__
        fields["id"] = id
        fields["vector"] = vector
        fields["text"] = text
        fields["metadata"] = metadata


@dataclass(frozen=True)
class Hit:
    """One search result: the record and its distance (``None``: stored without a vector)."""

    record: Record
    distance: float | None

    @property
    def id(self) -> str:
        return self.record.id


@runtime_checkable
class StoreDriver(Protocol):
    """One index in one store, as the guard sees it (see the module's docstring).

    Every method may raise :class:`~ctxemb_core.errors.StoreUnavailableError` when the store
    cannot be reached; a driver translates its client's errors into ctxemb's tree.
    """

    #: What this driver offers beyond the primitives.
    capabilities: Capabilities

    @property
    def name(self) -> str:
        """The index's name in the store (for messages)."""
        ...

    def describe(self) -> str:
        """Which store this is (an embedded folder, a server's address, ``memory:<id>``): part
        of the verified-open record's key, never a password."""
        ...

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        """The store's own setting a ``stamp``'s contract needs (``None``: the store has none)."""
        ...

    def create(self, stamp: IndexStamp) -> bool:
        """Create the index carrying ``stamp`` in the same atomic step; ``False`` when an index
        of that name exists (made by another creator, maybe a moment ago): nothing is made."""
        ...

    def head(self) -> Head | None:
        """The index's head, or ``None`` when there is no index of this name."""
        ...

    def read_stamp(self) -> StampRead | None:
        """The head, metadata and storage setting in one consistent read (``None``: no index)."""
        ...

    def write_stamp(self, stamp: IndexStamp, *, stamp_version: Version) -> bool:
        """Replace the index's stamp (adopt, re-stamp) and set the store's own setting to
        :meth:`storage_for`, keeping other metadata; ``False`` (nothing written) when the stamp
        version is no longer ``stamp_version``."""
        ...

    def count(self) -> int:
        """How many records the index holds."""
        ...

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        """Ids in the store's order (oldest write first), a page of them."""
        ...

    def page(self, offset: int, limit: int, include: frozenset[str] = INCLUDE) -> list[Record]:
        """Records in the store's order (oldest write first), with the parts in ``include``."""
        ...

    def read(self, ids: Sequence[str], include: frozenset[str] = INCLUDE) -> list[Record]:
        """The stored ones of ``ids``, in the order given (absent ids left out)."""
        ...

    def changes(self, since: int) -> list[str]:
        """Ids of the records written after mark ``since``, oldest first (capability
        ``marks``); a record written several times is listed once."""
        ...

    def write(
        self, records: Sequence[Record], *, replace: bool, stamp_version: Version | None = None
    ) -> None:
        """Write records whole (vector, text and metadata replace what an id held).

        Raises:
            ExistingIdsError: ``replace=False`` and some ids are stored; nothing written.
            StampMovedError: the stamp version is no longer ``stamp_version``.
        """
        ...

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Filter | None = None,
        stamp_version: Version | None = None,
    ) -> list[str]:
        """Delete records by id and/or filter (both: a record must match both); returns the
        ids deleted. Raises :class:`StampMovedError` as :meth:`write` does."""
        ...

    def search(self, vector: np.ndarray, k: int, *, where: Filter | None = None) -> list[Hit]:
        """The ``k`` nearest records to ``vector`` (matching ``where``), nearest first."""
        ...


class SeekingDriver(StoreDriver, Protocol):
    """A driver whose ``capabilities.seeks`` is set: it has :meth:`page_near`."""

    def page_near(
        self, fraction: float, limit: int, include: frozenset[str] = INCLUDE
    ) -> list[Record]:
        """Up to ``limit`` records in the store's order from about ``fraction`` (0 to 1) of the
        way through it, found without walking the order (``Capabilities.seeks``)."""
        ...


class SealingDriver(StoreDriver, Protocol):
    """A driver whose ``capabilities.seals`` is set: it has :meth:`listed` and :meth:`seal`."""

    def listed(self) -> tuple[list[str], list[str]]:
        """Every id in the store's order, and those whose seal does not hold, in one read."""
        ...

    def seal(self, ids: Sequence[str]) -> list[str]:
        """Seal the records of ``ids`` as they are now; the ids it sealed."""
        ...


def default_space(contract: Any) -> str:
    """The space a contract's vectors are searched in: ``cosine`` for a normalised contract
    (on unit vectors every space ranks alike), ``ip`` otherwise (what its vectors are for)."""
    return "cosine" if contract.normalize else "ip"
