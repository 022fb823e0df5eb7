"""Chroma's aliases: records ctxemb keeps in the same store, embedded or server.

Chroma has no transaction and no conditional update, but creating a collection is atomic and
its name unique: of two clients creating one name, one gets it. An alias's generation ``g`` is
therefore claimed by creating the collection ``ctxemb-alias--<alias>--<g>``, holding the whole
record in its metadata; the record is the one of the highest generation. A swap from ``g``
creates ``g + 1``: a second client deciding on ``g`` finds it taken and writes nothing. The two
newest claims are kept, older ones removed; a claim made over a removed generation by a client
far behind is found below the newest and taken back.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._driver import ChromaDriver
from ctxemb_chroma._store import check_client, check_name, stored_or_none, translated
from ctxemb_core.aliases import AliasRecord
from ctxemb_core.errors import InvalidInputError

__all__ = ["ChromaAliasBook", "ChromaCatalog", "catalog"]

PREFIX = "ctxemb-alias--"
#: The metadata key of a claim collection that holds the alias record.
KEY = "ctxemb:alias"
_CLAIM = re.compile(rf"{re.escape(PREFIX)}(?P<name>.+)--(?P<generation>\d{{10}})")


def _claim(name: str, generation: int) -> str:
    return f"{PREFIX}{name}--{generation:010d}"


class ChromaAliasBook:
    """The aliases of one Chroma store (see the module's docstring)."""

    def __init__(self, client: ClientAPI) -> None:
        self.client = client

    def _claims(self) -> dict[str, list[int]]:
        with translated("listing the store's aliases"):
            names = [str(getattr(c, "name", c)) for c in self.client.list_collections()]
        found: dict[str, list[int]] = {}
        for collection in names:
            match = _CLAIM.fullmatch(collection)
            if match:
                found.setdefault(match["name"], []).append(int(match["generation"]))
        return {k: sorted(v) for k, v in found.items()}

    def _newest(self, name: str) -> int | None:
        generations = self._claims().get(name)
        return generations[-1] if generations else None

    def read(self, name: str) -> AliasRecord | None:
        generation = self._newest(name)
        if generation is None:
            return None
        with translated(f"reading alias {name!r}"):
            raw = self.client.get_collection(_claim(name, generation), embedding_function=None)
        return AliasRecord.from_json(str((raw.metadata or {}).get(KEY, "")), name)

    def swap(self, record: AliasRecord, *, expected: int | None) -> bool:
        if self._newest(record.name) != expected:
            return False
        if record.generation != (expected or 0) + 1:
            raise InvalidInputError(
                f"alias {record.name!r}: generation {record.generation} does not follow {expected}"
            )
        claim = _claim(record.name, record.generation)
        try:
            self.client.create_collection(
                claim, metadata={KEY: record.to_json()}, embedding_function=None
            )
        except Exception as exc:
            if "already exists" in str(exc) or "UniqueConstraint" in type(exc).__name__:
                return False
            with translated(f"writing alias {record.name!r}"):
                raise
        if self._newest(record.name) != record.generation:
            # Claimed over a generation already removed, below the newest: not ours to take.
            with contextlib.suppress(Exception):
                self.client.delete_collection(claim)
            return False
        for old in self._claims().get(record.name, [])[:-2]:
            with contextlib.suppress(Exception):  # another swap may remove it first
                self.client.delete_collection(_claim(record.name, old))
        return True

    def names(self) -> list[str]:
        return sorted(self._claims())


class ChromaCatalog:
    """A Chroma store as an upgrade sees it: its collections by name and its aliases."""

    def __init__(self, client: ClientAPI) -> None:
        self.client = check_client(client)
        self.aliases = ChromaAliasBook(self.client)

    def driver(self, name: str) -> ChromaDriver:
        return ChromaDriver(self.client, check_name(name))

    def exists(self, name: str) -> bool:
        return stored_or_none(self.client, name) is not None

    def drop(self, name: str) -> None:
        """Drop collection ``name`` and, for an embedded store, its lexical side's folder."""
        from ctxemb_chroma._tools import LEXICAL_FOLDER

        with translated(f"dropping collection {name!r}"):
            if stored_or_none(self.client, name) is not None:
                self.client.delete_collection(name)
        settings = self.client.get_settings()
        if settings.is_persistent and settings.persist_directory:
            from pathlib import Path

            shutil.rmtree(Path(settings.persist_directory) / LEXICAL_FOLDER / name, True)

    def describe(self) -> str:
        from ctxemb_chroma._driver import store_address

        return store_address(self.client)


def catalog(client: Any) -> ChromaCatalog:
    """The store ``client`` reaches, for aliases and upgrades."""
    return ChromaCatalog(client)
