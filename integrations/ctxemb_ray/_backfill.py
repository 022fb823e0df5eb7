"""An alias's backfill on a Ray cluster: the upgrade of an index that outgrows one machine.

The job's driver takes core's plan (:func:`ctxemb_core.aliases.plan_backfill`: the
ids the shadow lacks or holds with another text digest, and the ids to delete, from the digests
alone), hands the ids to re-embed to a pool of actors, and deletes what the target no longer
holds once every batch is written (``BackfillPlan.finish``). Each actor loads the NEW contract's
model once and opens the shadow through the guard before it writes (weights digest, then the
stamp's canary): an actor whose encoder is not the contract's writes nothing and the job fails
with its error. It reads its ids' texts from the current target over the store's driver on its
own node and writes them with core's :func:`~ctxemb_core.aliases.rewrite_records`, so
the vectors are the in-process backfill's. A re-run plans again and does only what is left; the
gates and the cutover stay core's (``check_gates``, ``cutover``).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ctxemb_core.aliases import (
    BackfillReport,
    Catalog,
    Encoders,
    plan_backfill,
    rewrite_records,
)
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import CtxembError
from ctxemb_core.index import StoreDriver
from ctxemb_core.lazy import remote_config
from ctxemb_core.validate import check_count
from ctxemb_ray._actors import held_to_contract, on_cluster, ray_module, run_pool
from ctxemb_ray._job import StoreSession

#: The parts of a target's record an actor reads to re-embed it.
_READ = frozenset({"text", "metadata"})


class _BackfillActor:
    """One pool actor: loads the new contract's model once, proves it against the shadow's
    stamp, then re-embeds the target's texts of each batch of ids into the shadow."""

    def __init__(
        self,
        contract: EmbeddingContract,
        target: StoreSession,
        shadow: StoreSession,
        model_path: str | None,
        cache: bool,
        remote: dict[str, Any] | None = None,
    ) -> None:
        self.refused: CtxembError | None = None
        self._sessions: list[AbstractContextManager[StoreDriver]] = []
        try:
            # Proven first (weights, canary): a refused actor never reads nor writes.
            embedder, session, self.shadow = held_to_contract(
                contract, shadow, model_path, cache, remote
            )
            self._sessions.append(session)
            # The target is read through its driver alone: its stamp was checked by the job's
            # driver when it planned, and reading needs none of the old contract's model.
            session = target(embedder)
            self.target = session.__enter__()
            self._sessions.append(session)
        except CtxembError as exc:
            self.refused = exc  # sent back with each batch, as the indexing actor does

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        if self.refused is not None:
            return {"written": [0], "refusal": [pickle.dumps(self.refused)]}
        records = self.target.read([str(i) for i in batch["id"]], _READ)
        written = rewrite_records(self.shadow, records, self.target.name)
        return {"written": [written], "refusal": [b""]}


def backfill_with_ray(
    catalog: Catalog,
    alias: str,
    encoders: Encoders | Embedder | Sequence[Any],
    *,
    sessions: Callable[[str], StoreSession],
    address: str | None = None,
    actors: int = 1,
    batch_size: int = 64,
    model_path: str | os.PathLike[str] | None = None,
    cache: bool = True,
    num_cpus: int | None = None,
    progress: Callable[[int], None] | None = None,
    url: str | None = None,
    api: str = "ctxemb",
    api_key_env: str | None = None,
    served_model: str | None = None,
) -> BackfillReport:
    """Re-embed the texts of an upgrading alias's target into its shadow with a pool of Ray
    actors: what :func:`ctxemb_core.aliases.backfill` does in one process, by the same plan.

    Args:
        catalog: the store, as the job's driver reaches it.
        alias: the alias, upgrading (``begin_upgrade``).
        encoders: the job's driver's encoders for both contracts (it opens the target and the
            shadow through the guard to plan, as the in-process backfill does).
        sessions: the store's :data:`StoreSession` of an index, by name (``ctxemb_chroma``:
            ``lambda name: AdapterSession("ctxemb_chroma", name, {"host": host, "port": port})``);
            every actor reads the target and writes the shadow through its own, so the store
            must be reachable from every node.
        address, actors, batch_size, cache, num_cpus, url, api, api_key_env, served_model: as
            :func:`ctxemb_ray.index_with_ray` takes them.
        model_path: the new contract's model folder each actor loads (``None``: found from the
            contract on each node); it must hash to the contract's weights and pass the shadow's
            canary, or the actor writes nothing and the job fails.
        progress: called with the number of documents each finished batch re-embedded.

    Returns:
        A :class:`~ctxemb_core.aliases.BackfillReport`, as the in-process backfill gives:
        re-embedded, already in step, deleted.

    Raises:
        AliasStateError: the alias is not upgrading. NoEncoderError: no encoder for a side.
        ContractMismatchError: an actor's model folder is not the new contract's.
        EncoderDriftError: an actor's encoder re-embeds the canary to other vectors.
        MissingDependencyError: Ray Data is not installed (``pip install 'ctxemb[ray]'``).
    """
    check_count(actors, "actors")
    check_count(batch_size, "batch_size")
    remote = {} if url is None else remote_config(url, api, api_key_env, model_path, served_model)
    ray_module()  # a missing Ray is said before the store is touched
    plan = plan_backfill(catalog, alias, encoders)
    written = 0
    if plan.todo:
        contract = plan.dest.stamp.contract
        settings = (
            contract,
            sessions(plan.source.name),
            sessions(plan.dest.name),
            None if model_path is None else str(model_path),
            cache,
            remote,
        )
        with on_cluster(address, num_cpus) as ray:
            # Ids only travel: each actor reads its texts from the target itself.
            ds = ray.data.from_items([{"id": i} for i in plan.todo])

            def count(row: dict[str, Any]) -> None:
                nonlocal written
                written += int(row["written"])
                if progress is not None:
                    progress(int(row["written"]))

            run_pool(ray, ds, _BackfillActor, settings, actors, batch_size, count)
    # Only once every batch is written: a job that failed part-way deletes nothing.
    return plan.finish(written)
