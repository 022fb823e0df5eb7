"""Bulk indexing on a Ray cluster into a stamped collection on a Chroma server.

The optional extra ``ctxemb[ray]`` (Ray Data); Ray is imported only inside the functions here.
The driver creates (or opens and verifies) the stamped collection, reads the corpus as a Ray
Dataset and runs ``map_batches`` over a pool of indexing actors. Each actor loads its model once
and, before it writes anything, opens the collection through the guard: its model folder must
hash to the contract's weights digest and it re-embeds the stamp's canary, so an actor on a node
with altered weights or another library version refuses to start and writes nothing; the job
then fails with that actor's error. Writes go by id and skip ids already present, so a batch
that Ray retries after an actor died, or a whole re-run, adds nothing twice.

Example:
    >>> from ctxemb_core import contract_for                            # doctest: +SKIP
    >>> from ctxemb_core.distributed import index_with_ray              # doctest: +SKIP
    >>> summary = index_with_ray("scifact/corpus.jsonl", contract_for(MODEL),
    ...                          collection="scifact", host="10.0.0.5", port=8000,
    ...                          address="auto", actors=8)              # doctest: +SKIP
    >>> summary.written, summary.skipped, summary.failed                # doctest: +SKIP
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxemb_core._shards import checked_ids, corpus_shards, read_rows, work_items
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import CtxembError, InvalidInputError, MissingDependencyError

__all__ = ["IndexSummary", "index_with_ray"]

# A batch whose write fails for one of these reasons is counted as failed (with the reason) and
# the job goes on; a re-run writes it. Anything else (a refused contract, a drifting encoder, a
# bug) fails the whole job.
_RETRYABLE = ("StoreUnavailableError", "IncompleteWriteError")


@dataclass
class IndexSummary:
    """What a distributed indexing job did.

    Attributes:
        written: documents this job embedded and wrote.
        skipped: documents skipped because their id was already in the collection.
        failed: documents not written; ``reasons`` says why (a re-run writes them).
        reasons: each distinct failure reason, with how many documents it covered.
        total: documents in the corpus.
        count: documents in the collection when the job ended.
    """

    written: int = 0
    skipped: int = 0
    failed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    total: int = 0
    count: int = 0


def _ray() -> Any:
    # Before ``ray`` is imported: keep a local instance on the loopback address and do not
    # report usage (the caller may have set either already).
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise MissingDependencyError(
            f"distributed indexing needs Ray Data ({exc}); install it with "
            "pip install 'ctxemb[ray]'"
        ) from None
    return ray


class _IndexActor:
    """One pool actor: loads the model once, proves it against the stamp, then writes batches."""

    def __init__(
        self,
        contract: EmbeddingContract,
        collection: str,
        host: str,
        port: int,
        model_path: str | None,
        cache: bool,
    ) -> None:
        from ctxemb_chroma import connect, open_collection
        from ctxemb_core import Embedder
        from ctxemb_core.cache import EmbeddingCache

        self.refused: CtxembError | None = None
        try:
            # Refuses a folder whose bytes are not the contract's weights (ContractMismatchError).
            embedder = Embedder(
                contract, path=model_path, cache=EmbeddingCache() if cache else None
            )
            self.client = connect(host=host, port=port)
            # Re-embeds the stamp's canary before anything is written (EncoderDriftError if it
            # disagrees); sample=0: the stored documents were verified once, by the driver.
            self.collection = open_collection(
                self.client, collection, embedder, create=False, sample=0
            )
        except CtxembError as exc:
            # Sent back from each batch instead (nothing written): Ray reports an error raised
            # from an actor only as text, and the driver raises this one, typed, from it.
            self.refused = exc

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        ids = [str(i) for i in batch["id"]]
        texts = [str(t) for t in batch["text"]]
        if self.refused is not None:
            return {**_counts(0, 0, 0, ""), "refusal": [pickle.dumps(self.refused)]}
        reason = ""
        try:
            written = self.collection.add_missing(ids, texts)
            skipped, failed = len(ids) - written, 0
        except CtxembError as exc:
            if type(exc).__name__ not in _RETRYABLE:
                raise
            written, skipped, failed = 0, 0, len(ids)
            reason = f"{type(exc).__name__}: {exc}"
        return {**_counts(written, skipped, failed, reason), "refusal": [b""]}


def _counts(written: int, skipped: int, failed: int, reason: str) -> dict[str, list[Any]]:
    return {"written": [written], "skipped": [skipped], "failed": [failed], "reason": [reason]}


def _connect(ray: Any, address: str | None, num_cpus: int | None) -> bool:
    """Connect to ``address`` (``"auto"``: the running cluster) or start a local instance on
    127.0.0.1; returns whether this call started it (and so must stop it)."""
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        return False
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    return True


def _refusal(exc: BaseException) -> BaseException:
    """The ctxemb error an actor raised, out of Ray's wrappers (else ``exc`` itself)."""
    seen: list[BaseException] = []
    todo: list[Any] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or any(e is s for s in seen):
            continue
        if isinstance(e, CtxembError):
            return e
        seen.append(e)
        todo += [e.__cause__, e.__context__, getattr(e, "cause", None)]
        todo += [getattr(e, "creation_task_error", None), getattr(e, "error", None)]
    return exc


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

    Returns:
        An :class:`IndexSummary`: written, skipped as already present, failed with reasons.

    Raises:
        DataFormatError: a shard is malformed, an id repeats, or there are no documents
            (nothing is written).
        ContractMismatchError: the collection, or an actor's model folder, is not the contract's.
        EncoderDriftError: an actor's encoder re-embeds the canary to other vectors.
        StoreUnavailableError: the server cannot be reached by the driver or an actor.
        MissingDependencyError: Ray Data is not installed (``pip install 'ctxemb[ray]'``).
    """
    if not isinstance(actors, int) or isinstance(actors, bool) or actors < 1:
        raise InvalidInputError(f"actors must be an integer >= 1, got {actors!r}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    shards = corpus_shards(Path(source))
    corpus_ids, counts = checked_ids(shards)  # every shard checked before anything is written
    ray = _ray()
    from ctxemb_chroma import connect, open_collection
    from ctxemb_core import Embedder

    # The driver creates the stamped collection (or verifies the existing one) first: a store
    # that is down or a collection under another contract is said before any actor starts.
    client: Any = connect(host=host, port=port)  # closes its session (see connect)
    try:
        stamped = open_collection(client, collection, Embedder(contract), create=True)
        present = stamped.ids()
    finally:
        client.close()
    summary = IndexSummary(total=len(corpus_ids))
    if all(i in present for i in corpus_ids):
        summary.skipped = len(corpus_ids)  # nothing to do: no cluster, no actors
    else:
        started = _connect(ray, address, num_cpus)
        try:
            settings = (contract, collection, host, port, model_path, cache)
            items = work_items(shards, counts, actors, batch_size)
            _run(ray, items, summary, settings, actors, batch_size, progress)
        finally:
            if started:
                ray.shutdown()
    client = connect(host=host, port=port)
    try:
        summary.count = _count(client, collection)
    finally:
        client.close()
    return summary


def _count(client: Any, collection: str) -> int:
    from ctxemb_chroma._store import translated

    with translated("counting the collection"):
        return int(client.get_collection(collection, embedding_function=None).count())


def _run(
    ray: Any,
    items: list[dict[str, Any]],
    summary: IndexSummary,
    settings: tuple[Any, ...],
    actors: int,
    batch_size: int,
    progress: Callable[[int], None] | None,
) -> None:
    contract, collection, host, port, model_path, cache = settings
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    # The workers read their row ranges of the shards themselves; the driver never holds the
    # corpus. Reading asks for no CPU: the actors hold every CPU they were given, and a read
    # task waiting for one would wait forever.
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    ds = ds.map_batches(read_rows, batch_size=1, num_cpus=0)
    out = ds.map_batches(
        _IndexActor,
        fn_constructor_args=(
            contract,
            collection,
            host,
            port,
            None if model_path is None else str(model_path),
            cache,
        ),
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=1,
        # A dead actor is restarted and its batch retried (writes skip ids already present).
        max_restarts=-1,
        max_task_retries=-1,
    )
    try:
        for row in out.iter_rows():
            if row["refusal"]:
                # An actor refused to start (other weights, a drifting encoder, a store it
                # could not open): it wrote nothing, and the job stops with its error (pickled
                # by this job's own actors).
                raise pickle.loads(row["refusal"])
            done = int(row["written"]) + int(row["skipped"]) + int(row["failed"])
            summary.written += int(row["written"])
            summary.skipped += int(row["skipped"])
            summary.failed += int(row["failed"])
            if row["reason"]:
                summary.reasons[str(row["reason"])] = summary.reasons.get(
                    str(row["reason"]), 0
                ) + int(row["failed"])
            if progress is not None:
                progress(done)
    except CtxembError:
        raise
    except Exception as exc:
        cause = _refusal(exc)
        if cause is exc:
            raise
        raise cause from exc
