"""Re-embed a collection under a new contract into a new stamped collection, resumably."""

from __future__ import annotations

from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._open import open_collection
from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.errors import InvalidInputError


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
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(source, GuardedCollection):
        raise InvalidInputError(
            f"source must be a collection from open_collection, got {type(source).__name__}"
        )
    client = client or source.client
    if target_name == source.name and client is source.client:
        raise InvalidInputError("the target must be a new collection: the source is never modified")
    target = open_collection(client, target_name, target_contract, create=True)
    done = target.ids()
    total = source.count()
    bar = _bar(total, len(done), progress)
    offset = 0
    while offset < total:
        page = source.get(offset=offset, limit=batch_size, include=["documents", "metadatas"])
        if not page["ids"]:
            break
        offset += len(page["ids"])
        rows = [
            (i, d, m)
            for i, d, m in zip(
                page["ids"],
                page["documents"] or _nones(page["ids"]),
                page["metadatas"] or _nones(page["ids"]),
                strict=True,
            )
            if i not in done
        ]
        if not rows:
            continue
        missing = [i for i, d, _ in rows if d is None]
        if missing:
            raise InvalidInputError(
                f"source documents {missing[:5]} have no stored text: they cannot be re-embedded"
            )
        ids, docs, metas = (list(x) for x in zip(*rows, strict=True))
        target.add(ids, docs, metas if any(metas) else None)
        bar.update(len(ids))
    bar.close()
    return target


def _bar(total: int, initial: int, show: bool | None) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="doc", desc="migrating", disable=show is False)


def _nones(ids: list[str]) -> list[Any]:
    return [None] * len(ids)
