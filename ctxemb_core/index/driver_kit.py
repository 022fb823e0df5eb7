"""What a store driver is built from, once: the parts of the protocol that are no store's own.

:mod:`~ctxemb_core.index.driver` says what a driver promises; this module keeps the parts every
driver would otherwise write again in its own words:

- :class:`KeyedDriver`: ``create``, ``read``, ``write``, ``delete`` and ``changes`` over a
  handful of store primitives (does the index exist, make it, fetch records by id, the ids a
  filter selects, remove ids, put records). It dedupes ids, keeps the order given, refuses ids
  already stored for ``replace=False`` (:class:`~ctxemb_core.errors.ExistingIdsError`) under
  one lock per index in this process, tells a creator that lost a race it did not create,
  compares the stamp version (:class:`~ctxemb_core.errors.StampMovedError`) and splits
  removals to the store's batch limit. The in-memory driver and Chroma's are built on it;
- :class:`ObjectDriver`: a :class:`KeyedDriver` whose store hands out an index as an object
  read by name (a client's collection): ``head``, ``read_stamp`` and ``write_stamp`` over how
  the object shows its identity, metadata, setting and space, every read of a call made on the
  object the last head was read from; for a store whose engine lives in this process, the head
  held until the index's live state changes (:meth:`ObjectDriver._live`, compared by
  :func:`same`: equality that tells ``True`` from ``1``);
- :class:`TransactionalDriver`: ``write`` and ``delete`` for a store that runs each in one
  transaction (PostgreSQL's): the stamp held and compared, stored ids refused, and a hybrid
  index's lexical side written in the same transaction;
- :func:`restamped` and :func:`check_kept`: an index's metadata under a new stamp, and the
  read-back after a stamp write on a store without transactions;
- :func:`records_of` and :func:`columns_of`: records to and from the parallel lists (ids,
  vectors, texts, metadata) a columnar client reads and writes;
- :func:`check_values`: metadata values a store's wire format cannot hold (``None``, a
  non-finite float, an integer beyond 64 bits), refused before anything is written;
- :func:`json_filter` and :func:`check_json_batch`, for a store that keeps metadata as JSON
  (PostgreSQL's ``jsonb``, Qdrant's payload): the neutral filter checked (no operator keys,
  JSON values), and a batch refused before anything is embedded where the store would refuse
  it only while writing (metadata JSON has no form for; ids and NUL characters beyond the
  limits the driver states), the same words for every such store;
- :func:`translator`: a store's ``translated(what)``, its client library's errors raised as
  ctxemb's, from a table that matches an error by type and, where a library says more in the
  message than in the type, by its words;
- :func:`unstamped_refusal`: the refusal of an unstamped index, a driver adding only who
  writes around ctxemb in its store (its ``unstamped_error``);
- :func:`sealed`, :func:`resealed` and :func:`write_order`: the store's order, oldest write
  first, for a store that keeps none (a sequence and a check in each record's payload), a
  record written or edited around the driver last and, its seal broken, checked on every open
  until one proves it (capability ``seals``);
- :func:`chunks` and :func:`version_digest`.

Example:
    >>> [list(range(5))[s] for s in chunks(5, 2)]
    [[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import operator
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from ctxemb_core.errors import (
    CtxembError,
    ExistingIdsError,
    InvalidInputError,
    MissingStampError,
    unstamped_remedies,
)
from ctxemb_core.index.driver import (
    INCLUDE,
    Capabilities,
    Filter,
    Head,
    Record,
    StampMovedError,
    StampRead,
    Version,
)

if TYPE_CHECKING:
    from ctxemb_core.stamp import IndexStamp

__all__ = [
    "KeyedDriver",
    "ObjectDriver",
    "TransactionalDriver",
    "check_json_batch",
    "check_kept",
    "check_values",
    "chunks",
    "columns_of",
    "json_filter",
    "records_of",
    "resealed",
    "restamped",
    "same",
    "sealed",
    "translator",
    "unstamped_refusal",
    "unstorable",
    "version_digest",
    "write_order",
]

_METADATA = frozenset({"metadata"})
# One lock per index (store, name) in this process: a write's "absent? then add" and a delete.
_EXCLUSIVE: dict[tuple[str, str], threading.Lock] = {}
_EXCLUSIVE_LOCK = threading.Lock()
#: The store's handle on the index during one call (a client's collection object, an index).
H = TypeVar("H")


def chunks(count: int, step: int) -> Iterator[slice]:
    """Slices of at most ``step`` of ``count`` items (a store refuses a call above its limit)."""
    for start in range(0, count, max(1, step)):
        yield slice(start, start + max(1, step))


#: One rule of :func:`translator`: what the store raised (exception types, or ``(types, text)``:
#: those types with ``text`` in the message), ctxemb's error, and its message (or a
#: :class:`~ctxemb_core.remedy.Said` pair of it: ``{do}`` said for Python and for the CLI).
Rule = tuple[Any, type[CtxembError], Any]


def translator(*rules: Rule) -> Callable[..., contextlib.AbstractContextManager[None]]:
    """A store's ``translated(what, lock=None)`` from a table of its client library's
    exceptions.

    The first rule that matches the exception raised in the block decides (as ``except``
    clauses would; a rule ``((types, text), ...)`` only when the message holds ``text``); the
    error raised says ``what``, then the rule's message (``{exc}``: the store's own words).
    ctxemb's own errors, and anything no rule names, pass unchanged. ``lock``: held while the
    block runs (a client whose calls are serialised), taken in the same step: a store's every
    call enters it, a query twice.
    """

    def translated(what: str, lock: Any = None) -> contextlib.AbstractContextManager[None]:
        return _Translated(rules, what, lock)

    return translated


class _Translated(contextlib.AbstractContextManager[None]):
    """One block of :func:`translator` (a plain object: entered on every store call)."""

    __slots__ = ("lock", "rules", "what")

    def __init__(self, rules: tuple[Rule, ...], what: str, lock: Any) -> None:
        self.rules, self.what, self.lock = rules, what, lock

    def __enter__(self) -> None:
        if self.lock is not None:
            self.lock.acquire()

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.lock is not None:
            self.lock.release()
        if not isinstance(exc, Exception) or isinstance(exc, CtxembError):
            return
        for match, error, message in self.rules:
            worded = isinstance(match, tuple) and isinstance(match[-1], str)
            types, text = match if worded else (match, "")
            if isinstance(exc, types) and text in str(exc):
                said = f"{self.what}: " + (message if isinstance(message, str) else message[0])
                if isinstance(message, str):
                    raise error(said.format(exc=exc)) from exc
                raise message[1].into(error, said.format(exc=exc, do="{do}")) from exc


#: The payload keys of :func:`sealed`: a record's write sequence and the check of its fields.
SEQ_KEY, CHECK_KEY = "ctxemb_seq", "ctxemb_check"
_SEQ_LOCK = threading.Lock()
_last_seq = [0]


#: What :func:`json.dumps` builds for ``sort_keys=True, default=str`` on every call, made once
#: (the same text: every record written and every one read in order passes here).
_SEAL_JSON = json.JSONEncoder(sort_keys=True, default=str)


def _seal(fields: Mapping[str, Any], seq: Any) -> str:
    body = _SEAL_JSON.encode([dict(fields), seq])
    return hashlib.blake2b(body.encode(), digest_size=8).hexdigest()


def sealed(batch: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """For a store that keeps no write order of its own (Qdrant's points): each record's
    fields (its JSON payload) with a write sequence, a nanosecond clock strictly increasing in
    this process, and a check of the fields and the sequence together."""
    with _SEQ_LOCK:
        start = max(time.time_ns(), _last_seq[0] + 1)
        _last_seq[0] = start + len(batch) - 1
    return [{**f, SEQ_KEY: start + k, CHECK_KEY: _seal(f, start + k)} for k, f in enumerate(batch)]


def resealed(payloads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The seal keys (:data:`SEQ_KEY`, :data:`CHECK_KEY`) that make each stored payload
    :func:`sealed` as it is now, to merge into it: for records an open proved (re-embedded and
    matched) or an adoption accepted, written around the driver."""
    fields = [{k: v for k, v in p.items() if k not in (SEQ_KEY, CHECK_KEY)} for p in payloads]
    return [{SEQ_KEY: f[SEQ_KEY], CHECK_KEY: f[CHECK_KEY]} for f in sealed(fields)]


def write_order(payload: Mapping[str, Any], tiebreak: str) -> tuple[int, int, str]:
    """Where a record :func:`sealed` comes in the store's order (oldest write first): by its
    sequence while its check holds; after every such record (by ``tiebreak``) when it has none
    or its fields changed since: written or edited around the driver, the newest the guard
    should see. Such a record is unproven (``order[0] == 1``): its place alone cannot show a
    later write around the driver (the last record, a record never sealed stays where it was),
    so an open checks it every time until it is sealed again."""
    fields = {k: v for k, v in payload.items() if k not in (SEQ_KEY, CHECK_KEY)}
    seq = payload.get(SEQ_KEY)
    if isinstance(seq, int) and payload.get(CHECK_KEY) == _seal(fields, seq):
        return (0, seq, "")
    return (1, 0, tiebreak)


def version_digest(value: Any) -> str:
    """A stamp version for a store that keeps no counter: the digest of what it returns with
    the index (its metadata, its persisted setting), which changes whenever they do."""
    seen = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(seen.encode()).hexdigest()


def same(a: Any, b: Any) -> bool:
    """Whether two JSON-like values are equal type for type: ``True`` is not ``1`` and ``1.0``
    is not ``1`` here (a stamp that tells them apart must see them change); dicts, lists and
    tuples item by item, anything else by ``==``."""
    if a is b:  # a copy keeps its strings and numbers: most of a stamp is seen here at once
        return True
    if type(a) is not type(b):
        return False
    # A copy keeps its keys' order and its items (strings, numbers) as they were: a check of
    # every key and value by identity, in C, settles the usual case (a query compares these).
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return False
        if all(map(operator.is_, a, b)) and all(map(operator.is_, a.values(), b.values())):
            return True
        return all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and (all(map(operator.is_, a, b)) or all(map(same, a, b)))
    return bool(a == b)


def unstorable(value: Any) -> bool:
    """Whether a metadata value has no form on a store's wire: ``None``, a non-finite float,
    an integer beyond 64 bits (``bool`` is not an integer here)."""
    if value is None:
        return True
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63


def check_values(ids: Sequence[str], metadatas: Sequence[Any] | None, store: str) -> None:
    """Refuse a batch whose metadata holds a value :func:`unstorable` (lists item by item),
    naming the record, the key and ``store`` (who cannot store it), before anything is written.
    """
    for k, m in enumerate(metadatas or []):
        for key, value in (m or {}).items():
            for v in value if isinstance(value, list) else [value]:
                if unstorable(v):
                    raise InvalidInputError(
                        f"metadatas[{k}] (id {ids[k]!r}): {key!r} = {v!r} cannot be stored by "
                        f"{store} (None, a non-finite float or an integer beyond 64 bits); "
                        "leave it out"
                    )


def json_filter(where: Any, store: str) -> dict[str, Any]:
    """The neutral filter ``where`` (every key holds its value) as plain JSON, or
    ``InvalidInputError``: an empty one, an operator key (``$and``, ``$in``: a store's own
    language, which the neutral form does not speak), a value JSON cannot hold."""
    if not isinstance(where, Mapping) or not where:
        raise InvalidInputError(
            f"where must be a non-empty mapping of metadata values, got {where!r}"
        )
    operators = [k for k in where if str(k).startswith("$")]
    # A value that is an object or a list would be a store's own operator ({'$in': [...]}), or
    # a containment that is not equality (PostgreSQL's @> matches a list holding it).
    nested = [k for k, v in where.items() if isinstance(v, (Mapping, list, tuple, set))]
    if operators or nested:
        bad = repr(operators[0]) if operators else f"{nested[0]!r}: {where[nested[0]]!r}"
        raise InvalidInputError(
            f"where: {bad}: {store} filters by "
            "metadata equality to a string, number or boolean ({'topic': 'tea', 'year': "
            "2024}: every key holds its value); query the store with its own client for "
            "anything else"
        )
    try:
        return dict(json.loads(json.dumps(dict(where), allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"where is not JSON: {exc}") from None


def _plain(metas: Sequence[Any], ints64: bool) -> bool:
    """Whether every metadata key is a string (JSON would make one of any other) and, where
    ``ints64``, no value is a list or an integer beyond 64 bits: one pass over the batch."""
    for m in metas:
        for key, value in (m or {}).items():
            if type(key) is not str or (ints64 and type(value) is list):
                return False
            if ints64 and isinstance(value, int) and not -(2**63) <= value < 2**63:
                return False
    return True


def check_json_batch(
    ids: Sequence[str],
    documents: Sequence[str | None],
    metadatas: Sequence[Any] | None,
    store: str,
    *,
    max_id: int | None = None,
    nul: bool = True,
    ints64: bool = False,
) -> None:
    """Refuse a batch ``store`` would refuse only while writing it: an id longer than
    ``max_id``, a NUL character where ``nul`` is ``False`` (in an id, a text or the metadata),
    metadata that is not JSON (a non-finite float, a key that is not a string, a value JSON
    has no form for), and where ``ints64`` (a store that reads JSON integers as 64-bit ones,
    as Qdrant's payload does) a metadata value beyond 64 bits (:func:`check_values`)."""
    for k, i in enumerate(ids if max_id is not None or not nul else ()):
        if max_id is not None and len(i) > max_id:
            raise InvalidInputError(
                f"ids[{k}] is {len(i)} characters; the id column holds {max_id}"
            )
        if not nul and "\x00" in i:
            raise InvalidInputError(f"ids[{k}] holds a NUL character, which {store} cannot store")
    for k, d in enumerate(documents if not nul else ()):
        if d is not None and "\x00" in d:
            raise InvalidInputError(
                f"documents[{k}] (id {ids[k]!r}) holds a NUL character, which {store} text "
                "cannot store; remove it"
            )
    metas = list(metadatas or [])
    # The whole batch in one call first (a write's every batch passes here, usually twice);
    # only a batch that fails is looked at record by record, to name the one refused.
    try:
        whole: str | None = json.dumps(metas, allow_nan=False)
    except (TypeError, ValueError):
        whole = None
    checked = whole is not None and (nul or "\\u0000" not in whole)
    if checked and _plain(metas, ints64):  # the usual batch: nothing to name
        return
    for k, m in enumerate(metas):
        if m is None:
            continue
        where = f"metadatas[{k}] (id {ids[k]!r})"
        if not checked:
            try:
                text = json.dumps(m, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"{where} cannot be stored as JSON: {exc}") from None
            if not nul and "\\u0000" in text:
                raise InvalidInputError(
                    f"{where} holds a NUL character, which {store} cannot store"
                )
        bad = [key for key in m if not isinstance(key, str)]
        if bad:
            raise InvalidInputError(f"{where}: key {bad[0]!r} is not a string")
    if ints64:  # JSON holds null: only the integers are checked
        kept = [{k: v for k, v in (m or {}).items() if v is not None} for m in metas]
        check_values(ids, kept, store)


def unstamped_refusal(kind: str, name: str, *, where: str = "", by: str = "") -> MissingStampError:
    """The refusal of unstamped ``kind`` ``name`` (``where``: more of where it is), with its
    remedies (adopt it, or detect its contract first); ``by``: who likely wrote it around
    ctxemb, in the store's terms (what a driver's ``unstamped_error`` adds)."""
    return MissingStampError(
        f"{kind} {name!r}{where} carries no ctxemb stamp{f': it was written {by}' if by else ''}"
        ", so nothing proves which contract made its vectors; ctxemb neither reads nor writes "
        "it unstamped. ",
        remedies=unstamped_remedies(name),
    )


def records_of(
    ids: Sequence[str],
    vectors: Sequence[Any] | None,
    texts: Sequence[str | None] | None,
    metadatas: Sequence[Mapping[str, Any] | None] | None,
) -> list[Record]:
    """Records from parallel lists as a columnar client returns them (a part not read:
    ``None``); vectors as float32 arrays, metadata as plain dicts."""
    return [
        Record(
            i,
            None if vectors is None else np.asarray(vectors[k], dtype=np.float32),
            None if texts is None else texts[k],
            None if metadatas is None or metadatas[k] is None else dict(metadatas[k]),  # type: ignore[arg-type]
        )
        for k, i in enumerate(ids)
    ]


def columns_of(records: Sequence[Record], store: str) -> tuple[list[Any], ...]:
    """Records as parallel lists: ids, vectors (float32), texts, metadata; a record without
    a vector is refused for a ``store`` that keeps none without one."""
    missing = [r.id for r in records if r.vector is None]
    if missing:
        raise InvalidInputError(
            f"{store} stores no record without a vector; ids {missing[:5]} have none"
        )
    return (
        [r.id for r in records],
        [np.asarray(r.vector, dtype=np.float32) for r in records],
        [r.text for r in records],
        [None if r.metadata is None else dict(r.metadata) for r in records],
    )


def restamped(metadata: Mapping[str, Any] | None, stamp: IndexStamp) -> dict[str, Any]:
    """An index's metadata with ``stamp`` in place of its old one: the index's own keys stay,
    every ``ctxemb:`` key comes from ``stamp`` (an old key the new stamp lacks goes)."""
    kept = {k: v for k, v in (metadata or {}).items() if not str(k).startswith("ctxemb:")}
    return {**kept, **stamp.to_metadata()}


def check_kept(kind: str, name: str, metadata: Mapping[str, Any] | None, stamp: IndexStamp) -> None:
    """After a stamp write on a store without transactions, read back: refuse
    (:class:`~ctxemb_core.errors.StampMovedError`) an index whose metadata does not hold the
    stamp written (another writer changed it meanwhile, or the write did not take)."""
    if type(stamp).metadata_items(metadata) != type(stamp).metadata_items(stamp.to_metadata()):
        raise StampMovedError(
            f"{kind} {name!r}: the store did not keep the stamp written (another writer "
            "changed it meanwhile, or the write did not take); open it again"
        )


class KeyedDriver(Generic[H]):
    """``read``, ``write``, ``delete`` and ``changes`` of the protocol over a store's own
    primitives, for a driver whose store reads, writes and deletes records by id.

    A subclass sets ``capabilities``, ``_name`` and ``_kind`` (its store's word for an index,
    for messages) and gives the primitives below; everything else of the protocol is its own.
    """

    capabilities: Capabilities
    _name: str
    _kind = "index"
    #: Why a driver without ``capabilities.marks`` keeps none (for the refusal of ``changes``).
    _no_marks = "capabilities.marks"

    @property
    def name(self) -> str:
        return self._name

    # -- the store's primitives -----------------------------------------------------------

    def describe(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r}, store={self.describe()!r})"

    def _key(self) -> tuple[str, str]:
        """This index in this process: the store (:meth:`describe`) and the name; the key of
        its lock here and of a test's failure armed for its writes
        (:mod:`~ctxemb_core.index.armed`)."""
        return (self.describe(), self._name)

    def _exclusive(self) -> contextlib.AbstractContextManager[Any]:
        """Held around a write's check and write, and around a delete: by default one lock per
        index in this process, so that on a store without transactions two threads indexing
        one corpus add nothing twice (a store's own lock may replace it)."""
        with _EXCLUSIVE_LOCK:
            return _EXCLUSIVE.setdefault(self._key(), threading.Lock())

    def _handle(self, stamp_version: Version | None) -> H:
        """The index to write to, read afresh when a ``stamp_version`` is to be compared."""
        raise NotImplementedError

    def _version(self, handle: H) -> Version:
        """The stamp version of ``handle`` now."""
        raise NotImplementedError

    def _fetch(
        self, ids: list[str], include: frozenset[str], handle: H | None = None
    ) -> list[Record]:
        """The stored ones of ``ids`` (distinct), in any order."""
        raise NotImplementedError

    def _selected(self, handle: H, ids: list[str] | None, where: Filter | None) -> list[str]:
        """The stored ids among ``ids`` (``None``: all) that match ``where``, in any order."""
        raise NotImplementedError

    def _remove(self, handle: H, ids: list[str]) -> None:
        """Delete ``ids`` (stored, at most ``capabilities.max_batch`` of them)."""
        raise NotImplementedError

    def _put(
        self, handle: H, records: Sequence[Record], held: Mapping[str, Record], replace: bool
    ) -> None:
        """Write ``records`` whole; ``held``: the stored ones of their ids (metadata only;
        empty when ``replace`` is ``False``: new records only)."""
        raise NotImplementedError

    def _changes(self, since: int) -> list[str]:
        raise NotImplementedError

    def _exists(self) -> bool:
        """Whether the store holds an index of this name now."""
        raise NotImplementedError

    def _create(self, stamp: IndexStamp) -> None:
        """Make the index carrying ``stamp`` in one call (raises if one of the name exists)."""
        raise NotImplementedError

    def check_batch(
        self, ids: list[str], documents: Sequence[str | None], metadatas: list[Any] | None
    ) -> None:
        """What the store would refuse only part way through a write, refused first: the
        guard asks it before anything is embedded, :meth:`write` before anything is written
        (default: nothing)."""

    # -- the protocol ----------------------------------------------------------------------

    def _check_version(self, handle: H, stamp_version: Version | None) -> None:
        if stamp_version is not None and self._version(handle) != stamp_version:
            raise StampMovedError(
                f"the stamp of {self._kind} {self._name!r} changed since it was checked"
            )

    def create(self, stamp: IndexStamp) -> bool:
        """Create the index unless one of the name exists; of two creators at once (here or in
        another process), the one whose create the store refused is told it exists."""
        with self._exclusive():
            if self._exists():
                return False
            try:
                self._create(stamp)
            except Exception:
                if not self._exists():
                    raise
                return False  # another creator made it meanwhile: nothing made here
            return True

    def read(self, ids: Sequence[str], include: frozenset[str] = INCLUDE) -> list[Record]:
        wanted = list(dict.fromkeys(ids))
        found = {r.id: r for r in self._fetch(wanted, include)} if wanted else {}
        return [found[i] for i in ids if i in found]  # in the order given

    def changes(self, since: int) -> list[str]:
        if not self.capabilities.marks:
            raise InvalidInputError(f"{self!r} keeps no write mark ({self._no_marks})")
        return self._changes(since)

    def write(
        self, records: Sequence[Record], *, replace: bool, stamp_version: Version | None = None
    ) -> None:
        if not records:
            return
        self.check_batch(  # the store's rules, before anything is written
            [r.id for r in records], [r.text for r in records], [r.metadata for r in records]
        )
        with self._exclusive():
            handle = self._handle(stamp_version)
            self._check_version(handle, stamp_version)
            ids = [r.id for r in records]
            stored = self._fetch(list(dict.fromkeys(ids)), _METADATA, handle)
            held = {r.id: r for r in stored}
            if held and not replace:
                raise ExistingIdsError(tuple(i for i in ids if i in held))
            self._put(handle, records, held, replace)

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Filter | None = None,
        stamp_version: Version | None = None,
    ) -> list[str]:
        wanted = None if ids is None else list(dict.fromkeys(ids))
        if wanted == []:
            return []
        with self._exclusive():
            handle = self._handle(stamp_version)
            self._check_version(handle, stamp_version)
            found = self._selected(handle, wanted, where)
            if wanted is not None:
                matched = set(found)
                found = [i for i in wanted if i in matched]  # in the order given
            for part in chunks(len(found), self.capabilities.max_batch or len(found)):
                self._remove(handle, found[part])
        return found


class TransactionalDriver(Generic[H]):
    """``write`` and ``delete`` of the protocol for a driver whose store runs each in one
    transaction (a SQL database), and the joint lexical side written inside it.

    In the transaction, in this order: the index and its stamp are held against a re-stamp
    until it ends and the stamp version is compared (:meth:`_hold`); for ``replace=False``
    stored ids are refused (:class:`~ctxemb_core.errors.ExistingIdsError`, also when another
    writer adds one between the check and the write: the store's ``_duplicate`` error); the
    ``companion`` (a hybrid index's lexical side in the same database, which
    :func:`~ctxemb_core.hybrid.pair.open_paired` sets) is held before any row, so writers of
    the two sides take turns and never wait on each other's rows in a circle, and is told
    what was written or deleted before the commit. A subclass gives the primitives below.
    """

    _name: str
    #: A hybrid index's lexical side written in this driver's transactions (``None``: none).
    companion: Any = None
    #: The store's error for an id written twice (a writer racing this one).
    _duplicate: tuple[type[BaseException], ...] = ()

    @property
    def name(self) -> str:
        return self._name

    def _transaction(self, what: str) -> contextlib.AbstractContextManager[Any]:
        """One transaction, its errors translated into ctxemb's while ``what`` runs."""
        raise NotImplementedError

    def _hold(self, stamp_version: Version | None = None) -> H:
        """In the transaction: the index and its stamp held until it ends, the stamp version
        compared (:class:`StampMovedError`); returns what :meth:`_put` needs (a column type)."""
        raise NotImplementedError

    def _present(self, ids: list[str]) -> set[str]:
        """The stored ones of ``ids``."""
        raise NotImplementedError

    def _put(self, held: H, records: Sequence[Record], replace: bool) -> None:
        """Write ``records`` whole (``replace``: a stored id's record replaced)."""
        raise NotImplementedError

    def _remove(self, ids: Sequence[str] | None, where: Filter | None) -> list[str]:
        """Delete the records of ``ids`` that match ``where`` (each if given); the ids deleted."""
        raise NotImplementedError

    def write(
        self, records: Sequence[Record], *, replace: bool, stamp_version: Version | None = None
    ) -> None:
        ids = [r.id for r in records]
        try:
            with self._transaction(f"writing to {self._name!r}"):
                held = self._hold(stamp_version)
                if not replace:
                    present = self._present(ids)
                    if present:
                        raise ExistingIdsError(tuple(i for i in ids if i in present))
                if self.companion is not None:
                    self.companion.lock()
                self._put(held, records, replace)
                if self.companion is not None:
                    texts = [r.text or "" for r in records]
                    metas = [dict(r.metadata or {}) for r in records]
                    self.companion.written(ids, texts, metas)
        except self._duplicate:
            # Another writer added some of these ids between the check and the write.
            raise ExistingIdsError(tuple(i for i in ids if i in self._present(ids))) from None

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: Filter | None = None,
        stamp_version: Version | None = None,
    ) -> list[str]:
        with self._transaction(f"deleting from {self._name!r}"):
            self._hold(stamp_version)
            if self.companion is not None:
                self.companion.lock()
            gone = self._remove(ids, where)
            if self.companion is not None:
                self.companion.deleted(gone)
            return gone


class ObjectDriver(KeyedDriver[H]):
    """A :class:`KeyedDriver` whose store hands out the index as an object read by name (a
    client's collection, which carries its id, metadata and configuration).

    The guard reads a head before every call; what it verified is what the call then reads
    and writes: the object that head was read from (by id, never another index made since
    under the name). The **stamp version** is a digest of the object's identity, stamp and
    setting, which changes whenever any of them does. A subclass gives how the store looks the
    object up and what the object shows (the methods below that raise), and how it writes
    metadata and setting in one call (:meth:`_modify`).
    """

    _seen: H | None = None
    #: The last head read of an index the store keeps live in this process: the state it was
    #: read in (see :meth:`_live`), the head and the object it was read from.
    _held: tuple[tuple[Any, Any], Head, H] | None = None

    # -- what the store gives ----------------------------------------------------------------

    def _lookup(self) -> H | None:
        """The index's object as the store has it now, or ``None``: there is none."""
        raise NotImplementedError

    def missing_error(self, why: str = "") -> Exception:
        """The refusal of a call on an index that is not there (``why``: more of why)."""
        return InvalidInputError(f"{self._kind} {self._name!r} does not exist{why}")

    def stored(self) -> H | None:
        """The index's object as the store has it now, unguarded, or ``None``: none."""
        return self._lookup()

    def _identity(self, handle: H) -> str:
        raise NotImplementedError

    def _metadata(self, handle: H) -> Mapping[str, Any] | None:
        raise NotImplementedError

    def _storage(self, handle: H) -> Mapping[str, Any] | None:
        """The store's own persisted setting (:attr:`StampRead.storage`; default none)."""
        return None

    def _space(self, handle: H) -> str:
        raise NotImplementedError

    def _mark(self, handle: H) -> int | None:
        """The index's write mark (default: none kept)."""
        return None

    def _live(self) -> tuple[object, Any] | None:
        """For a store that can tell cheaply, in this process, that the index's description
        has not changed: an object and a value that together change whenever it may have (an
        embedded engine's own object of the index and the parts of it the description is made
        from, as they are, not copied; or a store file's data version); ``None`` where it
        cannot tell (the default: a server's, whose head is one request).

        Where it can, :meth:`head` reads the description again only when that object (by
        identity: an index dropped and made again is another object) or that value (by
        :func:`same`, against a copy taken before the last read) changed since: a look where
        the store's description costs more (local Qdrant's counts every point; embedded
        Chroma's is a third of a query)."""
        return None

    def _modify(self, handle: H, metadata: dict[str, Any], stamp: IndexStamp) -> None:
        """Replace the index's metadata with ``metadata`` (``stamp``'s, with the index's own
        keys) and its setting with ``storage_for(stamp)``'s, in one call; what the store kept
        is read back by :meth:`write_stamp`."""
        raise NotImplementedError

    # -- the protocol over them ------------------------------------------------------------

    def _stored(self) -> H | None:
        self._seen = self._lookup()
        return self._seen

    def _collection(self, *, fresh: bool = False) -> H:
        """The object the last head was read from, or (``fresh``, or none read yet) the one
        the store has now."""
        raw = self._seen if not fresh else None
        if raw is None:
            raw = self._stored()
        if raw is None:
            raise self.missing_error()
        return raw

    def _exists(self) -> bool:
        return self._stored() is not None

    def _handle(self, stamp_version: Version | None) -> H:
        return self._collection(fresh=stamp_version is not None)

    def _settings(self, handle: H) -> Any:
        """The index's settings beyond :meth:`_storage` that a client can change around the
        guard and that need not be the stamp's (a search index's, a quantization): the stamp
        version moves with them, so the guard verifies again (default ``None``: none)."""
        return None

    def _version(self, handle: H) -> Version:
        from ctxemb_core.stamp import IndexStamp

        seen = IndexStamp.metadata_items(self._metadata(handle))
        state: tuple[Any, ...] = (self._identity(handle), seen, self._storage(handle))
        settings = self._settings(handle)
        return version_digest(state if settings is None else (*state, settings))

    def _head(self, handle: H) -> Head:
        mark = self._mark(handle)
        return Head(self._identity(handle), self._version(handle), mark, self._space(handle))

    def head(self) -> Head | None:
        live = self._live()
        if self._held is not None and live is not None:
            (was, parts), held, seen = self._held
            if was() is live[0] and same(live[1], parts):
                self._seen = seen
                return held
        # The state is taken before the read: a change racing the read is seen on the next call.
        state = None if live is None else (weakref.ref(live[0]), copy.deepcopy(live[1]))
        self._held = None
        raw = self._stored()
        if raw is None:
            return None
        head = self._head(raw)
        if state is not None:
            self._held = (state, head, raw)
        return head

    def _unmoved(self, stamp_version: Version | None) -> Head:
        """For a search that compares the stamp version in its own hold of the store (a
        ``search_columns``, :meth:`~ctxemb_core.index.shaped.ShapedFacade._search`): the head
        now (its ``space`` is the search's), refused (:class:`~ctxemb_core.errors.StampMovedError`,
        nothing searched) when it is not at ``stamp_version`` (``None``: nothing compared) or
        the index is gone. The head is this class's: the caller holds the store already, which
        a driver's own ``head`` may take again."""
        head = ObjectDriver.head(self)
        if head is None and stamp_version is None:
            raise self.missing_error()
        if head is None or (stamp_version is not None and head.stamp_version != stamp_version):
            raise StampMovedError(
                f"the stamp of {self._kind} {self._name!r} changed since it was checked"
            )
        return head

    def read_stamp(self) -> StampRead | None:
        raw = self._stored()
        if raw is None:
            return None
        return StampRead(self._head(raw), dict(self._metadata(raw) or {}), self._storage(raw))

    def write_stamp(self, stamp: IndexStamp, *, stamp_version: Version) -> bool:
        """Write ``stamp`` if the stamp version is still ``stamp_version``, then read back:
        a store without transactions may have let another writer in (refused:
        :class:`~ctxemb_core.errors.StampMovedError`), or not kept its setting (refused:
        :class:`~ctxemb_core.errors.ConfigurationMismatchError`)."""
        from ctxemb_core.stamp_guard import check_configuration

        raw = self._collection(fresh=True)
        if self._version(raw) != stamp_version:
            return False
        self._modify(raw, restamped(self._metadata(raw), stamp), stamp)
        again = self._collection(fresh=True)
        check_kept(self._kind, self._name, self._metadata(again), stamp)
        if "embedding_function" in (self.storage_for(stamp) or {}):
            kept = self._storage(again) or {}
            check_configuration(stamp, kept.get("embedding_function"), kept.get("contract"))
        return True

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        return None
