"""A stamped Qdrant collection bound to one contract: core's guarded index in core's shapes.

Every decision is :class:`~ctxemb_core.index.GuardedIndex`'s over a :class:`QdrantDriver`;
``query``, ``query_vectors`` and ``get`` answer in the shapes every ctxemb index object does
(:class:`~ctxemb_core.index.shaped.ShapedFacade`); ``raw`` is Qdrant's own client.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ctxemb_core.index.driver import Record
from ctxemb_core.index.shaped import ShapedFacade
from ctxemb_core.remedy import StoreTerms
from ctxemb_qdrant._driver import QdrantDriver
from ctxemb_qdrant._store import translated

__all__ = ["TERMS", "GuardedQdrantCollection", "StoredCollection"]

#: The adapter's words, in which its errors' advice names its calls and options.
TERMS = StoreTerms(
    module="ctxemb_qdrant",
    open="open_collection",
    kind="collection",
    records="points",
    cli_where="--store qdrant and the same --qdrant-path or --qdrant-url",
)


@dataclass(frozen=True)
class StoredCollection:
    """A collection as Qdrant describes it (``info``), unguarded, with where it is."""

    client: QdrantClient
    name: str
    info: qm.CollectionInfo


class GuardedQdrantCollection(ShapedFacade[QdrantDriver, StoredCollection]):
    """A Qdrant collection bound to one contract; every call is checked before it runs.

    ``index`` is its :class:`~ctxemb_core.index.GuardedIndex`; each call first reads the
    collection back (``get_collection``) to compare its identity, stamp and vector
    configuration with what was verified.
    """

    _driver_type = QdrantDriver
    _terms = TERMS

    @staticmethod
    def _translated(what: str) -> AbstractContextManager[None]:
        return translated(what)

    @property
    def client(self) -> QdrantClient:
        """Qdrant's own client (around the guard: what it writes is checked on the next open)."""
        return self.driver.client

    @classmethod
    def _stored_in(cls, driver: QdrantDriver) -> StoredCollection | None:
        info = driver._lookup()
        return None if info is None else StoredCollection(driver.client, driver.name, info)

    @classmethod
    def _missing(cls, driver: QdrantDriver, why: str) -> Exception:
        return driver._missing()

    def _select(
        self,
        ids: list[str] | None,
        where: Mapping[str, Any] | None,
        limit: int | None,
        offset: int,
        parts: frozenset[str],
    ) -> list[Record]:
        if where is None:
            return super()._select(ids, where, limit, offset, parts)
        self.index.check_filter(where)
        chosen = self.driver._selected(None, ids, where)
        chosen = chosen[offset:] if limit is None else chosen[offset : offset + limit]
        return self.driver.read(chosen, parts)
