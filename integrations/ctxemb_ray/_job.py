"""Bulk indexing on a Ray cluster into a stamped index, in any store whose driver each node
can make.

The optional extra ``ctxemb[ray]`` (Ray Data); Ray is imported only inside the functions here.
The corpus side (shards, their checks and row ranges) is :mod:`ctxemb_core.shards`; the store
side is a :data:`StoreSession`, a picklable callable which makes the index's driver on whichever
node calls it (for a store adapter, an :class:`~ctxemb_ray.AdapterSession`: what
``ctxemb_chroma.index_with_ray`` gives for a collection on a Chroma server,
``ctxemb_pgvector.index_with_ray`` for a table).

The job's driver creates (or opens and verifies) the stamped index, reads the corpus as a Ray
Dataset and runs ``map_batches`` over a pool of indexing actors. Each actor loads its model once
and, before it writes anything, opens the index through the guard: its model folder must hash
to the contract's weights digest and it re-embeds the stamp's canary, so an actor on a node with
altered weights or another library version refuses to start and writes nothing; the job then
fails with that actor's error. Writes are a sync by id (:mod:`ctxemb_core.sync`): a document
already stored with the same text is left alone, one whose text changed is re-embedded and
replaced, so a batch that Ray retries after an actor died, or a whole re-run, writes nothing
twice, and a re-run over an edited corpus updates what changed.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.index import GuardedIndex, StoreDriver
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
from ctxemb_core.validate import check_count, check_flag
from ctxemb_ray._actors import on_cluster, ray_module, run_job

#: What a store's adapter gives the job: called with the node's embedder, it opens a session
#: with the store and yields the index's driver (closing what it opened on exit). It is sent
#: to every actor, so it must pickle: a module-level class holding addresses and names only
#: (a :class:`DriverSession`, such as :class:`~ctxemb_ray.AdapterSession`).
StoreSession = Callable[[Embedder], AbstractContextManager[StoreDriver]]

#: Stored records the driver reads per page when it compares the corpus with the index.
_PAGE = 2048

__all__ = ["DriverSession", "IndexSummary", "StoreSession", "index_with_ray"]


class DriverSession(ABC):
    """A :data:`StoreSession` as a store's adapter writes one: a frozen dataclass holding the
    store's address and the index's name (so it pickles), whose :meth:`open` connects and makes
    the driver. Every actor calls the session on its own node; the client is closed after."""

    @abstractmethod
    def open(self, embedder: Embedder) -> tuple[Any, StoreDriver]:
        """A client of the store (closed with ``.close()``) and the index's driver over it."""

    @contextmanager
    def __call__(self, embedder: Embedder) -> Iterator[StoreDriver]:
        client, driver = self.open(embedder)
        try:
            yield driver
        finally:
            client.close()


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
        count: documents in the index when the job ended.
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
    store: StoreSession,
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
    served_model: str | None = None,
) -> IndexSummary:
    """Index a corpus into a stamped index with a pool of Ray actors.

    Args:
        source: a BEIR folder, a ``.jsonl``/``.jsonl.gz`` corpus or a folder of such shards,
            or Parquet (a file or a folder of shards with ``_id``, ``text`` and optionally
            ``title`` columns). The driver checks every shard first; the workers read them.
        contract: the contract to index under; the index is created stamped with it, or must
            already carry it.
        store: the store's :data:`StoreSession` (every actor makes its own driver with it, so
            the store must be reachable from every node).
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
        delete_missing: after every batch is written (none failed), delete the index's ids the
            corpus does not have.
        dry_run: compare the corpus with the index and say what a run would do (from the text
            digests the shards are checked with); no cluster is started, nothing is embedded
            or written.
        url: the embedding server the driver and every actor embed through (``ctxemb serve``,
            or any OpenAI-compatible server with ``api="openai"``), instead of loading the model
            on each node; each holds it to the contract (fingerprint, canary) before writing.
        api: the server's protocol, ``"ctxemb"`` or ``"openai"``.
        api_key_env: the environment variable holding the server's API key (on every node).
        served_model: the model id the server answers to, where it is not the contract's (a
            server started with ``--served-model-name``; on ``ctxemb serve`` of several
            contracts, the id of this one).

    Returns:
        An :class:`IndexSummary`: written (updated among them), skipped as unchanged, failed
        with reasons, deleted.

    Raises:
        DataFormatError: a shard is malformed, an id repeats, or there are no documents
            (nothing is written).
        ContractMismatchError: the index, or an actor's model folder, is not the contract's.
        EncoderDriftError: an actor's encoder re-embeds the canary to other vectors.
        StoreUnavailableError: the store cannot be reached by the driver or an actor.
        MissingDependencyError: Ray Data is not installed (``pip install 'ctxemb[ray]'``).
    """
    check_count(actors, "actors")
    check_count(batch_size, "batch_size")
    check_flag(delete_missing, "delete_missing")
    check_flag(dry_run, "dry_run")
    # With url=, the driver and every actor embed through that server (each holds it to the
    # contract: fingerprint and canary); the settings carry the key's variable, never the key.
    remote = {} if url is None else remote_config(url, api, api_key_env, model_path, served_model)
    shards = corpus_shards(Path(source))
    corpus, counts = checked_ids(shards)  # every shard checked before anything is written
    if not dry_run:
        ray_module()  # a missing Ray is said before the store is touched
    # The driver creates the stamped index (or verifies the existing one) first: a store that
    # is down or an index under another contract is said before any actor starts.
    embedder = Embedder(contract, **remote)
    with store(embedder) as driver:
        if dry_run and driver.head() is None:
            return IndexSummary(written=len(corpus), total=len(corpus), dry_run=True)
        plan, stored = _plan(GuardedIndex.open(driver, embedder, create=not dry_run), corpus)
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
        with on_cluster(address, num_cpus) as ray:
            path = None if model_path is None else str(model_path)
            settings = (contract, store, path, cache, remote)
            items = work_items(shards, counts, actors, batch_size)
            run_job(ray, items, summary, settings, actors, batch_size, progress)
    with store(embedder) as driver:
        if delete_missing and not summary.failed:
            # Only once every document is written: a job that failed part-way deletes nothing.
            index = GuardedIndex.open(driver, embedder, create=False, sample=0)
            summary.deleted = tuple(index.delete_missing(corpus))
        summary.count = driver.count()
    return summary


def _plan(index: GuardedIndex, corpus: dict[str, str]) -> tuple[SyncReport, list[str]]:
    """The sync's decision for the whole corpus, made by the driver from the text digests (the
    same rule the actors apply to each batch), and the stored ids: a re-run with nothing changed
    starts no cluster."""
    stored: dict[str, Any] = {}
    while True:  # page by page: the driver holds the digests and one page of texts
        got = index.page(len(stored), _PAGE, include=("text", "metadata"))
        # As the actors decide: the digest where there is one, else the stored text's.
        stored.update((r.id, (_legacy_digest(r.text, r.metadata), r.metadata)) for r in got)
        if len(got) < _PAGE:
            break
    plan = plan_sync(list(corpus), list(corpus.values()), stored, same=digest_unchanged)
    return plan, list(stored)


def _legacy_digest(document: str | None, metadata: Any) -> str | None:
    if document is None or (metadata or {}).get(TEXT_KEY):
        return None
    return text_digest(document)
