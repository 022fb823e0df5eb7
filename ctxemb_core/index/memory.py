"""The reference driver: indexes held in memory, every primitive of the protocol honoured.

Small on purpose: it is the example "How to add a store" (``docs/architecture.md``) is built
on, and the driver the conformance suite is first proven against. A :class:`MemoryStore` holds
named indexes; :meth:`MemoryStore.driver` gives a :class:`MemoryDriver` (the protocol, for the
guard) and :meth:`MemoryStore.raw` a :class:`RawMemoryClient` (a user's own client, which writes
around the guard: what a test uses to tamper).

How each promise is kept:

- one lock per store: every primitive is one critical section, so a batch is applied whole
  (``transactions=True``) and two creators cannot both create;
- the write mark is a counter every record write takes a fresh value of, raw writes included
  (as a trigger would); records are kept in the order of their last write, so
  :meth:`MemoryDriver.changes` walks back from the newest and stops at the mark;
- ``transactions=False`` and ``marks=False`` make a driver of a weaker store (Chroma has
  neither), so the guard's undo and its id-list open are proven on the same code.

Example:
    >>> store = MemoryStore()
    >>> driver = store.driver("docs")
    >>> driver.head() is None
    True
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxemb_core.errors import InvalidInputError, StoreUnavailableError
from ctxemb_core.index.driver import (
    INCLUDE,
    SPACES,
    Capabilities,
    Filter,
    Head,
    Hit,
    Record,
    StampRead,
    Version,
    default_space,
)
from ctxemb_core.index.driver_kit import KeyedDriver, restamped
from ctxemb_core.undo import deferred_interrupts

if TYPE_CHECKING:
    from ctxemb_core.stamp import IndexStamp

__all__ = ["MemoryDriver", "MemoryStore", "RawMemoryClient"]


@dataclass
class _Stored:
    vector: np.ndarray | None
    text: str | None
    metadata: dict[str, Any] | None
    seq: int


@dataclass
class _Index:
    identity: str
    metadata: dict[str, Any]
    #: The store's own setting: the distance it searches by (what the stamp's contract needs).
    space: str
    stamp_version: int
    #: Records in the order of their last write (a write moves a record to the end).
    records: OrderedDict[str, _Stored] = field(default_factory=OrderedDict)
    mark: int = 0
    order: list[str] | None = None  # the ids in order, rebuilt after a write

    def ordered(self) -> list[str]:
        if self.order is None:
            self.order = list(self.records)
        return self.order

    def put(self, record_id: str, stored: _Stored) -> None:
        self.records[record_id] = stored
        self.records.move_to_end(record_id)
        self.order = None


class _Failing:
    """An armed failure: the store's next writes fail after ``after`` more records."""

    def __init__(self, after: int, error: BaseException) -> None:
        self.left = after
        self.error = error

    def tick(self) -> None:
        if self.left <= 0:
            raise self.error
        self.left -= 1


class MemoryStore:
    """Named in-memory indexes behind one lock (a store; its drivers are handles onto it).

    Example:
        >>> store = MemoryStore()
        >>> store.raw("docs").create({"hnsw:space": "cosine"})  # an unstamped index
        >>> sorted(store.names())
        ['docs']
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.indexes: dict[str, _Index] = {}
        self.failing: _Failing | None = None
        self._versions = itertools.count(1)
        self.id = uuid.uuid4().hex[:12]

    def names(self) -> list[str]:
        with self.lock:
            return list(self.indexes)

    def driver(
        self,
        name: str,
        *,
        transactions: bool = True,
        marks: bool = True,
        filters: bool = True,
        max_batch: int | None = None,
        seeks: bool = False,
    ) -> MemoryDriver:
        """A driver for index ``name``; the flags make it behave as a weaker store would (or,
        ``seeks``, show the optional ``page_near``)."""
        return MemoryDriver(
            self,
            name,
            Capabilities(
                transactions=transactions,
                marks=marks,
                filters=filters,
                max_batch=max_batch,
                seeks=seeks,
            ),
        )

    def raw(self, name: str) -> RawMemoryClient:
        """A client of index ``name`` that goes around the guard (for tests)."""
        return RawMemoryClient(self, name)

    def next_version(self) -> int:
        return next(self._versions)

    def get(self, name: str) -> _Index:
        index = self.indexes.get(name)
        if index is None:
            raise InvalidInputError(f"index {name!r} does not exist in memory store {self.id}")
        return index

    def tick(self) -> None:
        """One record is about to reach the store: an armed failure may fire here."""
        if self.failing is not None:
            try:
                self.failing.tick()
            except BaseException:
                self.failing = None
                raise


def _copy(record_id: str, stored: _Stored, include: frozenset[str]) -> Record:
    return Record(
        record_id,
        None if "vector" not in include or stored.vector is None else stored.vector.copy(),
        stored.text if "text" in include else None,
        dict(stored.metadata) if "metadata" in include and stored.metadata is not None else None,
    )


def _matches(metadata: Mapping[str, Any] | None, where: Filter | None) -> bool:
    if where is None:
        return True
    meta = metadata or {}
    return all(k in meta and meta[k] == v for k, v in where.items())


def _as_stored(record: Record, seq: int) -> _Stored:
    vector = None if record.vector is None else np.array(record.vector, dtype=np.float32)
    meta = None if record.metadata is None else dict(record.metadata)
    return _Stored(vector, record.text, meta, seq)


class MemoryDriver(KeyedDriver[_Index]):
    """The :class:`~ctxemb_core.index.driver.StoreDriver` of one index in a :class:`MemoryStore`.

    Example:
        >>> from ctxemb_core.index import GuardedIndex
        >>> docs = GuardedIndex.open(MemoryStore().driver("docs"), embedder)  # doctest: +SKIP
    """

    def __init__(self, store: MemoryStore, name: str, capabilities: Capabilities) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"an index name must be a non-empty string, got {name!r}")
        self.store = store
        self._name = name
        self.capabilities = capabilities

    def __repr__(self) -> str:
        return f"MemoryDriver({self._name!r}, store={self.store.id})"

    def describe(self) -> str:
        return f"memory:{self.store.id}"

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        return {"space": default_space(stamp.contract)}

    # -- the index and its stamp ------------------------------------------------------------

    def _exists(self) -> bool:
        return self._name in self.store.indexes

    def _create(self, stamp: IndexStamp) -> None:
        store = self.store
        store.indexes[self._name] = _Index(
            uuid.uuid4().hex,
            dict(stamp.to_metadata()),
            default_space(stamp.contract),
            store.next_version(),
        )

    def head(self) -> Head | None:
        with self.store.lock:
            index = self.store.indexes.get(self._name)
            if index is None:
                return None
            mark = index.mark if self.capabilities.marks else None
            return Head(index.identity, index.stamp_version, mark, index.space)

    def read_stamp(self) -> StampRead | None:
        with self.store.lock:
            head = self.head()
            if head is None:
                return None
            index = self.store.indexes[self._name]
            return StampRead(head, dict(index.metadata), {"space": index.space})

    def write_stamp(self, stamp: IndexStamp, *, stamp_version: Version) -> bool:
        store = self.store
        with store.lock:
            index = store.get(self._name)
            if index.stamp_version != stamp_version:
                return False
            index.metadata = restamped(index.metadata, stamp)
            index.space = default_space(stamp.contract)
            index.stamp_version = store.next_version()
            return True

    # -- reading ----------------------------------------------------------------------------

    def count(self) -> int:
        with self.store.lock:
            return len(self.store.get(self._name).records)

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        with self.store.lock:
            order = self.store.get(self._name).ordered()
            return order[offset : None if limit is None else offset + limit]

    def page(self, offset: int, limit: int, include: frozenset[str] = INCLUDE) -> list[Record]:
        with self.store.lock:
            index = self.store.get(self._name)
            chosen = index.ordered()[offset : offset + limit]
            return [_copy(i, index.records[i], include) for i in chosen]

    def page_near(
        self, fraction: float, limit: int, include: frozenset[str] = INCLUDE
    ) -> list[Record]:
        """A page from about ``fraction`` of the way through the order (``Capabilities.seeks``;
        here to show the call: the reference's order is a list, the place an index into it)."""
        with self.store.lock:
            count = len(self.store.get(self._name).records)
            return self.page(min(count, int(fraction * count)), limit, include)

    # -- the primitives :class:`~ctxemb_core.index.driver_kit.KeyedDriver` writes through ---

    def _exclusive(self) -> contextlib.AbstractContextManager[Any]:
        return self.store.lock

    def _handle(self, stamp_version: Version | None) -> _Index:
        return self.store.get(self._name)

    def _version(self, handle: _Index) -> Version:
        return handle.stamp_version

    def _fetch(
        self, ids: list[str], include: frozenset[str], handle: _Index | None = None
    ) -> list[Record]:
        with self.store.lock:
            records = self.store.get(self._name).records
            return [_copy(i, records[i], include) for i in ids if i in records]

    def _changes(self, since: int) -> list[str]:
        with self.store.lock:
            newer: list[str] = []
            for i, stored in reversed(self.store.get(self._name).records.items()):
                if stored.seq <= since:
                    break
                newer.append(i)
            return newer[::-1]

    def _put(
        self, handle: _Index, records: Sequence[Record], held: Mapping[str, Record], replace: bool
    ) -> None:
        store = self.store
        if self.capabilities.transactions:
            staged = []
            for record in records:  # a failure here leaves the index untouched
                store.tick()
                staged.append(record)
            with deferred_interrupts():  # applied whole: a Ctrl-C waits until it is
                for record in staged:
                    handle.mark += 1
                    handle.put(record.id, _as_stored(record, handle.mark))
        else:
            for record in records:  # a failure here leaves the records before it written
                store.tick()
                handle.mark += 1
                handle.put(record.id, _as_stored(record, handle.mark))

    def _selected(self, handle: _Index, ids: list[str] | None, where: Filter | None) -> list[str]:
        chosen = list(handle.records) if ids is None else [i for i in ids if i in handle.records]
        return [i for i in chosen if _matches(handle.records[i].metadata, where)]

    def _remove(self, handle: _Index, ids: list[str]) -> None:
        for i in ids:
            del handle.records[i]
        handle.order = None

    def search(self, vector: np.ndarray, k: int, *, where: Filter | None = None) -> list[Hit]:
        query = np.asarray(vector, dtype=np.float32).ravel()
        with self.store.lock:
            index = self.store.get(self._name)
            found = [(i, s) for i, s in index.records.items() if _matches(s.metadata, where)]
            space = index.space
        fits = [s.vector is not None and s.vector.shape == query.shape for _, s in found]
        usable = [f for f, ok in zip(found, fits, strict=True) if ok]
        vectorless = [f for f, ok in zip(found, fits, strict=True) if not ok]
        hits: list[Hit] = []
        if usable:
            matrix = np.stack([s.vector for _, s in usable]).astype(np.float64)  # type: ignore[misc]
            q = query.astype(np.float64)
            if space == "cosine":
                norms = np.linalg.norm(matrix, axis=1) * max(np.linalg.norm(q), 1e-30)
                distances = 1.0 - matrix @ q / np.maximum(norms, 1e-30)
            elif space == "ip":
                distances = 1.0 - matrix @ q
            else:
                distances = ((matrix - q) ** 2).sum(axis=1)
            for k_ in np.argsort(distances, kind="stable")[:k]:
                i, s = usable[k_]
                hits.append(Hit(_copy(i, s, INCLUDE), float(distances[k_])))
        # Records without a usable vector come last, as NULL distances do in SQL.
        hits += [Hit(_copy(i, s, INCLUDE), None) for i, s in vectorless[: max(0, k - len(hits))]]
        return hits


class RawMemoryClient:
    """A user's own client of one in-memory index: it writes around the guard.

    What the conformance suite's tampering goes through (``RawAccess``): records written as a
    plain client would (the write mark still moves, as a store's trigger would move it), the
    metadata or the store's setting replaced, an unstamped index made, a failure armed.
    """

    def __init__(self, store: MemoryStore, name: str) -> None:
        self.store = store
        self.name = name

    def create(self, metadata: Mapping[str, Any] | None = None, space: str = "cosine") -> None:
        """An index made without ctxemb (no stamp unless ``metadata`` holds one), searched by
        ``space``."""
        store = self.store
        with store.lock:
            if self.name in store.indexes:
                raise InvalidInputError(f"index {self.name!r} exists")
            store.indexes[self.name] = _Index(
                uuid.uuid4().hex, dict(metadata or {}), space, store.next_version()
            )

    def drop(self) -> None:
        with self.store.lock:
            self.store.indexes.pop(self.name, None)

    def write(self, records: Sequence[Record]) -> None:
        """Upsert records as they are, no check of any kind."""
        with self.store.lock:
            index = self.store.get(self.name)
            for record in records:
                index.mark += 1
                index.put(record.id, _as_stored(record, index.mark))

    def metadata(self) -> dict[str, Any]:
        with self.store.lock:
            return dict(self.store.get(self.name).metadata)

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Replace the index's metadata whole (a stamp edited, removed or replaced)."""
        with self.store.lock:
            index = self.store.get(self.name)
            index.metadata = dict(metadata)
            index.stamp_version = self.store.next_version()

    def set_space(self, space: str) -> None:
        """Change the distance the index searches by (the store's own setting, changed around
        ctxemb as a column's type can be altered)."""
        if space not in SPACES:
            raise InvalidInputError(f"space must be one of {SPACES}, got {space!r}")
        with self.store.lock:
            index = self.store.get(self.name)
            index.space = space
            index.stamp_version = self.store.next_version()

    def snapshot(self) -> dict[str, tuple[Any, ...]]:
        """Every record as stored, comparable with ``==`` (vectors as bytes)."""
        with self.store.lock:
            index = self.store.indexes.get(self.name)
            if index is None:
                return {}
            return {
                i: (
                    None if s.vector is None else s.vector.tobytes(),
                    s.text,
                    None if s.metadata is None else sorted(s.metadata.items()),
                )
                for i, s in index.records.items()
            }

    @contextlib.contextmanager
    def failing_writes(self, after: int, error: BaseException | None = None) -> Iterator[None]:
        """The store's writes fail (``error``, default a ``StoreUnavailableError``) when the
        record after the first ``after`` reaches it; disarmed when it fired or the block ends."""
        error = error or StoreUnavailableError("memory store: the write failed (armed by a test)")
        with self.store.lock:
            self.store.failing = _Failing(after, error)
        try:
            yield
        finally:
            with self.store.lock:
                self.store.failing = None
