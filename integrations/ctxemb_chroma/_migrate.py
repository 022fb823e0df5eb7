"""Re-embed a collection under a new contract into a new stamped collection, resumably."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._open import open_collection
from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.migrate import Page, copy_missing
from ctxemb_core.validate import check_positive_int


def migrate(
    source: GuardedCollection,
    target_contract: EmbeddingContract | Embedder,
    target_name: str,
    *,
    client: ClientAPI | None = None,
    batch_size: int = 256,
    progress: bool | None = None,
) -> GuardedCollection:
    """Copy every document of ``source`` into ``target_name``, re-embedded under a new contract.

    The target is created stamped under ``target_contract``. Ids already in the target are
    skipped, so a migration killed mid-way continues where it stopped when run again and ends
    with exactly the source's ids. The source is only read.

    Example:
        >>> new = migrate(old, contract.with_(truncate_dim=128), "docs-128")  # doctest: +SKIP
    """
    check_positive_int(batch_size, "batch_size")
    if not isinstance(source, GuardedCollection):
        raise InvalidInputError(
            f"source must be a collection from open_collection, got {type(source).__name__}"
        )
    client = client or source.client
    if target_name == source.name and client is source.client:
        raise InvalidInputError("the target must be a new collection: the source is never modified")
    target = open_collection(client, target_name, target_contract, create=True)
    copy_missing(
        _pages(source, batch_size),
        target.add,
        target.ids(),
        total=source.count(),
        progress=progress,
    )
    return target


def _pages(source: GuardedCollection, size: int) -> Iterator[Page]:
    offset = 0
    while True:
        got = source.get(offset=offset, limit=size, include=["documents", "metadatas"])
        if not got["ids"]:
            return
        offset += len(got["ids"])
        texts: Any = got["documents"]
        yield Page(got["ids"], texts or [None] * len(got["ids"]), got["metadatas"])
