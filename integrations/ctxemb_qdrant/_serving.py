"""Which vector a Qdrant collection serves: the one decision every reader and writer of a
collection takes (:class:`~ctxemb_qdrant._driver.QdrantDriver`, and so core's tools, the
``ctxemb`` commands and the frameworks' Qdrant stores, which all read through it).

:func:`serving` decides, from the collection's description alone:

1. the named vector :data:`SERVING_KEY` names, once :func:`~ctxemb_qdrant.switch_named` wrote
   it (the in-place upgrade's switch, or its rollback; ``""`` is the unnamed vector);
2. else the one ``fast-<model>`` vector of a collection ``qdrant-client`` + fastembed wrote (no
   unnamed vector beside it), its text under ``document`` and its metadata spread beside it;
3. else the unnamed vector, as ``open_collection`` creates it.

A named vector's stamp is its own entry of :data:`VECTORS_KEY` (``{vector: stamp metadata}``),
the unnamed vector's the collection's metadata itself, so each contract keeps its own stamp and
an open under another contract is refused; after a switch the refusal names the vector the
collection serves and the switch back (:meth:`Served.note`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from qdrant_client import models as qm

from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.driver import Record
from ctxemb_core.index.payloads import PayloadLayout
from ctxemb_core.stamp import IndexStamp
from ctxemb_qdrant._store import point_id

__all__ = ["FASTEMBED_TEXT", "IDENTITY_KEY", "LAYOUT", "SERVING_KEY", "VECTORS_KEY", "Served"]
__all__ += ["fastembed_vector", "points_of", "serving", "vector_params"]

#: The collection metadata key of the creation nonce (the collection's identity).
IDENTITY_KEY = "ctxemb_identity"
#: The collection metadata key of the named vectors' stamps: ``{name: stamp metadata}``.
VECTORS_KEY = "ctxemb_vectors"
#: The collection metadata key of the vector the collection serves (``""``: the unnamed one).
SERVING_KEY = "ctxemb_serving"
#: Payload keys: the ctxemb id, the text and the metadata (as ``langchain-qdrant`` names them).
LAYOUT = PayloadLayout(text="page_content", metadata="metadata", id="ctxemb_id")
#: The payload key fastembed's helpers kept a point's text under (its metadata beside it).
FASTEMBED_TEXT = "document"
_FASTEMBED = PayloadLayout(text=FASTEMBED_TEXT, metadata=None)


def vector_params(info: Any) -> dict[str, Any]:
    """A collection's dense vectors by name (``""``: the unnamed one)."""
    vectors = info.config.params.vectors
    return dict(vectors) if isinstance(vectors, Mapping) else {"": vectors}


def fastembed_vector(vectors: Mapping[str, Any]) -> str | None:
    """The ``fast-<model>`` vector of fastembed's layout (one, and no unnamed one), or ``None``."""
    fast = [n for n in vectors if n.startswith("fast-") and not n.startswith("fast-sparse-")]
    return fast[0] if len(fast) == 1 and "" not in vectors else None


def points_of(
    records: Sequence[Record], payloads: Sequence[dict[str, Any]], vector: str = ""
) -> list[qm.PointStruct]:
    """Records as Qdrant's points: each id's :func:`point_id`, its vector under ``vector``
    (``{}``: none), its payload of ``payloads``; unvalidated, all known valid (as local mode
    builds its own)."""
    return [
        qm.PointStruct.model_construct(
            id=point_id(r.id),
            vector={} if r.vector is None else {vector: np.asarray(r.vector, np.float32).tolist()},
            payload=payload,
        )
        for r, payload in zip(records, payloads, strict=True)
    ]


@dataclass(frozen=True)
class Served:
    """The vector collection ``collection`` serves, and how its points and stamp are laid out.

    Attributes:
        collection: the collection (or alias) as named.
        vector: the vector's name (``""``: the unnamed one).
        layout: the payload's keys (ctxemb's, or fastembed's).
        switched: chosen by :func:`~ctxemb_qdrant.switch_named` (not by the layout).
    """

    collection: str
    vector: str
    layout: PayloadLayout
    switched: bool

    def params(self, info: Any) -> qm.VectorParams:
        """The vector's parameters, or the refusal of a collection holding no vector to serve."""
        vectors = vector_params(info)
        params = vectors.get(self.vector)
        if isinstance(params, qm.VectorParams):
            return params
        if self.switched:
            raise InvalidInputError(
                f"collection {self.collection!r} is switched to vector {self.vector!r} "
                f"({SERVING_KEY}), which it does not hold; switch it to one of {sorted(vectors)} "
                "(ctxemb_qdrant.switch_named)"
            )
        raise InvalidInputError(
            f"collection {self.collection!r} holds named vectors {sorted(vectors)}, none of them "
            "one to serve: an unnamed vector, fastembed's one fast-<model> vector, or the one "
            "ctxemb_qdrant.switch_named chose"
        )

    def stamp(self, metadata: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The vector's stamp metadata, with the collection's other keys for the unnamed one."""
        if not self.vector:
            return (
                None
                if metadata is None
                else {k: v for k, v in metadata.items() if k != IDENTITY_KEY}
            )
        found = (metadata or {}).get(VECTORS_KEY)
        found = found.get(self.vector) if isinstance(found, Mapping) else None
        return found if isinstance(found, Mapping) else None

    def update(self, metadata: Mapping[str, Any] | None, stamp: dict[str, Any]) -> dict[str, Any]:
        """The ``update_collection`` metadata that makes ``stamp`` (with the keys kept beside
        it) the vector's: Qdrant merges, so a key to remove is sent as null."""
        if self.vector:
            stamps = (metadata or {}).get(VECTORS_KEY)
            return {
                VECTORS_KEY: {**(stamps if isinstance(stamps, Mapping) else {}), self.vector: stamp}
            }
        return {**{k: None for k in self.stamp(metadata) or {} if k not in stamp}, **stamp}

    def vector_of(self, point: Any) -> np.ndarray | None:
        """The point's vector of this name, as read (``None``: it holds none)."""
        held = point.vector
        vector = held.get(self.vector) or None if isinstance(held, dict) else held
        return None if vector is None else np.asarray(vector, dtype=np.float32)

    def field(self, key: str) -> str:
        """The payload path of metadata field ``key``."""
        return key if self.layout.metadata is None else f"{self.layout.metadata}.{key}"

    def check_writable(self) -> None:
        if self.layout is _FASTEMBED:
            raise InvalidInputError(
                f"collection {self.collection!r} is fastembed's layout (text under "
                f"{FASTEMBED_TEXT!r}), read through the guard: migrate it into a collection of "
                "ctxemb's (ctxemb migrate) to write to it"
            )

    def note(self, metadata: Mapping[str, Any] | None, caller: EmbeddingContract) -> str | None:
        """After a switch, what an open under ``caller``'s contract was refused for: the vector
        served and its contract, and the switch back to ``caller``'s vector where there is one."""
        stamp = self.stamp(metadata)
        if not self.switched or not IndexStamp.is_stamped(stamp):
            return None
        served = IndexStamp.from_metadata(stamp).contract
        stamps = {"": metadata or {}, **dict((metadata or {}).get(VECTORS_KEY) or {})}
        back = [
            name
            for name, held in stamps.items()
            if name != self.vector
            and IndexStamp.is_stamped(held)
            and same_contract(IndexStamp.from_metadata(held).contract, caller)
        ]
        head = (
            f"collection {self.collection!r} now serves vector {self.vector!r} under contract "
            f"{served.describe()} (switched with ctxemb_qdrant.switch_named)"
        )
        if not back:
            return f"{head}; no vector of it is stamped with the caller's contract"
        return (
            f"{head}; to roll back to this contract's vector {back[0]!r}: "
            f"ctxemb_qdrant.switch_named(client, {self.collection!r}, {back[0]!r})"
        )


def serving(info: Any, collection: str) -> Served:
    """The vector collection ``collection`` (described by ``info``, ``get_collection``'s)
    serves; see the module's docstring for the order of the rules."""
    chosen = (info.config.metadata or {}).get(SERVING_KEY)
    fast = fastembed_vector(vector_params(info))
    layout = LAYOUT if fast is None else _FASTEMBED
    if isinstance(chosen, str):
        return Served(collection, chosen, layout, True)
    return Served(collection, fast or "", layout, False)
