"""Qdrant as a store driver: one collection, in local mode or on a server, under core's guard.

:class:`QdrantDriver` gives :class:`~ctxemb_core.index.driver_kit.ObjectDriver` (head, stamp,
reads, writes and deletes by id) what Qdrant's ``get_collection``, ``scroll``, ``retrieve``,
``upsert``, ``delete`` and ``query_points`` do; ``docs/qdrant.md`` ("How a collection is laid
out") gives the reasons: the stamp is the collection's ``metadata``, written by
``create_collection``, with a nonce (the identity Qdrant does not give); the stamp version
digests the vector, quantization and HNSW configuration too; the store's setting is the
datatype and width; the unnamed vector is ``Dot``. Which vector it reads, writes and searches,
and where that vector's stamp is, is ``_serving``'s one decision (the unnamed one; fastembed's
one named vector; the one ``switch_named`` chose, each stamped apart); a record is the point
``uuid5(POINT_NAMESPACE, id)``, its payload core's :class:`PayloadLayout`, its order core's
:class:`SealedOrder`. No transactions (the guard undoes), no write mark. Local
mode's head is read again only when its live state changed (:meth:`QdrantDriver._live`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ctxemb_core import IndexStamp
from ctxemb_core.contract import Precision
from ctxemb_core.errors import InvalidInputError, MissingStampError
from ctxemb_core.index import driver as protocol
from ctxemb_core.index.armed import sent_in_parts
from ctxemb_core.index.driver_kit import (
    ObjectDriver,
    check_json_batch,
    chunks,
    json_filter,
    sealed,
    unstamped_refusal,
)
from ctxemb_core.index.embedded import missing_index
from ctxemb_core.index.payloads import SealedOrder
from ctxemb_core.index.shaped import Found, hits_of
from ctxemb_core.validate import check_instance
from ctxemb_qdrant._serving import IDENTITY_KEY, LAYOUT, Served, points_of, serving
from ctxemb_qdrant._store import (
    TERMS,
    calling,
    check_name,
    collection_info,
    collections_in,
    is_store,
    local_engine,
    point_ids,
    store_address,
)

__all__ = ["IDENTITY_KEY", "LAYOUT", "QdrantDriver", "points_of"]

#: Qdrant's distances in the protocol's spaces.
_SPACES = {qm.Distance.DOT: "ip", qm.Distance.COSINE: "cosine", qm.Distance.EUCLID: "l2"}
#: Points per upsert, and per scroll page.
_STEP = 256


class QdrantDriver(SealedOrder, ObjectDriver[qm.CollectionInfo]):
    """The :class:`~ctxemb_core.index.driver.StoreDriver` of one Qdrant collection.

    Args:
        client: a ``qdrant_client.QdrantClient`` (local mode, in memory, or a server's).
        name: the collection's name (checked as Qdrant would).
        embedder: taken as every store's driver takes it; Qdrant keeps no embedding setting.

    Example:
        >>> driver = QdrantDriver(connect("./qdrant"), "docs")  # doctest: +SKIP
        >>> docs = GuardedIndex.open(driver, embedder)          # doctest: +SKIP
    """

    _kind = "collection"
    _no_marks = "Qdrant keeps no write sequence of its own"
    terms = TERMS  # its errors' words, whichever path reached it

    def __init__(self, client: QdrantClient, name: str, *, embedder: Any = None) -> None:
        what = "a qdrant_client.QdrantClient (or ctxemb_qdrant.connect())"
        self.client: QdrantClient = check_instance(client, QdrantClient, "client", what)
        self._name = check_name(name)
        self.capabilities = protocol.Capabilities(filters=True, max_batch=4096, seals=True)
        self._served_for: tuple[Any, Served] | None = None  # per description: a query's path

    def describe(self) -> str:
        return f"qdrant {store_address(self.client)}"

    def unstamped_error(self) -> MissingStampError:
        by = "around ctxemb (a plain qdrant-client, fastembed or langchain-qdrant, say)"
        return unstamped_refusal("collection", self._name, by=by)

    def storage_for(self, stamp: IndexStamp) -> dict[str, Any]:
        half = stamp.contract.precision is Precision.FLOAT16
        return {"datatype": "float16" if half else "float32", "size": stamp.contract.output_dim}

    # -- the collection and its stamp, as :class:`ObjectDriver` reads and writes them --------

    def head(self) -> protocol.Head | None:
        """The head the guard compares before every call. A server's: read with one request.
        Local mode's: read again only when :meth:`_live` changed since the last read
        (``get_collection`` counts every point, a tenth of a local search)."""
        with calling(self.client, f"reading collection {self._name!r}"):
            return super().head()

    def _live(self) -> tuple[object, Any] | None:
        """Local mode's own object of the collection (or of an alias's target), with its
        metadata and vector configuration: every change to them (``update_collection``, the
        collection made again, an alias moved) leaves another; ``None``: a server's client, a
        closed one, no such collection, another version's layout."""
        local = local_engine(self.client)
        if local is None or getattr(local, "closed", True):
            return None
        found = getattr(local, "collections", {})
        held = found.get(self._name)
        if held is None and self._name in getattr(local, "aliases", {}):
            held = found.get(local.aliases[self._name])
        config = getattr(held, "config", None)
        if config is None:
            return None
        vectors = getattr(config.vectors, "__dict__", config.vectors)  # no pydantic == a query
        return (held, (config.metadata, vectors))

    def _lookup(self) -> qm.CollectionInfo | None:
        with calling(self.client, f"reading collection {self._name!r}"):
            return collection_info(self.client, self._name)

    def missing_error(self, why: str = "") -> Exception:
        with calling(self.client, "listing collections"):
            names = [c.name for c in self.client.get_collections().collections]
        local = local_engine(self.client)
        folder = Path(local.location) if local is not None and local.persistent else None
        return missing_index("collection", self._name, names, folder, is_store, collections_in, why)

    def _served(self, handle: qm.CollectionInfo | None = None) -> Served:
        """The vector the collection serves (``_serving``: unnamed, fastembed's, switched to),
        decided once per description read."""
        info = handle or self._collection()
        if self._served_for is None or self._served_for[0] is not info:
            self._served_for = (info, serving(info, self._name))
        return self._served_for[1]

    def _params(self, handle: qm.CollectionInfo) -> qm.VectorParams:
        return self._served(handle).params(handle)

    def mismatch_note(self, caller: Any) -> str | None:
        """After a switch: the vector served and how to switch back (core adds it to a
        ``ContractMismatchError`` on open)."""
        handle = self._collection(fresh=True)
        return self._served(handle).note(handle.config.metadata, caller)

    def _identity(self, handle: qm.CollectionInfo) -> str:
        # Without a nonce (made around ctxemb, not yet stamped through it) the name stands in.
        nonce = (handle.config.metadata or {}).get(IDENTITY_KEY) or f"unidentified:{self._name}"
        created = getattr(handle, "created_at", None)  # a server's, where it reports one
        return str(nonce) if created is None else f"{nonce}@{created}"

    def _metadata(self, handle: qm.CollectionInfo) -> Mapping[str, Any] | None:
        return self._served(handle).stamp(handle.config.metadata)

    def _storage(self, handle: qm.CollectionInfo) -> Mapping[str, Any]:
        params = self._params(handle)
        datatype = params.datatype.value if params.datatype is not None else "float32"
        return {"datatype": datatype, "size": params.size}

    def _settings(self, handle: qm.CollectionInfo) -> Any:
        config = handle.config
        parts = (self._params(handle), config.quantization_config, config.hnsw_config)
        return [None if p is None else p.model_dump(mode="json") for p in parts]

    def _space(self, handle: qm.CollectionInfo) -> str:
        distance = self._params(handle).distance
        return _SPACES.get(distance, str(getattr(distance, "value", distance)).lower())

    def _create(self, stamp: IndexStamp) -> None:
        storage = self.storage_for(stamp)  # the datatype and width, as the stamp says
        datatype = qm.Datatype(storage["datatype"])
        params = qm.VectorParams(size=storage["size"], distance=qm.Distance.DOT, datatype=datatype)
        metadata = {**stamp.to_metadata(), IDENTITY_KEY: uuid.uuid4().hex}
        with calling(self.client, f"creating collection {self._name!r}"):
            self.client.create_collection(self._name, vectors_config=params, metadata=metadata)

    def _modify(self, handle: qm.CollectionInfo, metadata: dict[str, Any], stamp: Any) -> None:
        update = self._served(handle).update(handle.config.metadata, metadata)
        if not (handle.config.metadata or {}).get(IDENTITY_KEY):  # adopted: an identity now
            update[IDENTITY_KEY] = uuid.uuid4().hex
        with calling(self.client, f"stamping {self._name!r}"):
            self.client.update_collection(self._name, metadata=update)

    # -- reading ----------------------------------------------------------------------------

    def _payloads(self, where: protocol.Filter | None = None) -> list[tuple[str, Any, Any]]:
        """Every point (matching the neutral filter ``where``) as its record's id, its point id
        and its payload (what :class:`SealedOrder` orders)."""
        found: list[Any] = []
        offset: Any = None
        query_filter, layout = self._filter(where), self._served().layout
        with calling(self.client, f"reading collection {self._name!r}"):
            while True:
                page, offset = self.client.scroll(
                    self._name, scroll_filter=query_filter, limit=_STEP * 4, offset=offset
                )
                found += page
                if offset is None:
                    break
        return [
            (layout.record(p.payload, p.id, None, frozenset()).id, p.id, p.payload or {})
            for p in found
        ]

    def _payloads_of(self, ids: Sequence[str]) -> list[tuple[str, Any, Any]]:
        layout, wanted = self._served().layout, set(ids)
        with calling(self.client, "reading records"):
            got = self.client.retrieve(self._name, [p for i in ids for p in point_ids(i)])
        found = [(layout.record(p.payload, p.id, None, frozenset()).id, p) for p in got]
        return [(i, p.id, p.payload or {}) for i, p in found if i in wanted]

    def _reseal(self, keys: Sequence[Any], seals: Sequence[Mapping[str, Any]]) -> bool:
        if self._served().layout is not LAYOUT:  # fastembed's payloads: read, never written
            return False
        ops = [
            qm.SetPayloadOperation(set_payload=qm.SetPayload(payload=dict(seal), points=[key]))
            for key, seal in zip(keys, seals, strict=True)
        ]
        with calling(self.client, "sealing records"):
            for part in chunks(len(ops), _STEP):
                self.client.batch_update_points(self._name, ops[part], wait=True)
        return True

    def _at(self, keys: Sequence[Any], include: frozenset[str]) -> list[protocol.Record]:
        with calling(self.client, "reading records"):
            got = self.client.retrieve(self._name, keys, with_vectors="vector" in include)
        served = self._served()
        by_id = {
            p.id: served.layout.record(p.payload, p.id, served.vector_of(p), include) for p in got
        }
        return [by_id[i] for i in keys if i in by_id]

    def count(self) -> int:
        with calling(self.client, "count"):
            return int(self.client.count(self._name, exact=True).count)

    def check_batch(
        self, ids: list[str], documents: Sequence[str | None], metadatas: list[Any] | None
    ) -> None:
        check_json_batch(ids, documents, metadatas, "Qdrant", ints64=True)

    # -- the primitives :class:`~ctxemb_core.index.driver_kit.KeyedDriver` writes through ---

    def _fetch(
        self, ids: list[str], include: frozenset[str], handle: Any = None
    ) -> list[protocol.Record]:
        asked = list(dict.fromkeys(p for i in ids for p in point_ids(i)))
        wanted = set(ids)
        return [r for r in self._at(asked, include) if r.id in wanted]

    def _filter(
        self, where: protocol.Filter | None, ids: Sequence[str] | None = None
    ) -> qm.Filter | None:
        """The neutral filter (and ``ids``: among these records only) as Qdrant's."""
        if where is None and ids is None:
            return None
        terms: list[Any] = []
        if ids is not None:
            terms.append(qm.HasIdCondition(has_id=[p for i in ids for p in point_ids(i)]))
        for key, value in json_filter(where, "Qdrant").items() if where is not None else ():
            field = self._served().field(key)
            if isinstance(value, (bool, int, str)):
                terms.append(qm.FieldCondition(key=field, match=qm.MatchValue(value=value)))
            elif isinstance(value, float):
                terms.append(qm.FieldCondition(key=field, range=qm.Range(gte=value, lte=value)))
            else:
                raise InvalidInputError(
                    f"where: {key!r} = {value!r}: Qdrant filters by a string, number or bool"
                )
        return qm.Filter(must=terms)

    def _remove(self, handle: Any, ids: list[str]) -> None:
        points: list[Any] = [p for i in ids for p in point_ids(i)]
        with calling(self.client, "delete"):
            self.client.delete(self._name, points_selector=qm.PointIdsList(points=points))

    def _put(
        self,
        handle: Any,
        records: Sequence[protocol.Record],
        held: Mapping[str, protocol.Record],
        replace: bool,
    ) -> None:
        served = self._served(handle)
        served.check_writable()
        width = served.params(handle).size
        wrong = [r.id for r in records if r.vector is not None and np.size(r.vector) != width]
        if wrong:
            raise InvalidInputError(f"ids {wrong[:5]}: vectors of another width than {width}")
        points = points_of(records, sealed([LAYOUT.payload(r) for r in records]), served.vector)
        # A record adopted under its own point id (an int, a uuid) moves to its uuid5, once.
        moved = [p for r in records if r.id in held for p in point_ids(r.id)[1:]]
        with calling(self.client, "writing"):
            if moved:
                self.client.delete(self._name, points_selector=qm.PointIdsList(points=moved))
            for part in sent_in_parts(self._key(), points, _STEP):  # a test may arm a failure
                self.client.upsert(self._name, part, wait=True)

    def search(
        self, vector: np.ndarray, k: int, *, where: protocol.Filter | None = None
    ) -> list[protocol.Hit]:
        """The protocol's search: :meth:`search_columns` of one vector, as hits."""
        return hits_of(self.search_columns(np.atleast_2d(vector), k, where=where)[0])

    def search_columns(
        self,
        vectors: np.ndarray,
        k: int,
        *,
        stamp_version: protocol.Version | None = None,
        with_vectors: bool = False,
        where: protocol.Filter | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Found]:
        """Each row's results in columns (core's ``ShapedFacade`` reads them), the head compared
        with ``stamp_version`` in the same hold of the client (local mode: one lock). ``ids``:
        among these only; ``with_vectors``: read vectors too (a third of a local search)."""
        with calling(self.client, "query"):
            l2 = self._unmoved(stamp_version).space == "l2"
            query_filter, served = self._filter(where, ids), self._served()
            found = [
                self.client.query_points(
                    self._name,
                    query=np.asarray(v, dtype=np.float32).ravel().tolist(),
                    limit=k,
                    using=served.vector or None,
                    query_filter=query_filter,
                    with_vectors=with_vectors,
                ).points
                for v in vectors
            ]
        out = []
        for at in found:  # Qdrant's score: a similarity (Dot, Cosine), or Euclid's distance
            ids_, texts, metas = served.layout.columns([p.payload for p in at], [p.id for p in at])
            distances = [p.score**2 if l2 else 1.0 - p.score for p in at]
            shown = [served.vector_of(p) for p in at] if with_vectors else None
            out.append(Found(ids_, distances, texts, metas, shown))  # type: ignore[arg-type]
        return out
