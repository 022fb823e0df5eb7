"""Qdrant as a store driver: one collection, in local mode or on a server, under core's guard.

:class:`QdrantDriver` is the :class:`~ctxemb_core.index.driver.StoreDriver` of one Qdrant
collection; :class:`~ctxemb_core.index.GuardedIndex` conducts the guard over it. How the
protocol's promises are kept (head, stamp read and write, reads, writes and deletes by id are
:class:`~ctxemb_core.index.driver_kit.ObjectDriver`'s over ``get_collection``):

- **the stamp** is the collection's ``metadata``, written by ``create_collection`` itself (no
  unstamped window); a re-stamp is one ``update_collection(metadata=...)``, which merges (a key
  the new stamp lacks is sent as ``null``, Qdrant's "remove"), then read back;
- **identity**: Qdrant gives a collection no id, so the create call writes a nonce beside the
  stamp (``ctxemb_identity``; with a server's ``created_at`` where it reports one). The driver
  keeps it out of the metadata it reports, so a stamp copied onto a collection made again
  carries none: another identity. A client that copies the nonce too is not told apart until
  its records are checked (the id list, then the sample);
- **the stamp version** digests the identity, the stamp and the whole vector configuration
  (size, distance, datatype, quantization, HNSW): what ``update_collection`` can change around
  ctxemb (metadata, quantization, HNSW, on-disk) moves it, and the guard verifies again;
- **the store's setting** (``storage``) is the datatype and width: ``float16`` for a float16
  contract (its vectors are float16 values: kept exactly), ``float32`` for every other
  (``int8`` and ``binary`` contracts are stored in core's float32 form, integers and ±1, exact;
  Qdrant's ``uint8`` datatype would clamp negative values and is never used; quantization is a
  search index over the kept originals, not what ctxemb reads back, and local mode drops it);
- **distance**: ctxemb creates ``Dot`` collections: a contract's space is cosine over unit
  vectors or inner product (``default_space``), and Dot computes both while keeping each
  vector bit for bit (Qdrant's ``Cosine`` re-normalises vectors on write). A collection made
  elsewhere is searched in its own distance (``Cosine``: cosine; ``Euclid``: l2);
- **order**: oldest write first by ``ctxemb_seq`` (a nanosecond clock, strictly increasing in
  this process), then the points written around ctxemb without one, which are the newest the
  guard should see (last). A raw upsert drops the sequence, so the record moves to the end
  and the next open checks it; ``order_by`` is not used since it leaves out points without
  the key. No write mark (``marks=False``): the guard lists ids on open;
- no transactions: the guard reads a batch's records first and puts them back on failure.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ctxemb_core import IndexStamp
from ctxemb_core.contract import Precision
from ctxemb_core.errors import InvalidInputError, MissingStampError
from ctxemb_core.index import driver as protocol
from ctxemb_core.index.driver_kit import (
    ObjectDriver,
    check_json_batch,
    json_filter,
    unstamped_refusal,
    unstorable,
    version_digest,
)
from ctxemb_core.index.embedded import missing_index
from ctxemb_qdrant._store import (
    _local,
    calling,
    check_name,
    collections_in,
    is_store,
    point_id,
    point_ids,
    store_address,
)

__all__ = ["IDENTITY_KEY", "QdrantDriver", "payload_of"]

#: The collection metadata key of the creation nonce (the collection's identity).
IDENTITY_KEY = "ctxemb_identity"
#: Payload keys: the ctxemb id, the write sequence, the text and the metadata.
ID_KEY, SEQ_KEY, TEXT_KEY, META_KEY = "ctxemb_id", "ctxemb_seq", "page_content", "metadata"
#: The payload key of the check digest over the id, sequence, text and metadata.
CHECK_KEY = "ctxemb_check"
#: Qdrant's distances in the protocol's spaces.
_SPACES = {qm.Distance.DOT: "ip", qm.Distance.COSINE: "cosine", qm.Distance.EUCLID: "l2"}
#: Points per upsert, and per page read.
_STEP = 256

_SEQ_LOCK = threading.Lock()
_last_seq = [0]


def _next_seqs(count: int) -> list[int]:
    """``count`` write sequence numbers: a nanosecond clock, strictly increasing here."""
    with _SEQ_LOCK:
        start = max(time.time_ns(), _last_seq[0] + 1)
        _last_seq[0] = start + count - 1
    return list(range(start, start + count))


def _check(payload: Mapping[str, Any]) -> str:
    parts = [payload.get(k) for k in (ID_KEY, SEQ_KEY, TEXT_KEY, META_KEY)]
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=8).hexdigest()


def payload_of(record: protocol.Record, seq: int | None) -> dict[str, Any]:
    """A record's payload: its id, text, metadata and (``seq``) write sequence with the check
    of them all (``seq`` ``None``: as a plain client writes it, neither)."""
    payload: dict[str, Any] = {ID_KEY: record.id}
    if record.text is not None:
        payload[TEXT_KEY] = record.text
    if record.metadata is not None:
        payload[META_KEY] = dict(record.metadata)
    if seq is not None:
        payload[SEQ_KEY] = seq
        payload[CHECK_KEY] = _check(payload)
    return payload


def _order(point: Any) -> tuple[int, Any, str]:
    """Where a point comes in the store's order: by write sequence when its check holds, else
    (written or edited around ctxemb) after those, by point id."""
    payload = point.payload or {}
    seq = payload.get(SEQ_KEY)
    if (
        isinstance(seq, int)
        and not isinstance(seq, bool)
        and payload.get(CHECK_KEY) == _check(payload)
    ):
        return (0, seq, "")
    return (1, 0, str(point.id))


def _record(point: Any, include: frozenset[str]) -> protocol.Record:
    payload = point.payload or {}
    vector = point.vector if "vector" in include else None
    if isinstance(vector, dict):  # a point without the collection's vector: {}
        vector = vector.get("") or None
    meta = payload.get(META_KEY) if "metadata" in include else None
    return protocol.Record(
        str(payload.get(ID_KEY, point.id)),
        None if vector is None else np.asarray(vector, dtype=np.float32),
        payload.get(TEXT_KEY) if "text" in include else None,
        dict(meta) if isinstance(meta, Mapping) else None,
    )


class QdrantDriver(ObjectDriver[qm.CollectionInfo]):
    """The :class:`~ctxemb_core.index.driver.StoreDriver` of one Qdrant collection.

    Args:
        client: a ``qdrant_client.QdrantClient`` (local mode, in memory, or a server's).
        name: the collection's name (checked as Qdrant would).
        embedder: accepted as every store's driver takes it; Qdrant keeps no embedding setting.

    Example:
        >>> from ctxemb_core.index import GuardedIndex
        >>> driver = QdrantDriver(connect("./qdrant"), "docs")  # doctest: +SKIP
        >>> docs = GuardedIndex.open(driver, embedder)          # doctest: +SKIP
    """

    _kind = "collection"
    _no_marks = "Qdrant keeps no write sequence of its own"

    def __init__(self, client: QdrantClient, name: str, *, embedder: Any = None) -> None:
        if not isinstance(client, QdrantClient):
            raise InvalidInputError(
                "client must be a qdrant_client.QdrantClient (or ctxemb_qdrant.connect()), "
                f"got {type(client).__name__}"
            )
        self.client = client
        self._name = check_name(name)
        self.capabilities = protocol.Capabilities(filters=True, max_batch=4096)

    def __repr__(self) -> str:
        return f"QdrantDriver({self._name!r}, store={self.describe()!r})"

    def describe(self) -> str:
        return f"qdrant {store_address(self.client)}"

    def _call(self, what: str) -> Any:
        return calling(self.client, what)

    def unstamped_error(self) -> MissingStampError:
        return unstamped_refusal(
            "collection",
            self._name,
            by="around ctxemb (a plain qdrant-client, fastembed or langchain-qdrant, say)",
        )

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        half = stamp.contract.precision is Precision.FLOAT16
        return {"datatype": "float16" if half else "float32", "size": stamp.contract.output_dim}

    # -- the collection and its stamp, as :class:`ObjectDriver` reads and writes them --------

    def _lookup(self) -> qm.CollectionInfo | None:
        with self._call(f"reading collection {self._name!r}"):
            if not self.client.collection_exists(self._name):
                return None
            try:
                return self.client.get_collection(self._name)
            except ValueError:  # local mode: dropped between the two calls
                return None

    def _missing(self) -> Exception:
        with self._call("listing collections"):
            names = [c.name for c in self.client.get_collections().collections]
        local = _local(self.client)
        folder = None
        if local is not None and local.persistent:
            from pathlib import Path

            folder = Path(local.location)
        return missing_index("collection", self._name, names, folder, is_store, collections_in)

    def _params(self, handle: qm.CollectionInfo) -> qm.VectorParams:
        vectors = handle.config.params.vectors
        if not isinstance(vectors, qm.VectorParams):  # named vectors: not one ctxemb made
            raise InvalidInputError(
                f"collection {self._name!r} holds named vectors {sorted(vectors or {})}; "
                "this driver reads a collection of one unnamed vector"
            )
        return vectors

    def _identity(self, handle: qm.CollectionInfo) -> str:
        # A collection made around ctxemb has no nonce until it is stamped through ctxemb: its
        # name stands in (a verified-open record of it is then one of that name in the store).
        nonce = (handle.config.metadata or {}).get(IDENTITY_KEY) or f"unidentified:{self._name}"
        created = getattr(handle, "created_at", None)
        return f"{nonce}@{created}" if created is not None else str(nonce)

    def _metadata(self, handle: qm.CollectionInfo) -> Mapping[str, Any] | None:
        meta = handle.config.metadata
        return None if meta is None else {k: v for k, v in meta.items() if k != IDENTITY_KEY}

    def _storage(self, handle: qm.CollectionInfo) -> Mapping[str, Any]:
        params = self._params(handle)
        datatype = params.datatype.value if params.datatype is not None else "float32"
        return {"datatype": datatype, "size": params.size}

    def _space(self, handle: qm.CollectionInfo) -> str:
        distance = self._params(handle).distance
        return _SPACES.get(distance, str(getattr(distance, "value", distance)).lower())

    def _version(self, handle: qm.CollectionInfo) -> protocol.Version:
        setting = (
            self._params(handle).model_dump(mode="json"),
            None
            if handle.config.quantization_config is None
            else handle.config.quantization_config.model_dump(mode="json"),
            handle.config.hnsw_config.model_dump(mode="json"),
        )
        stamp = IndexStamp.metadata_items(self._metadata(handle))
        return version_digest((self._identity(handle), stamp, setting))

    def _create(self, stamp: IndexStamp) -> None:
        half = stamp.contract.precision is Precision.FLOAT16
        params = qm.VectorParams(
            size=stamp.contract.output_dim,
            distance=qm.Distance.DOT,
            datatype=qm.Datatype.FLOAT16 if half else qm.Datatype.FLOAT32,
        )
        metadata = {**stamp.to_metadata(), IDENTITY_KEY: uuid.uuid4().hex}
        with self._call(f"creating collection {self._name!r}"):
            self.client.create_collection(self._name, vectors_config=params, metadata=metadata)

    def _modify(self, handle: qm.CollectionInfo, metadata: dict[str, Any], stamp: Any) -> None:
        gone: dict[str, Any] = {k: None for k in self._metadata(handle) or {} if k not in metadata}
        if not (handle.config.metadata or {}).get(IDENTITY_KEY):  # adopted: an identity now
            gone[IDENTITY_KEY] = uuid.uuid4().hex
        with self._call(f"stamping {self._name!r}"):
            self.client.update_collection(self._name, metadata={**metadata, **gone})

    # -- reading ----------------------------------------------------------------------------

    def _points(self, include: frozenset[str], where: Any = None) -> list[Any]:
        """Every point (matching ``where``), in the store's order: by write sequence, then
        those without one (written around ctxemb) by point id."""
        found: list[Any] = []
        offset: Any = None
        with self._call(f"reading collection {self._name!r}"):
            while True:
                page, offset = self.client.scroll(
                    self._name,
                    scroll_filter=where,
                    limit=_STEP * 4,
                    offset=offset,
                    with_payload=True,
                    with_vectors="vector" in include,
                )
                found += page
                if offset is None:
                    break
        return sorted(found, key=_order)

    def count(self) -> int:
        with self._call("count"):
            return int(self.client.count(self._name, exact=True).count)

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        chosen = self._points(frozenset())[offset : None if limit is None else offset + limit]
        return [_record(p, frozenset()).id for p in chosen]

    def page(
        self, offset: int, limit: int, include: frozenset[str] = protocol.INCLUDE
    ) -> list[protocol.Record]:
        chosen = [p.id for p in self._points(frozenset())[offset : offset + limit]]
        with self._call("reading records"):
            got = self.client.retrieve(
                self._name, chosen, with_payload=True, with_vectors="vector" in include
            )
        by_id = {p.id: _record(p, include) for p in got}
        return [by_id[i] for i in chosen if i in by_id]

    def check_batch(
        self, ids: list[str], documents: Sequence[str | None], metadatas: list[Any] | None
    ) -> None:
        check_json_batch(ids, documents, metadatas, "Qdrant")
        for k, m in enumerate(metadatas or []):
            for key, value in (m or {}).items():
                if value is not None and unstorable(value):
                    raise InvalidInputError(
                        f"metadatas[{k}] (id {ids[k]!r}): {key!r} = {value!r} cannot be stored "
                        "by Qdrant (an integer beyond 64 bits); leave it out or store a string"
                    )

    # -- the primitives :class:`~ctxemb_core.index.driver_kit.KeyedDriver` writes through ---

    def _fetch(
        self, ids: list[str], include: frozenset[str], handle: Any = None
    ) -> list[protocol.Record]:
        wanted = set(ids)
        asked = list(dict.fromkeys(p for i in ids for p in point_ids(i)))
        with self._call("reading records"):
            got = self.client.retrieve(
                self._name, asked, with_payload=True, with_vectors="vector" in include
            )
        records = [_record(p, include) for p in got]
        return [r for r in records if r.id in wanted]

    def _filter(self, where: protocol.Filter | None) -> qm.Filter | None:
        if where is None:
            return None
        terms: list[Any] = []
        for key, value in json_filter(where, "Qdrant").items():
            field = f"{META_KEY}.{key}"
            if isinstance(value, (bool, int, str)):
                terms.append(qm.FieldCondition(key=field, match=qm.MatchValue(value=value)))
            elif isinstance(value, float):
                terms.append(qm.FieldCondition(key=field, range=qm.Range(gte=value, lte=value)))
            else:
                raise InvalidInputError(
                    f"where: {key!r} = {value!r}: Qdrant filters by a string, number or bool"
                )
        return qm.Filter(must=terms)

    def _selected(
        self, handle: Any, ids: list[str] | None, where: protocol.Filter | None
    ) -> list[str]:
        found = [_record(p, frozenset()).id for p in self._points(frozenset(), self._filter(where))]
        if ids is None:
            return found
        wanted = set(ids)
        return [i for i in found if i in wanted]

    def _remove(self, handle: Any, ids: list[str]) -> None:
        points: list[Any] = list(itertools.chain.from_iterable(point_ids(i) for i in ids))
        with self._call("delete"):
            self.client.delete(self._name, points_selector=qm.PointIdsList(points=points))

    def _put(
        self,
        handle: Any,
        records: Sequence[protocol.Record],
        held: Mapping[str, protocol.Record],
        replace: bool,
    ) -> None:
        width = self._params(handle).size
        points = []
        for record, seq in zip(records, _next_seqs(len(records)), strict=True):
            vector: Any = {}
            if record.vector is not None:
                vector = np.asarray(record.vector, dtype=np.float32).tolist()
                if len(vector) != width:
                    raise InvalidInputError(
                        f"id {record.id!r}: a vector of {len(vector)} values; collection "
                        f"{self._name!r} holds {width}"
                    )
            points.append(
                qm.PointStruct(
                    id=point_id(record.id), vector=vector, payload=payload_of(record, seq)
                )
            )
        with self._call("writing"):
            for start in range(0, len(points), _STEP):
                self.client.upsert(self._name, points[start : start + _STEP], wait=True)

    def search(
        self, vector: np.ndarray, k: int, *, where: protocol.Filter | None = None
    ) -> list[protocol.Hit]:
        raw = self._collection()
        space = self._space(raw)
        query = np.asarray(vector, dtype=np.float32).ravel().tolist()
        with self._call("query"):
            found = self.client.query_points(
                self._name,
                query=query,
                limit=k,
                query_filter=self._filter(where),
                with_payload=True,
                with_vectors=True,
            ).points
        hits = []
        for point in found:
            score = float(point.score)
            distance = score**2 if space == "l2" else 1.0 - score
            hits.append(protocol.Hit(_record(point, protocol.INCLUDE), distance))
        return hits
