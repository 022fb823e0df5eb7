"""Where a store keeps its aliases, and the store as a whole that an upgrade works in.

A driver (:class:`~ctxemb_core.index.StoreDriver`) is one index. An alias belongs to the store:
it names one of its indexes and switches between them. A store adapter therefore gives two
things more for aliases:

- an :class:`AliasBook`: the alias records, each replaced only by a compare-and-swap on its
  generation (:meth:`AliasBook.swap`), atomically: a PostgreSQL row updated in one
  transaction, a record Chroma keeps in the same store, a store's native alias;
- a :class:`Catalog`: the store's indexes by name (a driver for any of them, whether one
  exists, dropping one) and its book.

:class:`MemoryCatalog` is the reference, over a :class:`~ctxemb_core.index.MemoryStore`.

Example:
    >>> catalog = MemoryCatalog(MemoryStore())                     # doctest: +SKIP
    >>> catalog.aliases.swap(record, expected=None)                # doctest: +SKIP
    True
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ctxemb_core.aliases.record import AliasRecord
from ctxemb_core.index.driver import StoreDriver
from ctxemb_core.index.memory import MemoryStore

__all__ = ["AliasBook", "Catalog", "MemoryAliasBook", "MemoryCatalog"]


@runtime_checkable
class AliasBook(Protocol):
    """The aliases of one store."""

    def read(self, name: str) -> AliasRecord | None:
        """Alias ``name``'s record, or ``None`` when there is none.

        Raises:
            DamagedAliasError: a stored record that cannot be read.
        """
        ...

    def swap(self, record: AliasRecord, *, expected: int | None) -> bool:
        """Write ``record`` in one atomic step if the stored generation is still ``expected``
        (``None``: only if the alias does not exist); ``False``, nothing written, otherwise."""
        ...

    def names(self) -> list[str]:
        """Every alias's name, sorted."""
        ...


@runtime_checkable
class Catalog(Protocol):
    """A store as a whole: its indexes by name and its aliases."""

    aliases: AliasBook

    def driver(self, name: str) -> StoreDriver:
        """The driver of index ``name`` (which need not exist yet)."""
        ...

    def exists(self, name: str) -> bool:
        """Whether an index of this name exists."""
        ...

    def drop(self, name: str) -> None:
        """Drop index ``name`` and everything it holds (nothing when there is none)."""
        ...

    def describe(self) -> str:
        """Which store this is (for messages; never a password)."""
        ...


class MemoryAliasBook:
    """Aliases kept beside a :class:`MemoryStore`'s indexes, under its lock (every catalog of
    one store reads and writes the same aliases)."""

    def __init__(self, store: MemoryStore) -> None:
        self._lock = store.lock
        # The JSON form, as a store keeps it, held by the store: every handle sees one book.
        if not hasattr(store, "ctxemb_aliases"):
            store.ctxemb_aliases = {}  # type: ignore[attr-defined]
        self._stored: dict[str, str] = store.ctxemb_aliases  # type: ignore[attr-defined]

    def read(self, name: str) -> AliasRecord | None:
        with self._lock:
            text = self._stored.get(name)
        return None if text is None else AliasRecord.from_json(text, name)

    def swap(self, record: AliasRecord, *, expected: int | None) -> bool:
        with self._lock:
            text = self._stored.get(record.name)
            now = None if text is None else AliasRecord.from_json(text, record.name).generation
            if now != expected:
                return False
            self._stored[record.name] = record.to_json()
            return True

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._stored)

    def tamper(self, name: str, text: str) -> None:
        """Replace a stored record with ``text`` around the book (for tests)."""
        with self._lock:
            self._stored[name] = text


class MemoryCatalog:
    """The reference :class:`Catalog`: a :class:`MemoryStore` and its aliases."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store if store is not None else MemoryStore()
        self.aliases = MemoryAliasBook(self.store)

    def driver(self, name: str) -> StoreDriver:
        return self.store.driver(name)

    def exists(self, name: str) -> bool:
        return name in self.store.names()

    def drop(self, name: str) -> None:
        with self.store.lock:
            self.store.indexes.pop(name, None)

    def describe(self) -> str:
        return f"memory:{self.store.id}"
