"""Which contract made a vector that crossed LlamaIndex: the framework keeps only the numbers.

A LlamaIndex retriever hands its vector store ``VectorStoreQuery(query_embedding=[...])`` and an
index hands it nodes whose ``embedding`` is a list of floats: neither says which embedding model
made them, so a store cannot tell a query embedded under its contract from one embedded under
another. :class:`~ctxemb_llamaindex.ContractEmbedding` notes each vector it returns here, by the
digest of its float32 bytes, with its contract's fingerprint and role; a guarded store looks the
vector up and has core decide (:func:`ctxemb_core.documents.check_fingerprint`), fields named.

The note is exact, not a similarity: a vector LlamaIndex copied (a list, a float64 mean of one
query) has the same float32 bytes, and any other vector has none. The last :data:`KEPT` vectors
are kept; an older one is unknown, and a store checks an unknown vector another way.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

Role = Literal["query", "document"]

#: How many vectors are remembered (~100 bytes each): more than one ingestion batch of
#: LlamaIndex's (2,048 nodes), so the vectors of a batch are all known when it is written.
KEPT = 65_536

_NOTES: OrderedDict[bytes, tuple[str, Role]] = OrderedDict()
_LOCK = threading.Lock()


def _key(vector: Any) -> bytes | None:
    try:
        row = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError):
        return None
    if row.ndim != 1:
        return None
    return hashlib.blake2b(row.tobytes(), digest_size=16).digest()


def note(vectors: Iterable[Any], fingerprint: str, role: Role) -> None:
    """Remember that ``vectors`` were embedded under ``fingerprint``'s contract in ``role``."""
    keys = [_key(v) for v in vectors]
    with _LOCK:
        for key in keys:
            if key is not None:
                _NOTES[key] = (fingerprint, role)
                _NOTES.move_to_end(key)
        while len(_NOTES) > KEPT:
            _NOTES.popitem(last=False)


def origin(vector: Any) -> tuple[str, Role] | None:
    """The fingerprint and role ``vector`` was embedded under here, or ``None``: unknown."""
    key = _key(vector)
    if key is None:
        return None
    with _LOCK:
        return _NOTES.get(key)
