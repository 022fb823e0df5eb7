"""A user's own ``qdrant-client`` calls on one collection, around the guard: the conformance
suite's :class:`~ctxemb_core.testing.conformance.RawAccess` for Qdrant, and what the tests
tamper through (each store's raw client is its tests' own, as ``docs/architecture.md``, "How to
add a store", says).

Records are written as the driver lays them out (:func:`~ctxemb_qdrant._serving.points_of`, the
payload of :data:`~ctxemb_qdrant._serving.LAYOUT`) but without the write sequence and check of
:func:`~ctxemb_core.index.driver_kit.sealed`, as a plain client writes them; metadata is edited
with ``update_collection``; a failing write is armed in core (:mod:`ctxemb_core.index.armed`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ctxemb_core.index.armed import armed
from ctxemb_core.index.driver import Record
from ctxemb_qdrant._driver import QdrantDriver
from ctxemb_qdrant._serving import LAYOUT, points_of
from ctxemb_qdrant._store import calling


class RawQdrant:
    """Qdrant's own client of collection ``name`` (no check of any kind)."""

    def __init__(self, client: QdrantClient, name: str, width: int = 16) -> None:
        self.client = client
        self.name = name
        self.width = width

    def create(self, metadata: Mapping[str, Any] | None = None) -> None:
        """A collection as a plain client makes one (Cosine, no ctxemb nonce)."""
        params = qm.VectorParams(size=self.width, distance=qm.Distance.COSINE)
        with calling(self.client, "raw create"):
            self.client.create_collection(
                self.name, vectors_config=params, metadata=dict(metadata or {}) or None
            )

    def write(self, records: Sequence[Record]) -> None:
        points = points_of(records, [LAYOUT.payload(r) for r in records])
        with calling(self.client, "raw write"):
            self.client.upsert(self.name, points, wait=True)

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """The metadata replaced whole: Qdrant merges, so the keys not given are sent as null."""
        with calling(self.client, "raw metadata"):
            held = self.client.get_collection(self.name).config.metadata or {}
            gone = {k: None for k in held if k not in metadata and k != "ctxemb_identity"}
            self.client.update_collection(self.name, metadata={**dict(metadata), **gone})

    def drop(self) -> None:
        with calling(self.client, "raw drop"):
            self.client.delete_collection(self.name)

    def failing_writes(
        self, after: int, error: BaseException | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """The driver's next write to the collection fails (``error``, default
        ``StoreUnavailableError``) once ``after`` of its points reached the store: the points
        of its calls before the failure are written, as a plain failing upsert leaves them."""
        key = QdrantDriver(self.client, self.name)._key()
        return armed(key, after, error, store="Qdrant")
