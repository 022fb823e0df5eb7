"""An index opened by alias: readers that can never mix two contracts, writers that keep every
index of an upgrade in step.

:class:`AliasedIndex` reads the alias's record on every call (one cheap read, as a guarded index
reads its head) and compares its generation with the one it serves:

- **reading**: when the alias moved, the reader opens the new target with the encoder of the
  new target's contract (:class:`~ctxemb_core.aliases.encoders.Encoders`) and switches both
  at once; the query then runs through that index's :class:`GuardedIndex`, which checks its
  stamp against that encoder. Without an encoder for the new contract the call raises
  :class:`NoEncoderError` and returns nothing: a query is never embedded under one contract
  and searched in an index of another.
- **writing**: every write and delete goes to each index the alias writes
  (:meth:`AliasRecord.written`: the target, the shadow while upgrading, the previous target
  until it is retired), each under its own contract. After writing, the alias is read again:
  if it moved meanwhile (an upgrade began, a cutover), the write is made again on what it
  writes now, so no write lands only on an index the alias has left.

Example:
    >>> docs = AliasedIndex.open(catalog, "docs", Encoders(embedder))  # doctest: +SKIP
    >>> docs.upsert(["d1"], ["Green tea is steamed."])                 # doctest: +SKIP
    >>> docs.search("tea").index                                       # doctest: +SKIP
    'docs-v1'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxemb_core.aliases.book import Catalog
from ctxemb_core.aliases.encoders import Encoders
from ctxemb_core.aliases.record import AliasRecord, AliasTarget, check_alias_name
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError, UnknownAliasError
from ctxemb_core.index.driver import Filter
from ctxemb_core.index.guarded import OPEN_SAMPLE, GuardedIndex, Match

__all__ = ["AliasedIndex", "AliasedQuery", "read_alias"]

#: How many times a write follows an alias that keeps moving before it gives up.
_FOLLOW = 8


def read_alias(catalog: Catalog, name: str) -> AliasRecord:
    """Alias ``name``'s record in ``catalog``.

    Raises:
        UnknownAliasError: there is none (the message lists the store's aliases).
    """
    check_alias_name(name)
    record = catalog.aliases.read(name)
    if record is None:
        known = catalog.aliases.names()
        raise UnknownAliasError(
            f"no alias {name!r} in {catalog.describe()}"
            + (f" (its aliases: {', '.join(known)})" if known else " (it has no aliases)")
        )
    return record


@dataclass(frozen=True)
class AliasedQuery:
    """What one query through an alias returned, and from where.

    Attributes:
        matches: one list of :class:`Match` per query text, nearest first.
        index: the index that answered.
        fingerprint: the contract the queries were embedded under, which is that index's.
        generation: the alias's generation the query was served under.
    """

    matches: list[list[Match]]
    index: str
    fingerprint: str
    generation: int


class AliasedIndex:
    """An index reached through an alias (see the module's docstring).

    Args:
        catalog: the store (:class:`~ctxemb_core.aliases.book.Catalog`).
        name: the alias.
        encoders: the encoders this process may switch to.
        sample: stored records re-embedded when a target is opened (as
            :meth:`GuardedIndex.open`).
    """

    def __init__(
        self, catalog: Catalog, name: str, encoders: Encoders, *, sample: int = OPEN_SAMPLE
    ) -> None:
        if not isinstance(encoders, Encoders):
            raise InvalidInputError(f"encoders must be Encoders, got {type(encoders).__name__}")
        self.catalog = catalog
        self.name = check_alias_name(name)
        self.encoders = encoders
        self.sample = sample
        self._lock = threading.RLock()
        self._opened: dict[AliasTarget, GuardedIndex] = {}
        self._record = read_alias(catalog, name)
        self._serving = self._open(self._record.target)

    @classmethod
    def open(
        cls,
        catalog: Catalog,
        name: str,
        encoders: Encoders | Embedder | Sequence[Any],
        *,
        sample: int = OPEN_SAMPLE,
    ) -> AliasedIndex:
        """Open alias ``name``: its target, verified under the encoder of its contract.

        Raises:
            UnknownAliasError: no such alias.
            NoEncoderError: no encoder given makes the target's contract.
            ContractMismatchError, EncoderDriftError: as :meth:`GuardedIndex.open`.
        """
        if isinstance(encoders, Embedder):
            encoders = Encoders(encoders)
        elif not isinstance(encoders, Encoders):
            encoders = Encoders(*encoders)
        return cls(catalog, name, encoders, sample=sample)

    def __repr__(self) -> str:
        return (
            f"AliasedIndex({self.name!r} -> {self._record.target}, gen {self._record.generation})"
        )

    # -- following the alias --------------------------------------------------------------

    @property
    def record(self) -> AliasRecord:
        """The alias's record as this object last read it."""
        return self._record

    def _open(self, target: AliasTarget) -> GuardedIndex:
        opened = self._opened.get(target)
        if opened is None:
            embedder = self.encoders.get(target.contract, alias=self.name)
            opened = GuardedIndex.open(
                self.catalog.driver(target.index), embedder, create=False, sample=self.sample
            )
            self._opened[target] = opened
        return opened

    def refresh(self) -> AliasRecord:
        """Read the alias; when it moved, switch to its target's index and encoder together.

        Raises:
            UnknownAliasError: the alias is gone.
            NoEncoderError: no encoder for the new target's contract (this object keeps
                serving nothing until one is given: every call raises it).
        """
        record = read_alias(self.catalog, self.name)
        with self._lock:
            if record.generation != self._record.generation:
                serving = self._open(record.target)  # raises before anything switches
                self._record, self._serving = record, serving
                live = set(record.written())
                self._opened = {k: v for k, v in self._opened.items() if k in live}
            return self._record

    @property
    def index(self) -> GuardedIndex:
        """The guarded index the alias serves now (read on this call)."""
        self.refresh()
        return self._serving

    # -- reading --------------------------------------------------------------------------

    def search(
        self, query_texts: Sequence[str] | str, n_results: int = 10, *, where: Filter | None = None
    ) -> AliasedQuery:
        """Query the index the alias serves now, with that index's contract's encoder.

        Raises:
            NoEncoderError: the alias moved to a contract no encoder was given for.
        """
        with self._lock:
            self.refresh()
            record, serving = self._record, self._serving
        matches = serving.query(query_texts, n_results, where=where)
        return AliasedQuery(matches, serving.name, serving.stamp.fingerprint, record.generation)

    def query(
        self, query_texts: Sequence[str] | str, n_results: int = 10, *, where: Filter | None = None
    ) -> list[list[Match]]:
        """:meth:`search`'s matches."""
        return self.search(query_texts, n_results, where=where).matches

    @property
    def contract(self) -> Any:
        """The contract of the index the alias serves now."""
        return self.index.contract

    def count(self) -> int:
        return self.index.count()

    def ids(self) -> list[str]:
        return self.index.ids()

    # -- writing --------------------------------------------------------------------------

    def _each(
        self, first: Callable[[GuardedIndex], Any], again: Callable[[GuardedIndex], Any]
    ) -> Any:
        """``first`` on the target, ``again`` on every other index the alias writes; then once
        more (``again`` everywhere) on whatever the alias writes if it moved meanwhile."""
        result = None
        done: set[AliasTarget] = set()
        record = self.refresh()
        for attempt in range(_FOLLOW):
            # Every encoder is found before anything is written (NoEncoderError changes nothing).
            indexes = [(t, self._open(t)) for t in record.written()]
            for target, index in indexes:
                if attempt == 0 and target == record.target:
                    result = first(index)
                else:
                    again(index)
                done.add(target)
            after = self.refresh()
            if set(after.written()) <= done:
                return result
            record = after
        raise InvalidInputError(
            f"alias {self.name!r} moved {_FOLLOW} times during one write; write again"
        )

    def add(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Add to the target (ids it holds refused, nothing written anywhere), then write the
        same records to every other index the alias writes."""
        self._each(
            lambda index: index.add(ids, documents, metadatas),
            lambda index: index.upsert(ids, documents, metadatas),
        )

    def upsert(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Write the records to every index the alias writes, each under its contract."""

        def write(index: GuardedIndex) -> None:
            index.upsert(ids, documents, metadatas)

        self._each(write, write)

    def sync(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> Any:
        """:meth:`GuardedIndex.sync` on every index the alias writes; the target's report
        (``progress`` follows the target's; ``dry_run`` writes nothing anywhere)."""
        if dry_run:
            return self.index.sync(ids, documents, metadatas, dry_run=True, progress=progress)
        return self._each(
            lambda index: index.sync(ids, documents, metadatas, progress=progress),
            lambda index: index.sync(ids, documents, metadatas),
        )

    def delete_missing(self, keep: Iterable[str], *, dry_run: bool = False) -> list[str]:
        """Delete from every index the alias writes the ids ``keep`` lacks; the target's."""
        kept = set(keep)
        if dry_run:
            return self.index.delete_missing(kept, dry_run=True)

        def delete(index: GuardedIndex) -> list[str]:
            return index.delete_missing(kept)

        return list(self._each(delete, delete))

    def delete(self, ids: Sequence[str] | None = None, *, where: Filter | None = None) -> list[str]:
        """Delete from every index the alias writes; returns the ids deleted from the target."""

        def delete(index: GuardedIndex) -> list[str]:
            return index.delete(ids, where=where)

        return list(self._each(delete, delete))
