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
- **hybrid indexes**: a target that records a hybrid contract (:mod:`~ctxemb_core.aliases.
  hybrid`) is opened as its store pairs it with its lexical side, under the alias's recorded
  recipe and fusion: writes and deletes reach both sides of every index the alias writes, and
  :meth:`AliasedIndex.hybrid_search` queries the pair the alias serves now, fused.

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
from typing import TYPE_CHECKING, Any

from ctxemb_core.aliases.book import Catalog
from ctxemb_core.aliases.encoders import Encoders
from ctxemb_core.aliases.hybrid import HybridWrites, check_dense_target, open_target
from ctxemb_core.aliases.record import AliasRecord, AliasTarget, check_alias_name
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError, UnknownAliasError
from ctxemb_core.index.driver import Filter
from ctxemb_core.index.guarded import OPEN_SAMPLE, GuardedIndex, Match

if TYPE_CHECKING:
    from ctxemb_core.hybrid.pair import HybridHit, HybridIndex

__all__ = ["AliasedHybridQuery", "AliasedIndex", "AliasedQuery", "read_alias"]

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


@dataclass(frozen=True)
class AliasedHybridQuery:
    """What one fused query through an alias over a hybrid index returned, and from where.

    Attributes:
        hits: the fused results, best first (:class:`~ctxemb_core.hybrid.pair.HybridHit`).
        index: the index that answered.
        fingerprint: the hybrid contract the query ran under, the alias's recorded one.
        generation: the alias's generation the query was served under.
    """

    hits: list[HybridHit]
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
        self._hybrids: dict[AliasTarget, HybridIndex] = {}
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

    def _open(self, target: AliasTarget, *, mend: bool = False) -> GuardedIndex:
        """``target``'s guarded index (with its lexical side, for a hybrid one: ``mend``, one
        found out of step is brought in step, for an index being filled: a shadow)."""
        opened = self._opened.get(target)
        if opened is None:
            embedder = self.encoders.get(target.contract, alias=self.name)
            if target.hybrid is not None:
                hybrid = open_target(
                    self.catalog, target, embedder, sample=self.sample, refresh=mend,
                    alias=self.name,
                )  # fmt: skip
                self._hybrids[target] = hybrid
                opened = hybrid.dense.index
            else:
                check_dense_target(self.catalog, target, self.name)
                opened = GuardedIndex.open(
                    self.catalog.driver(target.index), embedder, create=False, sample=self.sample
                )
            self._opened[target] = opened
        return opened

    def _writer(self, target: AliasTarget, index: GuardedIndex) -> Any:
        """What writes ``target``: its guarded index, or for a hybrid one both its sides."""
        hybrid = self._hybrids.get(target)
        return index if hybrid is None else HybridWrites(hybrid)

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
                self._hybrids = {k: v for k, v in self._hybrids.items() if k in live}
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

    def hybrid_search(self, text: str, n_results: int = 10) -> AliasedHybridQuery:
        """Query the hybrid index the alias serves now, fused, under the alias's recorded
        hybrid contract (each side checked against its stamp, as
        :meth:`HybridIndex.query <ctxemb_core.hybrid.pair.HybridIndex.query>` does).

        Raises:
            InvalidInputError: the alias serves a dense index (no lexical side).
            NoEncoderError: the alias moved to a contract no encoder was given for.
        """
        with self._lock:
            self.refresh()
            record, serving = self._record, self._serving
            hybrid = self._hybrids.get(record.target)
        if hybrid is None or record.target.hybrid is None:
            raise InvalidInputError(
                f"alias {self.name!r} serves {record.target}, a dense index: it has no lexical "
                "side to fuse (query it with search)"
            )
        recorded = record.target.hybrid
        hits = hybrid.query(text, n_results, lexical=recorded.lexical, fusion=recorded.fusion)
        return AliasedHybridQuery(hits, serving.name, recorded.fingerprint, record.generation)

    def hybrid_query(self, text: str, n_results: int = 10) -> list[HybridHit]:
        """:meth:`hybrid_search`'s hits."""
        return self.hybrid_search(text, n_results).hits

    @property
    def hybrid(self) -> HybridIndex | None:
        """The hybrid pair the alias serves now (``None``: a dense index)."""
        record = self.refresh()
        with self._lock:
            return self._hybrids.get(record.target)

    @property
    def contract(self) -> Any:
        """The contract of the index the alias serves now."""
        return self.index.contract

    def count(self) -> int:
        return self.index.count()

    def ids(self) -> list[str]:
        return self.index.ids()

    # -- writing --------------------------------------------------------------------------

    def _each(self, first: Callable[[Any], Any], again: Callable[[Any], Any]) -> Any:
        """``first`` on the target, ``again`` on every other index the alias writes; then once
        more (``again`` everywhere) on whatever the alias writes if it moved meanwhile. Each is
        given what writes that index (:meth:`_writer`: both sides of a hybrid one)."""
        result = None
        done: set[AliasTarget] = set()
        record = self.refresh()
        for attempt in range(_FOLLOW):
            # Every encoder is found before anything is written (NoEncoderError changes nothing).
            indexes = [(t, self._open(t, mend=t != record.target)) for t in record.written()]
            for target, index in indexes:
                writer = self._writer(target, index)
                if attempt == 0 and target == record.target:
                    result = first(writer)
                else:
                    again(writer)
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

        def write(index: Any) -> None:
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

        def delete(index: Any) -> list[str]:
            return index.delete_missing(kept)

        return list(self._each(delete, delete))

    def delete(self, ids: Sequence[str] | None = None, *, where: Filter | None = None) -> list[str]:
        """Delete from every index the alias writes; returns the ids deleted from the target."""

        def delete(index: Any) -> list[str]:
            return index.delete(ids, where=where)

        return list(self._each(delete, delete))
