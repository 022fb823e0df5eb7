"""Bulk indexing on a Ray cluster into a stamped collection on a Chroma server: core's job
(:mod:`ctxemb_core.scaleout`) with a session every actor opens to the server.

Example:
    >>> from ctxemb_core import contract_for                            # doctest: +SKIP
    >>> from ctxemb_chroma import index_with_ray                        # doctest: +SKIP
    >>> summary = index_with_ray("scifact/corpus.jsonl", contract_for(MODEL),
    ...                          collection="scifact", host="10.0.0.5", port=8000,
    ...                          address="auto", actors=8)              # doctest: +SKIP
    >>> summary.written, summary.skipped, summary.failed                # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ctxemb_chroma._connect import connect
from ctxemb_chroma._driver import ChromaDriver
from ctxemb_chroma._store import check_name
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.scaleout import IndexSummary
from ctxemb_core.scaleout import index_with_ray as _index_with_ray

__all__ = ["IndexSummary", "index_with_ray"]


@dataclass(frozen=True)
class ServerCollection:
    """A collection on a Chroma server, as each Ray node reaches it (a ``StoreSession``)."""

    host: str
    port: int
    name: str

    @contextmanager
    def __call__(self, embedder: Embedder) -> Iterator[ChromaDriver]:
        client: Any = connect(host=self.host, port=self.port)  # closes its session (see connect)
        try:
            yield ChromaDriver(client, self.name, embedder=embedder)
        finally:
            client.close()


def index_with_ray(
    source: str | os.PathLike[str],
    contract: EmbeddingContract,
    *,
    collection: str,
    host: str,
    port: int,
    **options: Any,
) -> IndexSummary:
    """Index a corpus into a stamped collection on a Chroma server with a pool of Ray actors.

    ``collection`` is the collection's name on the server; ``host`` and ``port`` are the server
    as every actor reaches it. ``options`` are those of
    :func:`ctxemb_core.scaleout.index_with_ray` (``address``, ``actors``, ``batch_size``,
    ``model_path``, ``cache``, ``num_cpus``, ``progress``, ``delete_missing``, ``dry_run``,
    ``url``, ``api``, ``api_key_env``), which says what it returns and raises.
    """
    check_name(collection)
    return _index_with_ray(
        source, contract, store=ServerCollection(host, port, collection), **options
    )
