"""Where a store keeps its aliases, and the store as a whole that an upgrade works in.

A driver (:class:`~ctxemb_core.index.StoreDriver`) is one index. An alias belongs to the store:
it names one of its indexes and switches between them. A store adapter therefore gives two
things more for aliases:

- an :class:`AliasBook`: the alias records, each replaced only by a compare-and-swap on its
  generation (:meth:`AliasBook.swap`), atomically: a PostgreSQL row updated in one
  transaction, a record Chroma keeps in the same store, a store's native alias;
- a :class:`Catalog`: the store's indexes by name (a driver for any of them, whether one
  exists, dropping one) and its book.

A store with transactions gives a book through :class:`RowBook`: one row per alias, which it
says only how to run a statement on and how to make (PostgreSQL). A store without
transactions or conditional updates gives a book through :class:`ClaimBook`:
it needs only :class:`Claims`, records of unique names whose creation is atomic (of two clients
creating one name, one gets it), which it can list by prefix, read and delete (Chroma: a
collection holding the record in its metadata).

:class:`MemoryCatalog` is the reference, over a :class:`~ctxemb_core.index.MemoryStore`.

Example:
    >>> catalog = MemoryCatalog(MemoryStore())                     # doctest: +SKIP
    >>> catalog.aliases.swap(record, expected=None)                # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Protocol, runtime_checkable

from ctxemb_core.aliases.record import AliasRecord
from ctxemb_core.errors import AliasMovedError, InvalidInputError
from ctxemb_core.index.driver import StoreDriver
from ctxemb_core.index.embedded import OWN_PREFIX
from ctxemb_core.index.memory import MemoryStore
from ctxemb_core.remedy import Said

__all__ = [
    "AliasBook",
    "Catalog",
    "ClaimBook",
    "Claims",
    "MemoryAliasBook",
    "MemoryCatalog",
    "RowBook",
]


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


class Claims(Protocol):
    """Records of unique names in a store, each holding a text: what :class:`ClaimBook` needs.

    Its errors are the store's, translated into ctxemb's tree by the implementation.
    """

    def claim(self, key: str, text: str) -> bool:
        """Create record ``key`` holding ``text`` in one atomic step; ``False``, nothing
        written, when a record of that name exists (whoever made it, whenever)."""
        ...

    def keys(self, prefix: str) -> list[str]:
        """The names of the records that start with ``prefix``, in any order."""
        ...

    def read(self, key: str) -> str | None:
        """Record ``key``'s text, or ``None`` when there is no such record (any more)."""
        ...

    def remove(self, key: str) -> None:
        """Delete record ``key`` (nothing when it is gone; a failure is not raised: another
        client may be removing it too)."""
        ...


class ClaimBook:
    """An :class:`AliasBook` over :class:`Claims`, for a store without transactions.

    An alias's generation ``g`` is claimed by creating the record ``ctxemb-alias--<alias>--<g>``
    (``g`` in ten digits), holding the whole alias record; the alias's record is the one of the
    highest generation. A swap from ``g`` creates ``g + 1``: a second client deciding on ``g``
    finds it taken and writes nothing. The two newest claims are kept, older ones removed; a
    claim made over a removed generation by a client far behind is found below the newest and
    taken back.
    """

    PREFIX = OWN_PREFIX
    _CLAIM = re.compile(rf"{re.escape(PREFIX)}(?P<name>.+)--(?P<generation>\d{{10}})")
    #: How often a read lists the claims again when the newest was removed meanwhile (by a
    #: swap that made a newer one).
    _READS = 5

    def __init__(self, claims: Claims) -> None:
        self.claims = claims

    def _key(self, name: str, generation: int) -> str:
        return f"{self.PREFIX}{name}--{generation:010d}"

    def _generations(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for key in self.claims.keys(self.PREFIX):
            match = self._CLAIM.fullmatch(key)
            if match:
                found.setdefault(match["name"], []).append(int(match["generation"]))
        return {k: sorted(v) for k, v in found.items()}

    def _newest(self, name: str) -> int | None:
        generations = self._generations().get(name)
        return generations[-1] if generations else None

    def read(self, name: str) -> AliasRecord | None:
        for _ in range(self._READS):
            generation = self._newest(name)
            if generation is None:
                return None
            text = self.claims.read(self._key(name, generation))
            if text is not None:
                return AliasRecord.from_json(text, name)
        raise AliasMovedError(f"alias {name!r} keeps changing while it is read; read it again")

    def swap(self, record: AliasRecord, *, expected: int | None) -> bool:
        if self._newest(record.name) != expected:
            return False
        if record.generation != (expected or 0) + 1:
            raise InvalidInputError(
                f"alias {record.name!r}: generation {record.generation} does not follow {expected}"
            )
        key = self._key(record.name, record.generation)
        if not self.claims.claim(key, record.to_json()):
            return False
        if self._newest(record.name) != record.generation:
            # Claimed over a generation already removed, below the newest: not ours to take.
            self.claims.remove(key)
            return False
        for old in self._generations().get(record.name, [])[:-2]:
            self.claims.remove(self._key(record.name, old))  # another swap may remove it first
        return True

    def names(self) -> list[str]:
        return sorted(self._generations())


class RowBook:
    """An :class:`AliasBook` as one row per alias in a table, for a store with transactions (a
    SQL database): ``(name, generation, record)``, the record as JSON.

    A swap is one statement: an ``UPDATE`` that holds only while the row's generation is the
    one the change was decided on, or an ``INSERT`` that holds only while there is no row; of
    two clients deciding on one generation, the database lets one change a row. A subclass
    gives its database's words: :meth:`_run` (a statement with ``?`` placeholders and
    ``{table}`` for the table's name), :meth:`_exists` and :meth:`_create` (the table made
    once, by one of several first writers), what holds around each call (:meth:`_running`), and
    where its column types differ, how the record is written (:meth:`_value`) and read back as
    text (:attr:`RECORD`).
    """

    #: The expression that reads the record column as JSON text.
    RECORD = "record"

    def _run(self, query: str, params: tuple[Any, ...] = ()) -> tuple[list[tuple[Any, ...]], int]:
        """Run ``query`` (its own transaction): the rows it returned, and how many it changed."""
        raise NotImplementedError

    def _exists(self) -> bool:
        """Whether the table is there."""
        raise NotImplementedError

    def _create(self) -> None:
        """Make the table unless it is there (two first writers at once make one)."""
        raise NotImplementedError

    def _value(self, record: AliasRecord) -> Any:
        """The record as the table's column takes it (default: its JSON text)."""
        return record.to_json()

    def _running(self, what: str) -> contextlib.AbstractContextManager[None]:
        """Held around each call while ``what`` runs: the database's errors as ctxemb's, a
        connection shared by threads taken in turn (a store's; nothing here)."""
        return contextlib.nullcontext()

    def read(self, name: str) -> AliasRecord | None:
        with self._running(f"reading alias {name!r}"):
            if not self._exists():
                return None
            rows, _ = self._run(f"SELECT {self.RECORD} FROM {{table}} WHERE name = ?", (name,))
        return AliasRecord.from_json(rows[0][0], name) if rows else None

    def swap(self, record: AliasRecord, *, expected: int | None) -> bool:
        with self._running(f"writing alias {record.name!r}"):
            if not self._exists():
                self._create()
            value = self._value(record)
            if expected is None:
                query = (
                    "INSERT INTO {table} (name, generation, record) VALUES (?, ?, ?) "
                    "ON CONFLICT (name) DO NOTHING"
                )
                _, changed = self._run(query, (record.name, record.generation, value))
            else:
                query = (
                    "UPDATE {table} SET generation = ?, record = ?, changed = CURRENT_TIMESTAMP "
                    "WHERE name = ? AND generation = ?"
                )
                _, changed = self._run(query, (record.generation, value, record.name, expected))
        return changed == 1

    def names(self) -> list[str]:
        with self._running("listing aliases"):
            if not self._exists():
                return []
            rows, _ = self._run("SELECT name FROM {table} ORDER BY name")
        return [r[0] for r in rows]


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


def refuse_alias_member(catalog: Catalog, index: str, what: str) -> None:
    """Refuse ``what`` (a change to index ``index`` that its readers would have to follow, such
    as a re-stamp) when an alias serves the index, upgrades into it or keeps it for a rollback:
    the alias's readers embed under the contract the alias records, so the change goes through
    the alias (an upgrade), never around it.

    Raises:
        AliasConflictError: naming each alias and the role the index plays in it.
    """
    from ctxemb_core.errors import AliasConflictError

    held: list[str] = []
    for name in catalog.aliases.names():
        record = catalog.aliases.read(name)
        if record is None:
            continue
        roles = (
            ("target", record.target),
            ("shadow", record.shadow),
            ("previous", record.previous),
        )
        held += [f"{name!r} ({role})" for role, t in roles if t is not None and t.index == index]
    if held:
        first = held[0].split(" (")[0].strip("'")
        upgrade = Said(
            f"begin_upgrade(catalog, {first!r}, ...) from ctxemb_core.aliases",
            f"ctxemb upgrade {first} with the new contract's options",
        )
        raise upgrade.into(
            AliasConflictError,
            f"cannot {what} index {index!r}: alias {', '.join(held)} holds it, and the alias's "
            "readers embed under the contract it records. Change the contract through the "
            "alias instead: {do} (a shadow under it, readers following at the cutover); "
            "nothing was written",
        )
