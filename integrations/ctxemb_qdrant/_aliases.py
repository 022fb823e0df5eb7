"""Qdrant's aliases: the store's own alias, switched by its atomic alias operation, and the
alias record ctxemb keeps beside it.

Qdrant has an alias of its own: a name that every Qdrant client (ctxemb's or not) searches as if
it were the collection it points at, switched by one ``update_collection_aliases`` call whose
operations apply together (local mode applies them to a copy and saves it whole; the server in
one request). It holds only a target, though: no generation to compare and swap, no contract,
no shadow or previous index. So an alias is two things here:

- the **record** (generation, state, target, shadow, previous, each target's contract): core's
  :class:`~ctxemb_core.aliases.ClaimBook`, whose claims are collections. Creating a collection
  is Qdrant's one atomic, unique step (of two clients creating one name, one gets it; the server
  refuses the second, local mode checks under the client's lock), so the compare-and-swap is
  the creation of the claim of the next generation, as for Chroma;
- the **native alias**: after every swap, the Qdrant alias of the same name is pointed at the
  record's target in one alias operation (delete and create together). A raw ``qdrant-client``
  reader of the alias therefore follows the upgrade's cutover and rollback too, switched
  atomically, while ctxemb's readers follow the record (and with it the contract their queries
  are embedded under). A swap that lost a race still leaves the native alias on the newest
  record's target: each writer re-reads the newest record after pointing the alias and points
  it again if it moved.

The collections' stamps are the drivers': a target's contract is what its stamp says, and core
checks the two agree whenever an alias is created or switched.
"""

from __future__ import annotations

import contextlib
from typing import Any

from qdrant_client import QdrantClient, models

from ctxemb_core.aliases import AliasRecord, ClaimBook
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.store_tools import FolderHybrids

__all__ = ["KEY", "QdrantAliasBook", "QdrantCatalog", "QdrantClaims", "catalog", "native_target"]

#: The metadata key of a claim collection that holds the alias record.
KEY = "ctxemb:alias"
#: How often a writer points the native alias again when the newest record moved meanwhile.
_POINTINGS = 5


def _calling(client: QdrantClient, what: str) -> Any:
    from ctxemb_qdrant._store import calling

    return calling(client, what)


def _collections(client: QdrantClient) -> list[str]:
    """The store's collections by name (aliases are not collections)."""
    with _calling(client, "listing the store's collections"):
        return [c.name for c in client.get_collections().collections]


def native_target(client: QdrantClient, name: str) -> str | None:
    """The collection Qdrant's alias ``name`` points at (``None``: no such alias)."""
    with _calling(client, f"reading Qdrant alias {name!r}"):
        found = client.get_aliases().aliases
    return next((a.collection_name for a in found if a.alias_name == name), None)


class QdrantClaims:
    """Core's :class:`~ctxemb_core.aliases.Claims` as collections of one Qdrant store."""

    def __init__(self, client: QdrantClient) -> None:
        self.client = client

    def claim(self, key: str, text: str) -> bool:
        with _calling(self.client, f"writing alias record {key!r}"):
            if self.client.collection_exists(key):  # local mode: checked under the client's lock
                return False
            try:
                self.client.create_collection(key, vectors_config={}, metadata={KEY: text})
            except Exception as exc:  # the server: another client created it first
                if "already exists" in str(exc):
                    return False
                raise
        return True

    def keys(self, prefix: str) -> list[str]:
        return [n for n in _collections(self.client) if n.startswith(prefix)]

    def read(self, key: str) -> str | None:
        with _calling(self.client, f"reading alias record {key!r}"):
            try:
                info = self.client.get_collection(key)
            except Exception as exc:
                if "not found" in str(exc).lower() or "doesn't exist" in str(exc):
                    return None
                raise
        return str((info.config.metadata or {}).get(KEY, ""))

    def remove(self, key: str) -> None:
        with contextlib.suppress(Exception), _calling(self.client, f"removing {key!r}"):
            self.client.delete_collection(key)


class QdrantAliasBook(ClaimBook):
    """The aliases of one Qdrant store: records as claims, each alias also Qdrant's own (see
    the module's docstring)."""

    def __init__(self, client: QdrantClient) -> None:
        super().__init__(QdrantClaims(client))
        self.client = client

    def swap(self, record: AliasRecord, *, expected: int | None) -> bool:
        if not super().swap(record, expected=expected):
            return False
        self.point(record.name)
        return True

    def point(self, name: str) -> str | None:
        """Point Qdrant's alias ``name`` at the target of its newest record, in one atomic alias
        operation; returns that target (``None``: no record)."""
        for _ in range(_POINTINGS):
            record = self.read(name)
            if record is None:
                return None
            target = record.target.index
            now = native_target(self.client, name)
            if now == target:
                return target
            operations: list[Any] = []
            if now is not None:
                operations.append(
                    models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name))
                )
            operations.append(
                models.CreateAliasOperation(
                    create_alias=models.CreateAlias(collection_name=target, alias_name=name)
                )
            )
            with _calling(self.client, f"switching Qdrant alias {name!r} to {target!r}"):
                self.client.update_collection_aliases(change_aliases_operations=operations)
        return native_target(self.client, name)


class QdrantCatalog(FolderHybrids):
    """A Qdrant store as an upgrade sees it: its collections by name and its aliases."""

    tools = "ctxemb_qdrant._tools:TOOLS"  # its drivers and hybrid indexes (the side beside it)

    def __init__(self, client: QdrantClient) -> None:
        if not isinstance(client, QdrantClient):
            raise InvalidInputError(
                f"a Qdrant catalog needs a qdrant_client.QdrantClient (ctxemb_qdrant.connect), "
                f"got {type(client).__name__}"
            )
        self.client = client
        self.aliases = QdrantAliasBook(client)

    def exists(self, name: str) -> bool:
        # A collection, never an alias: Qdrant resolves an alias wherever a collection is named,
        # and an alias is not an index.
        return name in _collections(self.client)

    def _drop(self, name: str) -> None:
        """Drop collection ``name`` (Qdrant drops the aliases pointing at it with it)."""
        with _calling(self.client, f"dropping collection {name!r}"):
            if name in [c.name for c in self.client.get_collections().collections]:
                self.client.delete_collection(name)

    def describe(self) -> str:
        from ctxemb_qdrant._store import store_address

        return store_address(self.client)

    def _metadata(self, name: str) -> Any:
        if not self.exists(name):
            return None
        with _calling(self.client, f"reading collection {name!r}"):
            return self.client.get_collection(name).config.metadata


def catalog(client: Any) -> QdrantCatalog:
    """The store ``client`` reaches, for aliases and upgrades."""
    return QdrantCatalog(client)
