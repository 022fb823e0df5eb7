"""Chroma's aliases, in the same store: with no transaction nor conditional update, a claim of
core's :class:`~ctxemb_core.aliases.ClaimBook` is a collection (creating a name is atomic: of
two clients, one gets it), holding the alias record in its metadata."""

from __future__ import annotations

import contextlib
from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._store import check_client, check_name, store_address, stored_or_none, translated
from ctxemb_core.aliases import ClaimBook
from ctxemb_core.store_tools import FolderHybrids

__all__ = ["ChromaCatalog", "ChromaClaims", "catalog"]

#: The metadata key of a claim collection that holds the alias record.
KEY = "ctxemb:alias"


class ChromaClaims:
    """Core's :class:`~ctxemb_core.aliases.Claims` as collections of one store."""

    def __init__(self, client: ClientAPI) -> None:
        self.client = client

    def claim(self, key: str, text: str) -> bool:
        try:
            self.client.create_collection(key, metadata={KEY: text}, embedding_function=None)
        except Exception as exc:
            if "already exists" in str(exc) or "UniqueConstraint" in type(exc).__name__:
                return False
            with translated(f"writing alias record {key!r}"):
                raise
        return True

    def keys(self, prefix: str) -> list[str]:
        with translated("listing the store's aliases"):
            names = [str(getattr(c, "name", c)) for c in self.client.list_collections()]
        return [n for n in names if n.startswith(prefix)]

    def read(self, key: str) -> str | None:
        raw = stored_or_none(self.client, key)
        return None if raw is None else str((raw.metadata or {}).get(KEY, ""))

    def remove(self, key: str) -> None:
        with contextlib.suppress(Exception):
            self.client.delete_collection(key)


class ChromaCatalog(FolderHybrids):
    """A Chroma store as an upgrade sees it: its collections by name and its aliases."""

    tools = "ctxemb_chroma._tools:TOOLS"  # its drivers and hybrid indexes (the side beside it)

    def __init__(self, client: ClientAPI) -> None:
        self.client = check_client(client)
        self.aliases = ClaimBook(ChromaClaims(self.client))

    def exists(self, name: str) -> bool:
        return stored_or_none(self.client, name) is not None

    def _drop(self, name: str) -> None:
        with translated(f"dropping collection {name!r}"):
            if stored_or_none(self.client, name) is not None:
                self.client.delete_collection(name)

    def describe(self) -> str:
        return store_address(self.client)

    def _metadata(self, name: str) -> Any:
        found = stored_or_none(self.client, check_name(name))
        return found.metadata if found is not None else None


def catalog(client: Any) -> ChromaCatalog:
    """The store ``client`` reaches, for aliases and upgrades."""
    return ChromaCatalog(client)
