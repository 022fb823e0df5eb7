"""Dynamic batching: concurrent requests gathered into token-budget batches, one worker thread.

A request's texts wait in a queue. A batch starts at once when no other request is on its way
(one client pays no wait); while other requests are being read, the first waits at most
``max_wait_ms`` for them to join, and a batch is closed early once it holds ``batch_tokens``
tokens. While the worker embeds one batch, the next gathers. Texts are grouped by role inside
a batch and each group is embedded by one call of the embedder, which plans its own forward
passes by token length; a text's vector does not depend on its neighbours beyond float
rounding (int8 runs per text).

A server of several models has one batcher per model (a batch holds one model's texts, and
``max_queued`` holds for each model's queue) over one worker thread they share: the CPU runs
one batch at a time, in the order the batches close, and the requests being received count
as arriving for every model (a request's model is known only once it has been read).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ctxemb_core.backends._tokenize import Tokenized
from ctxemb_core.contract import Role
from ctxemb_core.errors import CtxembError
from ctxemb_core.pooling import quantize

if TYPE_CHECKING:
    from ctxemb_core.embedder import Embedder
    from ctxemb_core.serve.limits import ServeLimits
    from ctxemb_core.serve.metrics import ModelCounters

__all__ = ["Arrivals", "Batcher", "BusyError"]


class BusyError(CtxembError):
    """More texts are waiting than the server's ``max_queued``; retry later (HTTP 503)."""


@dataclass
class _Job:
    texts: Sequence[str]  # a Tokenized from the embedder: the tokens the usage counted
    role: Role
    tokens: int
    raw: bool  # the contract's vectors before the precision step (what remote encoders ask)
    future: asyncio.Future[np.ndarray]
    queued: float = field(default_factory=time.perf_counter)


@dataclass
class Arrivals:
    """Requests received and not yet queued (being read, parsed, tokenized): the ones a batch
    may wait for. The service counts them in, :meth:`Batcher.embed` counts them out; the
    batchers of one server share it."""

    count: int = 0


class Batcher:
    """Gathers one model's embedding jobs and runs them on a worker thread, in arrival order.

    Args:
        embedder: the model's embedder.
        limits: the batching limits and the queue's bound.
        counters: the model's metrics.
        executor: the worker thread (one it makes and stops itself when not given; a
            server of several models gives its batchers one to share).
        arrivals: the requests on their way (shared by the batchers of one server).
    """

    def __init__(
        self,
        embedder: Embedder,
        limits: ServeLimits,
        counters: ModelCounters,
        *,
        executor: ThreadPoolExecutor | None = None,
        arrivals: Arrivals | None = None,
    ) -> None:
        self.embedder = embedder
        self.limits = limits
        self.counters = counters
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix="ctxemb-embed")
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task[None] | None = None
        self._queued = 0
        self.arrivals = arrivals or Arrivals()

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._loop(), name="ctxemb-batcher")

    async def stop(self) -> None:
        """Finish every job already queued, then stop the worker."""
        if self._queue is not None:
            while self._queued:
                await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._own_executor:
            self._executor.shutdown(wait=True)

    async def embed(self, texts: Sequence[str], role: Role, tokens: int, raw: bool) -> np.ndarray:
        """The vectors of ``texts`` once their batch has run (texts the embedder tokenized,
        :meth:`~ctxemb_core.embedder.Embedder.tokenize`, are embedded from those tokens)."""
        assert self._queue is not None, "the batcher was not started"
        self.arrivals.count -= 1
        if self._queued + len(texts) > self.limits.max_queued:
            raise BusyError(
                f"{self._queued} texts are already waiting (max_queued "
                f"{self.limits.max_queued}); retry shortly"
            )
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._queued += len(texts)
        self._queue.put_nowait(_Job(texts, role, tokens, raw, future))
        return await future

    async def _loop(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        wait = self.limits.max_wait_ms / 1000
        while True:
            jobs = [await self._queue.get()]
            tokens = jobs[0].tokens
            deadline = loop.time() + wait
            while tokens < self.limits.batch_tokens:
                try:
                    job = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    left = deadline - loop.time()
                    if left <= 0 or self.arrivals.count <= 0:  # nobody else is on the way
                        break
                    try:
                        job = await asyncio.wait_for(self._queue.get(), left)
                    except TimeoutError:
                        break
                jobs.append(job)
                tokens += job.tokens
            try:
                await self._run(loop, jobs)
            finally:
                self._queued -= sum(len(j.texts) for j in jobs)

    async def _run(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        started = time.perf_counter()
        waits = [started - j.queued for j in jobs]
        truncated = 0
        for role in (Role.QUERY, Role.DOCUMENT):
            group = [j for j in jobs if j.role is role and not j.future.done()]
            if not group:
                continue
            texts = _joined([j.texts for j in group])
            try:
                vectors, cut = await loop.run_in_executor(self._executor, self._embed, texts, role)
            except Exception as exc:  # each request of the group gets the error; the loop goes on
                for j in group:
                    if not j.future.done():
                        j.future.set_exception(exc)
                continue
            truncated += cut
            start = 0
            for j in group:
                part = vectors[start : start + len(j.texts)]
                start += len(j.texts)
                if not j.future.done():  # a client that went away leaves a cancelled future
                    j.future.set_result(
                        part if j.raw else quantize(part, self.embedder.contract.precision)
                    )
        self.counters.batch(sum(len(j.texts) for j in jobs), waits, truncated)

    def _embed(self, texts: Sequence[str], role: Role) -> tuple[np.ndarray, int]:
        # This call's count, returned with its vectors (never another thread's last_truncated).
        done = self.embedder.embed_float_counted(texts, role)
        return done.vectors, done.truncated


def _joined(parts: list[Sequence[str]]) -> Sequence[str]:
    """The texts of a group's jobs as one batch, their tokens kept when each job has them."""
    tokenized = [p for p in parts if isinstance(p, Tokenized)]
    if len(tokenized) == len(parts):
        return Tokenized.join(tokenized)
    return [t for p in parts for t in p]
