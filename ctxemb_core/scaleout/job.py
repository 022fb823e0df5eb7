"""Bulk indexing on a Ray cluster into a stamped collection on a Chroma server.

The optional extra ``ctxemb[ray]`` (Ray Data); Ray is imported only inside the functions here.
It lives in the Chroma adapter because the actors write through it; what is not Chroma's (the
corpus shards, their checks and row ranges) is ``ctxemb_core.shards``.
The driver creates (or opens and verifies) the stamped collection, reads the corpus as a Ray
Dataset and runs ``map_batches`` over a pool of indexing actors. Each actor loads its model once
and, before it writes anything, opens the collection through the guard: its model folder must
hash to the contract's weights digest and it re-embeds the stamp's canary, so an actor on a node
with altered weights or another library version refuses to start and writes nothing; the job
then fails with that actor's error. Writes are a sync by id (:mod:`ctxemb_core.sync`): a
document already stored with the same text is left alone, one whose text changed is re-embedded
and replaced, so a batch that Ray retries after an actor died, or a whole re-run, writes nothing
twice, and a re-run over an edited corpus updates what changed.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxemb_chroma._collection import open_collection
from ctxemb_chroma._connect import connect
from ctxemb_chroma._ray_pipeline import ray_module, run_job, start_or_join
from ctxemb_chroma._store import stored_or_none, translated
from ctxemb_core import Embedder
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.guard import check_count, check_flag
from ctxemb_core.lazy import remote_config
from ctxemb_core.shards import checked_ids, corpus_shards, work_items
from ctxemb_core.sync import (
    TEXT_KEY,
    SyncReport,
    digest_unchanged,
    missing_ids,
    plan_sync,
    text_digest,
)

#: Stored records the driver reads per page when it compares the corpus with the collection.
_PAGE = 2048

__all__ = ["IndexSummary", "index_with_ray"]


@dataclass
class IndexSummary:
    """What a distributed indexing job did.

    Attributes:
        written: documents this job embedded and wrote (new ones and ``updated`` ones).
        updated: of those, documents whose stored text changed and were replaced.
        skipped: documents already stored with the same text (left alone).
        failed: documents not written; ``reasons`` says why (a re-run writes them).
        reasons: each distinct failure reason, with how many documents it covered.
        total: documents in the corpus.
        count: documents in the collection when the job ended.
        deleted: ids the corpus does not have, deleted (``delete_missing=True``).
        dry_run: nothing was embedded or written: ``written``, ``updated``, ``skipped`` and
            ``deleted`` are what a real run would do.
    """

    written: int = 0
    skipped: int = 0
    failed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    total: int = 0
    count: int = 0
    updated: int = 0
    deleted: tuple[str, ...] = ()
    dry_run: bool = False

    @property
    def added(self) -> int:
        """Documents that were not stored and were added."""
        return self.written - self.updated

    def add(self, batch: dict[str, Any]) -> int:
        """Count one batch's outcome (an actor's row); returns the documents it covered."""
        written, skipped, failed = (int(batch[k]) for k in ("written", "skipped", "failed"))
        self.written += written
        self.updated += int(batch["updated"])
        self.skipped += skipped
        self.failed += failed
        if batch["reason"]:
            reason = str(batch["reason"])
            self.reasons[reason] = self.reasons.get(reason, 0) + failed
        return written + skipped + failed


def index_with_ray(
    source: str | os.PathLike[str],
    contract: EmbeddingContract,
    *,
    collection: str,
    host: str,
    port: int,
    address: str | None = None,
    actors: int = 1,
    batch_size: int = 64,
    model_path: str | os.PathLike[str] | None = None,
    cache: bool = True,
    num_cpus: int | None = None,
    progress: Callable[[int], None] | None = None,
    delete_missing: bool = False,
    dry_run: bool = False,
    url: str | None = None,
    api: str = "ctxemb",
    api_key_env: str | None = None,
) -> IndexSummary:
    """Index a corpus into a stamped collection on a Chroma server with a pool of Ray actors.

    Args:
        source: a BEIR folder, a ``.jsonl``/``.jsonl.gz`` corpus or a folder of such shards,
            or Parquet (a file or a folder of shards with ``_id``, ``text`` and optionally
            ``title`` columns). The driver checks every shard first; the workers read them.
        contract: the contract to index under; the collection is created stamped with it, or
            must already carry it.
        collection: the collection's name on the server.
        host: the Chroma server's host, as every actor reaches it.
        port: the Chroma server's port.
        address: a running Ray cluster (``"auto"`` or ``"ray://..."``); ``None`` starts a local
            instance bound to 127.0.0.1 and stops it afterwards. An already initialised Ray is
            used as it is.
        actors: the number of indexing actors (one CPU each).
        batch_size: documents per actor batch (one write each).
        model_path: the model folder each actor loads; ``None`` finds it from the contract on
            each actor's node. Whatever the folder, it must hash to the contract's weights and
            pass the stamp's canary, or the actor refuses to start and writes nothing.
        cache: use the embedding cache (shared where the actors share a file system).
        num_cpus: CPUs of a local instance (``None``: Ray's own count).
        progress: called with the number of documents each finished batch covered.
        delete_missing: after every batch is written (none failed), delete the collection's
            ids the corpus does not have.
        dry_run: compare the corpus with the collection and say what a run would do (from the
            text digests the shards are checked with); no cluster is started, nothing is
            embedded or written.
        url: the embedding server the driver and every actor embed through (``ctxemb serve``,
            or any OpenAI-compatible server with ``api="openai"``), instead of loading the model
            on each node; each holds it to the contract (fingerprint, canary) before writing.
        api: the server's protocol, ``"ctxemb"`` or ``"openai"``.
        api_key_env: the environment variable holding the server's API key (on every node).

    Returns:
        An :class:`IndexSummary`: written (updated among them), skipped as unchanged, failed
        with reasons, deleted.

    Raises:
        DataFormatError: a shard is malformed, an id repeats, or there are no documents
            (nothing is written).
        ContractMismatchError: the collection, or an actor's model folder, is not the contract's.
        EncoderDriftError: an actor's encoder re-embeds the canary to other vectors.
        StoreUnavailableError: the server cannot be reached by the driver or an actor.
        MissingDependencyError: Ray Data is not installed (``pip install 'ctxemb[ray]'``).
    """
    check_count(actors, "actors")
    check_count(batch_size, "batch_size")
    check_flag(delete_missing, "delete_missing")
    check_flag(dry_run, "dry_run")
    # With url=, the driver and every actor embed through that server (each holds it to the
    # contract: fingerprint and canary); the settings carry the key's variable, never the key.
    remote = {} if url is None else remote_config(url, api, api_key_env, model_path)
    shards = corpus_shards(Path(source))
    corpus, counts = checked_ids(shards)  # every shard checked before anything is written
    if not dry_run:
        ray_module()  # a missing Ray is said before the store is touched
    # The driver creates the stamped collection (or verifies the existing one) first: a store
    # that is down or a collection under another contract is said before any actor starts.
    client: Any = connect(host=host, port=port)  # closes its session (see connect)
    try:
        if dry_run and stored_or_none(client, collection) is None:
            return IndexSummary(written=len(corpus), total=len(corpus), dry_run=True)
        stamped = open_collection(
            client, collection, Embedder(contract, **remote), create=not dry_run
        )
        plan, stored = _plan(stamped, corpus)
    finally:
        client.close()
    summary = IndexSummary(total=len(corpus))
    if dry_run:
        summary.written, summary.updated = len(plan.added) + len(plan.updated), len(plan.updated)
        summary.skipped, summary.dry_run = plan.unchanged, True
        summary.deleted = tuple(missing_ids(stored, corpus)) if delete_missing else ()
        summary.count = len(stored)
        return summary
    if not plan.added and not plan.updated:
        summary.skipped = len(corpus)  # nothing to do: no cluster, no actors
    else:
        ray = ray_module()
        started = start_or_join(ray, address, num_cpus)
        try:
            path = None if model_path is None else str(model_path)
            settings = (contract, collection, host, port, path, cache, remote)
            items = work_items(shards, counts, actors, batch_size)
            run_job(ray, items, summary, settings, actors, batch_size, progress)
        finally:
            if started:
                ray.shutdown()
    client = connect(host=host, port=port)
    try:
        if delete_missing and not summary.failed:
            # Only once every document is written: a job that failed part-way deletes nothing.
            guarded = open_collection(
                client, collection, Embedder(contract, **remote), create=False, sample=0
            )
            summary.deleted = tuple(guarded.delete_missing(corpus))
        summary.count = _count(client, collection)
    finally:
        client.close()
    return summary


def _plan(guarded: Any, corpus: dict[str, str]) -> tuple[SyncReport, list[str]]:
    """The sync's decision for the whole corpus, made by the driver from the text digests (the
    same rule the actors apply to each batch), and the stored ids: a re-run with nothing changed
    starts no cluster."""
    stored: dict[str, Any] = {}
    while True:  # page by page: the driver holds the digests and one page of texts
        with translated("reading the stored records"):
            got = guarded.get(include=["documents", "metadatas"], limit=_PAGE, offset=len(stored))
        rows = zip(got["ids"], got["documents"], got["metadatas"], strict=True)
        # As the actors decide: the digest where there is one, else the stored text's.
        stored.update((i, (_legacy_digest(d, m), m)) for i, d, m in rows)
        if len(got["ids"]) < _PAGE:
            break
    plan = plan_sync(list(corpus), list(corpus.values()), stored, same=digest_unchanged)
    return plan, list(stored)


def _count(client: Any, collection: str) -> int:
    with translated("counting the collection"):
        return int(client.get_collection(collection, embedding_function=None).count())


def _legacy_digest(document: str | None, metadata: Any) -> str | None:
    if document is None or (metadata or {}).get(TEXT_KEY):
        return None
    return text_digest(document)
