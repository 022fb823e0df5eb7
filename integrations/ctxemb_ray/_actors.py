"""The Ray side of distributed indexing: the indexing actors and the Ray Data pipeline.

An actor loads its model once and opens the stamped index through the guard before it writes
(weights digest, then the stamp's canary), over the driver its store makes on the actor's node;
a refusal is sent back typed, with the batch, and the job's driver raises it. Ray is imported
only by :func:`ray_module`, inside the job.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import CtxembError, MissingDependencyError
from ctxemb_core.index import GuardedIndex, StoreDriver
from ctxemb_core.shards import read_rows

if TYPE_CHECKING:
    from ctxemb_ray._job import IndexSummary, StoreSession

# A batch whose write fails for one of these reasons is counted as failed (with the reason) and
# the job goes on; a re-run writes it. Anything else (a refused contract, a drifting encoder, a
# bug) fails the whole job.
_RETRYABLE = ("StoreUnavailableError", "IncompleteWriteError")


def ray_module() -> Any:
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


def held_to_contract(
    contract: EmbeddingContract,
    store: StoreSession,
    model_path: str | None,
    cache: bool,
    remote: dict[str, Any] | None,
) -> tuple[Embedder, AbstractContextManager[StoreDriver], GuardedIndex]:
    """An actor's embedder, its session with the store (entered: the actor holds it for its
    life) and the stamped index opened through the guard over the driver the session made on
    this node, proven before anything is written: the model folder must hash to the
    contract's weights (ContractMismatchError), and the embedder must re-embed the stamp's
    canary to its vectors (EncoderDriftError)."""
    embedder = Embedder(
        contract,
        path=model_path,
        cache=EmbeddingCache() if cache else None,
        **(remote or {}),
    )
    session = store(embedder)
    driver = session.__enter__()
    # sample=0: the stored documents were verified once, by the job's driver.
    return embedder, session, GuardedIndex.open(driver, embedder, create=False, sample=0)


class _IndexActor:
    """One pool actor: loads the model once, proves it against the stamp, then writes batches."""

    def __init__(
        self,
        contract: EmbeddingContract,
        store: StoreSession,
        model_path: str | None,
        cache: bool,
        remote: dict[str, Any] | None = None,
    ) -> None:
        self.refused: CtxembError | None = None
        try:
            _, self._session, self.index = held_to_contract(
                contract, store, model_path, cache, remote
            )
        except CtxembError as exc:
            # Sent back from each batch instead (nothing written): Ray reports an error raised
            # from an actor only as text, and the driver raises this one, typed, from it.
            self.refused = exc

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        ids = [str(i) for i in batch["id"]]
        texts = [str(t) for t in batch["text"]]
        if self.refused is not None:
            return {**_counts(0, 0, 0, 0, ""), "refusal": [pickle.dumps(self.refused)]}
        reason = ""
        try:
            # The sync of ctxemb_core.sync: new and edited texts embedded, unchanged ones left.
            report = self.index.sync(ids, texts)
            written, updated, skipped = report.embedded, len(report.updated), report.unchanged
            failed = 0
        except CtxembError as exc:
            if type(exc).__name__ not in _RETRYABLE:
                raise
            written, updated, skipped, failed = 0, 0, 0, len(ids)
            reason = f"{type(exc).__name__}: {exc}"
        return {**_counts(written, updated, skipped, failed, reason), "refusal": [b""]}


def _counts(
    written: int, updated: int, skipped: int, failed: int, reason: str
) -> dict[str, list[Any]]:
    return {
        "written": [written],
        "updated": [updated],
        "skipped": [skipped],
        "failed": [failed],
        "reason": [reason],
    }


def start_or_join(ray: Any, address: str | None, num_cpus: int | None) -> bool:
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


@contextmanager
def on_cluster(address: str | None, num_cpus: int | None) -> Iterator[Any]:
    """Ray, joined to ``address`` or a local instance started here (see
    :func:`start_or_join`), which is stopped on exit if this started it."""
    ray = ray_module()
    started = start_or_join(ray, address, num_cpus)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def run_pool(
    ray: Any,
    ds: Any,
    actor: type,
    settings: tuple[Any, ...],
    actors: int,
    batch_size: int,
    each: Callable[[dict[str, Any]], None],
) -> None:
    """Run ``ds`` through a pool of ``actors`` actors of class ``actor`` (built with
    ``settings``, one CPU each), ``batch_size`` rows a batch; each batch's row goes to
    ``each``, and the first refusal of an actor is raised, typed (:func:`collect`)."""
    ray.data.DataContext.get_current().enable_progress_bars = False
    out = ds.map_batches(
        actor,
        fn_constructor_args=settings,
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=1,
        # A dead actor is restarted and its batch retried (writes skip what is already there,
        # an upsert gives the same result): Ray Data's actor pools do this by default
        # (max_restarts=-1, max_task_retries=-1), so they are not given again as the
        # ray_remote_args that Ray 2.60 deprecates.
    )
    collect(out, each)


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


def run_job(
    ray: Any,
    items: list[dict[str, Any]],
    summary: IndexSummary,
    settings: tuple[Any, ...],
    actors: int,
    batch_size: int,
    progress: Callable[[int], None] | None,
) -> None:
    # The workers read their row ranges of the shards themselves; the driver never holds the
    # corpus. Reading asks for no CPU: the actors hold every CPU they were given, and a read
    # task waiting for one would wait forever. Nor does a CPU bound how many run at once, so
    # the pool does: one reader per actor keeps them fed (a range reads far faster than it
    # embeds), where one task per range would start a worker process for each.
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    readers = ray.data.TaskPoolStrategy(size=actors)
    ds = ds.map_batches(read_rows, batch_size=1, num_cpus=0, compute=readers)

    def count(row: dict[str, Any]) -> None:
        done = summary.add(row)
        if progress is not None:
            progress(done)

    # settings: (contract, store, model_path, cache, remote)
    run_pool(ray, ds, _IndexActor, settings, actors, batch_size, count)


def collect(out: Any, each: Callable[[dict[str, Any]], None]) -> None:
    """Hand each actor's row of ``out`` to ``each``; the first refusal, or a ctxemb error an
    actor raised, is raised here, typed."""
    rows = iter(out.iter_rows())
    try:
        for row in rows:
            if row["refusal"]:
                # An actor refused to start (other weights, a drifting encoder, a store it
                # could not open): it wrote nothing, and the job stops with its error (pickled
                # by this job's own actors).
                raise pickle.loads(row["refusal"])
            each(row)
    except CtxembError:
        raise
    except Exception as exc:
        cause = _refusal(exc)
        if cause is exc:
            raise
        raise cause from exc
    finally:
        # Stops the pipeline now when the job ends early (a refusal, an error, an interrupt):
        # its actors free their CPUs for the next job instead of when this is collected.
        close = getattr(rows, "close", None)
        if close is not None:
            close()
