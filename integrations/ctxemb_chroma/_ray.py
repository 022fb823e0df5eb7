"""Bulk indexing on a Ray cluster into a collection on a Chroma server: :mod:`ctxemb_ray`'s job,
with the session every actor reopens the server with."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ctxemb_chroma._connect import connect
from ctxemb_chroma._driver import ChromaDriver
from ctxemb_chroma._store import check_name
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_ray import DriverSession, IndexSummary
from ctxemb_ray import index_with_ray as _index_with_ray


@dataclass(frozen=True)
class ServerCollection(DriverSession):
    """Collection ``name`` on the Chroma server at ``host``:``port``, as every actor reaches it."""

    host: str
    port: int
    name: str

    def __post_init__(self) -> None:
        check_name(self.name)

    def open(self, embedder: Embedder) -> tuple[Any, ChromaDriver]:
        client = connect(host=self.host, port=self.port)  # closes its session (see connect)
        return client, ChromaDriver(client, self.name, embedder=embedder)


def index_with_ray(
    source: str | os.PathLike[str],
    contract: EmbeddingContract,
    *,
    collection: str,
    host: str,
    port: int,
    **options: Any,
) -> IndexSummary:
    """Index a corpus into a stamped collection on a Chroma server (``host``, ``port``: as every
    actor reaches it) with a pool of Ray actors; ``options``, what it returns and what it raises
    are those of :func:`ctxemb_ray.index_with_ray`."""
    store = ServerCollection(host, port, collection)
    return _index_with_ray(source, contract, store=store, **options)
