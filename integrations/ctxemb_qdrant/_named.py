"""Named vectors: one Qdrant collection holding a vector per contract, each with its own stamp.

A Qdrant point may carry several vectors, each under a name with its own width and distance, and
since Qdrant 1.18 (``qdrant-client`` 1.20, local mode included) a named vector can be added to
or dropped from an existing collection (``create_vector_name``, ``delete_vector_name``). That
makes an upgrade possible in place, without a second copy of the payload:

1. :func:`add_named_vector`: add vector ``name`` for the new contract, and its stamp;
2. :func:`backfill_named`: embed every point's text under the new contract and write only that
   vector (``update_vectors``: the point's other vectors and payload stay as they are);
   resumable, it writes only the points whose new vector is missing or is not of their text;
3. :func:`switch_named`: make ``name`` the vector the collection serves, in one metadata write:
   every ordinary reader (``open_collection``, core's tools, the ``ctxemb`` commands, the
   frameworks' Qdrant stores: all through the driver, whose vector ``_serving`` decides) then
   serves ``name`` under its contract and refuses the old contract, naming the switch back.
   Writes through the guard then go to ``name``, each point written whole (Qdrant's upsert):
   the points written after the switch lose their other vectors, so a rollback
   (``switch_named`` back) is refused until :func:`backfill_named` gave them the old one again.

Each named vector's stamp is kept in the collection's metadata under :data:`VECTORS_KEY`
(``{vector name: the stamp's metadata}``), so two contracts never share a stamp; which one the
collection serves is :data:`SERVING_KEY`. Before the switch, a named vector opens through the
guard as a :class:`NamedVectorView`: core's :class:`~ctxemb_core.index.GuardedIndex` over it
verifies the stamp, the canary and a sample of the records and searches that vector, as it does
any driver.

What the view does not do is write through the guard, and that is the driver protocol's limit,
not Qdrant's: a :class:`~ctxemb_core.index.StoreDriver` is one index whose records are written
and deleted whole (``write(replace=True)`` replaces vector, text and metadata together), while a
named vector is a slice of points it shares with the collection's other vectors (writing one
vector must keep the others; deleting a record from one contract's index must keep the point for
the other; the write mark and the payload are shared). An alias target is an index *name*, not
(collection, vector). ``docs/qdrant-advanced.md`` lists what the protocol would need.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import QdrantClient, models

from ctxemb_core.contract import same_contract
from ctxemb_core.documents import text_digest
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError, MissingStampError
from ctxemb_core.index.driver import INCLUDE, Capabilities, Head, Hit, Record, StampRead
from ctxemb_core.index.payloads import PayloadLayout
from ctxemb_core.stamp import IndexStamp
from ctxemb_qdrant._driver import _SPACES
from ctxemb_qdrant._serving import IDENTITY_KEY, LAYOUT, SERVING_KEY, VECTORS_KEY, Served
from ctxemb_qdrant._serving import vector_params as _vector_params

__all__ = [
    "SERVING_KEY",
    "VECTORS_KEY",
    "NamedVectorView",
    "add_named_vector",
    "backfill_named",
    "serving_vector",
    "switch_named",
    "vector_stamps",
]

#: The distance of a named vector ctxemb adds: Dot, as the driver's collections (Qdrant keeps a
#: Cosine vector normalised on write, a Dot one bit for bit; a normalised contract ranks alike).
DISTANCE = models.Distance.DOT
_PAGE = 256


def _calling(client: QdrantClient, what: str) -> Any:
    from ctxemb_qdrant._store import calling

    return calling(client, what)


def _info(client: QdrantClient, collection: str) -> Any:
    from ctxemb_qdrant._store import collection_info

    with _calling(client, f"reading collection {collection!r}"):
        return collection_info(client, collection)


def _metadata(info: Any) -> dict[str, Any]:
    return dict(info.config.metadata or {})


def vector_stamps(client: QdrantClient, collection: str) -> dict[str, Mapping[str, Any]]:
    """The stamps of ``collection``'s named vectors, by vector name."""
    info = _info(client, collection)
    stamps = _metadata(info).get(VECTORS_KEY) if info is not None else None
    return dict(stamps) if isinstance(stamps, Mapping) else {}


def _stamp(client: QdrantClient, collection: str, name: str) -> Mapping[str, Any] | None:
    """Vector ``name``'s stamp, where ``_serving`` keeps it (:meth:`Served.stamp`: its entry of
    :data:`VECTORS_KEY`; the unnamed vector's (``""``) is the collection's own metadata)."""
    info = _info(client, collection)
    served = Served(collection, name, LAYOUT, switched=False)
    held = None if info is None else served.stamp(info.config.metadata)
    return held if held is not None and IndexStamp.is_stamped(held) else None


def serving_vector(client: QdrantClient, collection: str) -> str | None:
    """The named vector ``collection`` serves (``None``: none was switched to)."""
    info = _info(client, collection)
    value = _metadata(info).get(SERVING_KEY) if info is not None else None
    return value if isinstance(value, str) else None


class NamedVectorView:
    """One named vector of a collection as a read-only driver: what core's guard opens, verifies
    and searches (see the module's docstring).

    Args:
        client: the store's client.
        collection: the collection.
        vector: the named vector (``""``: the unnamed one).
        text_key: the payload key holding a point's text (``page_content`` as ctxemb and
            ``langchain-qdrant`` write it; ``document`` as ``qdrant-client`` + fastembed did).
        metadata_key: the payload key holding a point's metadata (``None``: the rest of the
            payload is its metadata, as fastembed wrote it).
    """

    #: ``transactions``: a write is refused whole before anything is sent, so the guard has
    #: nothing to undo. ``seals``: none of its records is proven (:meth:`listed`).
    capabilities = Capabilities(filters=True, transactions=True, seals=True)

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        vector: str,
        *,
        text_key: str = "page_content",
        metadata_key: str | None = "metadata",
    ) -> None:
        self.client = client
        self.collection = collection
        self.vector = vector
        self.text_key = text_key
        self.metadata_key = metadata_key
        self.layout = PayloadLayout(text=text_key, metadata=metadata_key)

    @property
    def name(self) -> str:
        return f"{self.collection}#{self.vector}"

    def describe(self) -> str:
        from ctxemb_qdrant._store import store_address

        return store_address(self.client)

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        return None

    # -- head and stamp ---------------------------------------------------------------------

    def _read(self) -> tuple[Any, Head] | None:
        info = _info(self.client, self.collection)
        if info is None:
            return None
        params = _vector_params(info).get(self.vector)
        if params is None:
            return None
        stamp = self._stamp_of(_metadata(info))
        seen = json.dumps([stamp, params.size, str(params.distance)], sort_keys=True, default=str)
        # The collection's creation nonce where it has one (given by add_named_vector): a
        # collection made again under the name, its stamps copied, is another index.
        nonce = _metadata(info).get(IDENTITY_KEY)
        head = Head(
            identity=f"{self.collection}#{self.vector}" + (f"@{nonce}" if nonce else ""),
            stamp_version=hashlib.sha256(seen.encode()).hexdigest()[:16],
            space=_SPACES.get(params.distance, "cosine"),
        )
        return info, head

    def _stamp_of(self, metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return Served(self.collection, self.vector, self.layout, switched=False).stamp(metadata)

    def head(self) -> Head | None:
        read = self._read()
        return None if read is None else read[1]

    def read_stamp(self) -> StampRead | None:
        read = self._read()
        if read is None:
            return None
        info, head = read
        return StampRead(head, self._stamp_of(_metadata(info)))

    def write_stamp(self, stamp: IndexStamp, *, stamp_version: Any) -> bool:
        """Write this named vector's stamp (an adoption), keeping the other vectors' stamps and
        the collection's other metadata; ``False`` if the stamp version moved."""
        with _calling(self.client, f"stamping vector {self.vector!r} of {self.collection!r}"):
            head = self.head()
            if head is None or head.stamp_version != stamp_version:
                return False
            stamps = vector_stamps(self.client, self.collection)
            stamps[self.vector] = stamp.to_metadata()
            self.client.update_collection(self.collection, metadata={VECTORS_KEY: stamps})
        return True

    def create(self, stamp: IndexStamp) -> bool:
        raise InvalidInputError(
            f"{self.name}: a named vector is added with ctxemb_qdrant.add_named_vector"
        )

    # -- records ----------------------------------------------------------------------------

    def _has_vector(self) -> models.Filter:
        return models.Filter(must=[models.HasVectorCondition(has_vector=self.vector)])

    def _record(self, point: Any, include: frozenset[str]) -> Record:
        vector = None
        if "vector" in include:
            vector = point.vector.get(self.vector) if isinstance(point.vector, dict) else None
            if self.vector == "" and not isinstance(point.vector, dict):
                vector = point.vector
        return self.layout.record(point.payload, point.id, vector, include)

    def _scroll(self, limit: int, include: frozenset[str]) -> list[Any]:
        with _calling(self.client, f"reading {self.name}"):
            points, _ = self.client.scroll(
                self.collection,
                scroll_filter=self._has_vector(),
                limit=max(limit, 1),
                with_payload=True,
                with_vectors=[self.vector] if "vector" in include else False,
            )
        return list(points)

    def count(self) -> int:
        with _calling(self.client, f"counting {self.name}"):
            return self.client.count(self.collection, self._has_vector(), exact=True).count

    def page(self, offset: int, limit: int, include: frozenset[str] = INCLUDE) -> list[Record]:
        # Qdrant scrolls in point-id order and keeps no write order for points it did not number
        # (fastembed's are random UUIDs): the sample's "newest" half is a fixed slice here.
        points = self._scroll(offset + limit, include)[offset : offset + limit]
        return [self._record(p, include) for p in points]

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        end = self.count() if limit is None else offset + limit
        return [r.id for r in self.page(offset, end - offset, frozenset())]

    def listed(self) -> tuple[list[str], list[str]]:
        """Every id, each unproven: a named vector's points keep no order a write moves
        (``update_vectors`` leaves a point where it was) and no seal of their own (the payload
        is every vector's), so every open samples them as an open without a record does."""
        ids = self.ids()
        return ids, ids

    def seal(self, ids: Sequence[str]) -> list[str]:
        return []  # nothing of a point is this vector's own to seal (see :meth:`listed`)

    def read(self, ids: Sequence[str], include: frozenset[str] = INCLUDE) -> list[Record]:
        wanted = set(ids)
        found = {r.id: r for r in self.page(0, self.count(), include) if r.id in wanted}
        return [found[i] for i in ids if i in found]

    def changes(self, since: int) -> list[str]:
        raise InvalidInputError(f"{self.name} keeps no write mark")

    def write(self, records: Sequence[Record], *, replace: bool, stamp_version: Any = None) -> None:
        raise InvalidInputError(
            f"{self.name} is a named vector, read through the guard: write it with "
            "ctxemb_qdrant.backfill_named (the driver protocol writes records whole)"
        )

    def delete(self, ids: Any = None, *, where: Any = None, stamp_version: Any = None) -> list[str]:
        raise InvalidInputError(f"{self.name} is a named vector, read through the guard")

    def search(self, vector: np.ndarray, k: int, *, where: Any = None) -> list[Hit]:
        must: list[Any] = [models.HasVectorCondition(has_vector=self.vector)]
        for key, value in (where or {}).items():
            field = key if self.metadata_key is None else f"{self.metadata_key}.{key}"
            must.append(models.FieldCondition(key=field, match=models.MatchValue(value=value)))
        with _calling(self.client, f"searching {self.name}"):
            found = self.client.query_points(
                self.collection,
                query=np.asarray(vector, dtype=np.float32).tolist(),
                using=self.vector or None,
                query_filter=models.Filter(must=must),
                limit=k,
                with_payload=True,
                with_vectors=[self.vector],
            ).points
        space = self.head().space if found else "cosine"  # type: ignore[union-attr]
        hits = []
        for point in found:
            score = float(point.score)
            distance = {"cosine": 1.0 - score, "ip": 1.0 - score}.get(space, score)
            hits.append(Hit(self._record(point, INCLUDE), distance))
        return hits


def add_named_vector(
    client: QdrantClient, collection: str, name: str, embedder: Embedder
) -> NamedVectorView:
    """Add named vector ``name`` for ``embedder``'s contract to ``collection``, with its stamp.

    The stamp is written first and the vector added second (Qdrant has no call that does both):
    a crash between them leaves a stamp without a vector, which :func:`add_named_vector` run
    again completes, and which no reader opens (the view finds no such vector).

    Raises:
        InvalidInputError: no such collection; a vector of that name under another contract.
    """
    if not isinstance(embedder, Embedder):
        raise InvalidInputError(f"embedder must be an Embedder, got {type(embedder).__name__}")
    info = _info(client, collection)
    if info is None:
        raise InvalidInputError(f"collection {collection!r} does not exist")
    stamp = IndexStamp.from_embedder(embedder)
    stamps = vector_stamps(client, collection)
    held = stamps.get(name)
    if held is not None and not same_contract(
        IndexStamp.from_metadata(held).contract, stamp.contract
    ):
        raise InvalidInputError(
            f"vector {name!r} of {collection!r} is stamped with another contract; name the new "
            "contract's vector otherwise"
        )
    params = _vector_params(info).get(name)
    distance = DISTANCE
    if params is not None and (params.size, params.distance) != (
        embedder.contract.output_dim,
        distance,
    ):
        raise InvalidInputError(
            f"vector {name!r} of {collection!r} holds {params.size} dimensions by "
            f"{params.distance}, not the contract's {embedder.contract.output_dim} by {distance}"
        )
    with _calling(client, f"adding vector {name!r} to {collection!r}"):
        if held is None:
            stamps[name] = stamp.to_metadata()
            nonce = {} if _metadata(info).get(IDENTITY_KEY) else {IDENTITY_KEY: uuid.uuid4().hex}
            client.update_collection(collection, metadata={VECTORS_KEY: stamps, **nonce})
        if params is None:
            config = models.DenseVectorNameConfig(
                dense=models.DenseVectorConfig(size=embedder.contract.output_dim, distance=distance)
            )
            client.create_vector_name(collection, name, config)
    return NamedVectorView(client, collection, name)


def backfill_named(
    client: QdrantClient,
    collection: str,
    name: str,
    embedder: Embedder,
    *,
    text_key: str = "page_content",
    batch: int = 64,
) -> int:
    """Embed every point's text under ``embedder`` into named vector ``name``, keeping each
    point's other vectors and payload; returns how many points were written. Points whose
    vector ``name`` is there already are skipped, so a rerun does only what is left; the text
    digest each vector was made from is kept in the payload (``ctxemb_vectors_text.<name>``)
    so a text changed since is embedded again."""
    stamp = _stamp(client, collection, name)
    if stamp is None:
        raise MissingStampError(f"vector {name!r} of {collection!r} has no stamp: add it first")
    IndexStamp.from_metadata(stamp).check_contract(embedder.contract)
    written, offset = 0, None
    while True:
        with _calling(client, f"reading {collection!r}"):
            points, offset = client.scroll(
                collection, limit=_PAGE, offset=offset, with_payload=True, with_vectors=False
            )
        todo = []
        for point in points:
            text = (point.payload or {}).get(text_key)
            if not isinstance(text, str):
                continue
            digest = text_digest(text)
            made = (point.payload or {}).get("ctxemb_vectors_text", {})
            if not (isinstance(made, Mapping) and made.get(name) == digest):
                todo.append((point.id, text, digest, made if isinstance(made, Mapping) else {}))
        for start in range(0, len(todo), batch):
            part = todo[start : start + batch]
            vectors = embedder.embed_documents([t for _, t, _, _ in part])
            with _calling(client, f"writing vector {name!r} of {collection!r}"):
                client.update_vectors(
                    collection,
                    points=[
                        models.PointVectors(id=pid, vector={name: v.tolist()})
                        for (pid, _, _, _), v in zip(part, vectors, strict=True)
                    ],
                )
                for pid, _, digest, made in part:
                    client.set_payload(
                        collection,
                        payload={"ctxemb_vectors_text": {**made, name: digest}},
                        points=[pid],
                    )
            written += len(part)
        if offset is None:
            return written


def switch_named(client: QdrantClient, collection: str, name: str) -> str | None:
    """Make ``collection`` serve named vector ``name`` (one metadata write; ``""``: the unnamed
    vector, a rollback to what ``open_collection`` made); returns the one it served before
    (``None``: none was switched to). Every reader of the collection then serves ``name``
    (:func:`~ctxemb_qdrant._serving.serving`), and an open under another contract is refused.
    Refused unless ``name`` is stamped and every point holds it."""
    if _stamp(client, collection, name) is None:
        raise MissingStampError(f"vector {name!r} of {collection!r} has no stamp")
    view = NamedVectorView(client, collection, name)
    with _calling(client, f"counting {collection!r}"):
        total = client.count(collection, exact=True).count
    if view.count() != total:
        raise InvalidInputError(
            f"vector {name!r} of {collection!r} holds {view.count()} of {total} points: "
            "backfill it before switching"
        )
    before = serving_vector(client, collection)
    with _calling(client, f"switching {collection!r} to vector {name!r}"):
        client.update_collection(collection, metadata={SERVING_KEY: name})
    return before
