"""Copy an index into a new stamped collection, resumably: re-embedded under a new contract,
or, under the same contract from another store (a pgvector table), its vectors and stamp
carried as they are."""

from __future__ import annotations

from typing import Any

from chromadb.api import ClientAPI

from ctxemb_chroma._collection import GuardedCollection
from ctxemb_chroma._driver import ChromaDriver
from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import as_embedder
from ctxemb_core.index import migration


def migrate(
    source: Any,
    target_contract: EmbeddingContract | Embedder,
    target_name: str,
    *,
    client: ClientAPI | None = None,
    batch_size: int = 256,
    progress: bool | None = None,
    reembed: bool = False,
) -> GuardedCollection:
    """Copy every document of ``source`` into the collection ``target_name``.

    ``source`` is a guarded index of any ctxemb adapter: a :class:`GuardedCollection`, or a
    pgvector ``GuardedTable`` (``ctxemb_pgvector.open_table``) with ``client`` naming the Chroma
    store. The copy is :func:`ctxemb_core.index.migrate_index`, resumable: under another
    contract, or under the source's own within one store (a rebuild), every document is
    re-embedded; from another store under the source's own contract (and without ``reembed``)
    the stored vectors and the stamp are carried (Chroma re-normalises a cosine collection's
    vectors on write: equal within ``ctxemb_core.migrate.COPY_TOLERANCE``).

    Example:
        >>> new = migrate(old, contract.with_(truncate_dim=128), "docs-128")  # doctest: +SKIP
    """
    copy = migration(
        source,
        batch_size,
        reembed,
        progress,
        opened_by="open_collection, ctxemb_pgvector.open_table",
    )
    if client is None:
        if not isinstance(source, GuardedCollection):
            raise InvalidInputError("client is needed: the source is not a Chroma collection")
        client = source.client
    if isinstance(source, GuardedCollection) and (target_name, client) == (
        source.name,
        source.client,
    ):
        raise InvalidInputError("the target must be a new collection: the source is never modified")
    embedder = as_embedder(target_contract)
    target = ChromaDriver(client, target_name, embedder=embedder)
    # Across stores, the same contract's vectors are carried; within one store a migration
    # under the same contract is a rebuild (records written around ctxemb re-embedded).
    rebuild = isinstance(source, GuardedCollection) and client is source.client
    return GuardedCollection(copy.into(target, embedder, rebuild=rebuild))
