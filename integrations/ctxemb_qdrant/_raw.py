"""A user's own ``qdrant-client`` calls on one collection, around the guard: the conformance
suite's :class:`~ctxemb_core.testing.conformance.RawAccess`, and what the tests tamper through.

Records are written as the driver lays them out (:func:`~ctxemb_qdrant._store.point_id`, the
payload of :func:`~ctxemb_qdrant._driver.payload_of`) but without the write sequence and check
of :func:`~ctxemb_core.index.driver_kit.sealed`, as a plain client writes them; metadata is
edited with ``update_collection``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ctxemb_core.errors import StoreUnavailableError
from ctxemb_core.index.driver import Record
from ctxemb_qdrant._driver import payload_of
from ctxemb_qdrant._store import calling, point_id

__all__ = ["RawQdrant"]


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
        points = [
            qm.PointStruct(
                id=point_id(r.id),
                vector={} if r.vector is None else np.asarray(r.vector, np.float32).tolist(),
                payload=payload_of(r),
            )
            for r in records
        ]
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

    @contextlib.contextmanager
    def failing_writes(self, after: int, error: BaseException | None = None) -> Iterator[None]:
        """The client's upserts fail once ``after`` points of them reached the store: the
        first points of the failing call are written, then ``error`` is raised."""
        error = error or StoreUnavailableError("qdrant: the write failed (armed by a test)")
        real = self.client.upsert
        left: list[int | None] = [after]

        def upsert(collection_name: str, points: Any, **kwargs: Any) -> Any:
            if left[0] is None:
                return real(collection_name, points, **kwargs)
            if len(points) <= left[0]:
                left[0] -= len(points)
                return real(collection_name, points, **kwargs)
            part, left[0] = list(points)[: left[0]], None
            if part:
                real(collection_name, part, **kwargs)
            raise error

        self.client.upsert = upsert  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            del self.client.upsert
